"""Stand-ins both layouts of the standalone SGLang tree write (:mod:`.standalone` for 0.5.9 to
0.5.13, :mod:`.standalone_runtime` for the runtime-context releases): one source a module, so the
two layouts cannot drift apart. Each entry of :data:`COMMON` is ``path -> (what it replaces,
source)``; a source line ``#: taken: <path in the wheel> <name>`` is replaced by that definition's
source from the wheel when the tree is written.
"""

from __future__ import annotations


def raising(*names: str, why: str) -> str:
    """Source of functions ``names`` that raise NotImplementedError(why) when called."""
    return "".join(
        f"\n\ndef {n}(*args, **kwargs):\n    raise NotImplementedError({why!r})\n" for n in names
    )


def classes(*names: str) -> str:
    """Source of empty classes ``names`` (what the code only tests ``isinstance`` against)."""
    return "".join(f"\n\nclass {n}:\n    pass\n" for n in names)


#: sglang.srt.utils.common's helpers that the taken files of either layout import, with the
#: bodies SGLang has on CUDA (no ROCm, NPU or MUSA arch).
UTILS = """
import os
from functools import lru_cache

import torch


def is_cuda():
    return torch.cuda.is_available() and torch.version.cuda is not None


def is_hip():
    return torch.version.hip is not None


def is_xpu():
    return hasattr(torch, "xpu") and torch.xpu.is_available()


def is_npu():
    return False


def is_musa():
    return False


@lru_cache(maxsize=1)
def is_gfx95_supported():
    return False


@lru_cache(maxsize=1)
def is_gfx942_supported():
    return False


@lru_cache(maxsize=1)
def is_gfx1250_supported():
    return False


def get_bool_env_var(name, default="false"):
    return os.getenv(name, default).lower() in ("true", "1")


def get_int_env_var(name, default=0):
    value = os.getenv(name)
    if value is None or not value.strip():
        return default
    try:
        return int(value)
    except ValueError:
        return default


def get_device_core_count(device_id=0):
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(device_id).multi_processor_count
    return 0


def get_device_capability(device_id=0):
    if torch.cuda.is_available():
        return torch.cuda.get_device_capability(device_id)
    return None, None


def next_power_of_2(n):
    return 1 << (n - 1).bit_length() if n > 0 else 1
"""

_FORWARD_BATCH_INFO = """
from __future__ import annotations

from enum import IntEnum, auto
from types import SimpleNamespace

#: taken: sglang/srt/model_executor/forward_batch_info.py ForwardMode


class ForwardBatch(SimpleNamespace):
    pass


def build_inner_fb_view(*args, **kwargs):
    raise NotImplementedError("not part of the standalone tree")
"""

_MODEL_CONFIG = """
from enum import IntEnum, auto


class AttentionArch(IntEnum):
    MLA = auto()
    MHA = auto()


def _hf_arch(config):
    archs = (
        config.get("architectures")
        if isinstance(config, dict)
        else getattr(config, "architectures", None)
    )
    return archs[0] if archs else None


def is_dspark_draft(config):
    return _hf_arch(config) in ("DSparkDraftModel", "DSparkMiniMaxDraftModel")


def is_kimi_k3(config):
    return _hf_arch(config) in ("KimiK3ForConditionalGeneration", "KimiK3LinearForCausalLM")


def is_qwen3_5(config):
    return _hf_arch(config) in (
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3_5ForCausalLM",
        "Qwen3_5MoeForCausalLM",
    )
"""

_ATTENTION_REGISTRY = """
ATTENTION_BACKENDS = {}


def register_attention_backend(name):
    def decorator(fn):
        ATTENTION_BACKENDS[name] = fn
        return fn

    return decorator
"""

_RADIX_ATTENTION = """
from enum import Enum


class AttentionType(Enum):
    DECODER = "decoder"
    DECODER_BIDIRECTIONAL = "decoder_bidirectional"
    ENCODER_ONLY = "encoder_only"
"""

_NO_DRAFT_DECODE = "draft decode is not part of the standalone tree"

#: Stand-ins both layouts write: path -> (what it replaces, source).
COMMON: dict[str, tuple[str, str]] = {
    "sglang/__init__.py": ("the frontend language package (imports the whole server)", ""),
    "sglang/srt/utils/__init__.py": (
        "sglang.srt.utils.common's helpers the taken files import",
        "from sglang.srt.utils.common import *  # noqa: F401,F403\n",
    ),
    "sglang/srt/utils/common.py": ("the helpers themselves, same bodies on CUDA", UTILS),
    "sglang/srt/model_executor/forward_batch_info.py": (
        "the wheel's ForwardMode; ForwardBatch is a plain namespace",
        _FORWARD_BATCH_INFO,
    ),
    "sglang/srt/configs/model_config.py": (
        "AttentionArch and the architecture tests (same bodies)",
        _MODEL_CONFIG,
    ),
    "sglang/srt/layers/attention/attention_registry.py": (
        "register_attention_backend and ATTENTION_BACKENDS (same body), without the built-ins",
        _ATTENTION_REGISTRY,
    ),
    "sglang/srt/layers/radix_attention.py": ("AttentionType only", _RADIX_ATTENTION),
    "sglang/srt/speculative/spec_utils.py": (
        "draft-decode index helpers: never reached on target verify",
        raising(
            "draft_kv_indices_buffer_width",
            "draft_kv_indices_used_len",
            "generate_draft_decode_kv_indices",
            "generate_draft_decode_window_kv_indices",
            "resolve_draft_decode_window",
            why=_NO_DRAFT_DECODE,
        ),
    ),
    "sglang/srt/mem_cache/base_swa_memory_pool.py": (
        "BaseSWAKVPool: a class no stand-in pool is an instance of (no sliding window)",
        classes("BaseSWAKVPool"),
    ),
    "sglang/srt/mem_cache/swa_memory_pool.py": (
        "SWAKVPool, likewise",
        "from sglang.srt.mem_cache.base_swa_memory_pool import BaseSWAKVPool\n\n\n"
        "class SWAKVPool(BaseSWAKVPool):\n    pass\n",
    ),
    "sgl_kernel/__init__.py": (
        "sgl-kernel (CUDA ops): concat_mla_absorb_q, which utils.py (to 0.5.12) imports and "
        "nothing on this path calls, raises",
        raising("concat_mla_absorb_q", why="sgl-kernel is not part of the standalone tree"),
    ),
    "sgl_kernel/utils.py": (
        "is_arch_support_pdl() = False (no PDL launches)",
        "def is_arch_support_pdl():\n    return False\n",
    ),
}
