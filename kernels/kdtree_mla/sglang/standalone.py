"""Run SGLang's real Triton attention backend without installing SGLang (GPU tests, benchmarks).

SGLang's pure-Python wheel carries ``TritonAttnBackend`` and its Triton kernels, but importing
them the normal way pulls in the whole server (FastAPI, transformers, sgl-kernel ...).
:func:`build_tree` extracts only these files from the wheel, unchanged::

    sglang/srt/layers/attention/triton_backend.py
    sglang/srt/layers/attention/utils.py                  (create_flashinfer_kv_indices_triton)
    sglang/srt/layers/attention/triton_ops/extend_attention.py
    sglang/srt/layers/attention/triton_ops/decode_attention.py
    sglang/srt/layers/attention/triton_ops/prefill_attention.py

and writes small stand-ins for what they import (:data:`STUBS` says what each one is). Nothing
that runs on the target-verify path is stubbed: metadata (``init_forward_metadata``, the
CUDA-graph hooks), the KV-index kernel and ``extend_attention_fwd`` are SGLang's code. A
``sglang-<version>.dist-info`` makes the version readable by ``importlib.metadata``, as the
startup hook reads it in the image.

Releases that read SGLang's runtime context (0.5.14 on; a wheel with
``sglang/srt/runtime_context.py``) take :mod:`.standalone_runtime`'s files and stand-ins
instead; the lists below are the older releases' (0.5.9 to 0.5.13).

The builders in :mod:`.standalone_objects` (:func:`make_model_runner`, :class:`MLAPool`,
:func:`make_layer`, :func:`verify_batch`, exported here too) stand in for the model runner, the
KV pool and the speculative batch with exactly the attributes ``TritonAttnBackend`` reads.
They import torch when called.
"""

from __future__ import annotations

import ast
import re
import zipfile
from pathlib import Path

from kdtree_mla.sglang.standalone_objects import (
    MLAPool,
    make_layer,
    make_model_runner,
    verify_batch,
)

#: Files taken unchanged from the wheel (paths inside it).
REAL_FILES = (
    "sglang/srt/layers/attention/triton_backend.py",
    "sglang/srt/layers/attention/triton_ops/extend_attention.py",
    "sglang/srt/layers/attention/triton_ops/decode_attention.py",
    "sglang/srt/layers/attention/triton_ops/prefill_attention.py",
)
#: Taken too when the release has them: the KV-index kernel (``utils.py`` up to 0.5.12,
#: ``triton_ops/kv_indices.py`` from 0.5.13), the split-count helper (0.5.13), and the plugin
#: framework (0.5.11 on: ``load_plugins`` discovers the kernel's entry point for real).
OPTIONAL_FILES = (
    "sglang/srt/layers/attention/utils.py",
    "sglang/srt/layers/attention/triton_ops/kv_indices.py",
    "sglang/srt/layers/attention/triton_ops/metadata.py",
    "sglang/srt/plugins/__init__.py",
    "sglang/srt/plugins/hook_registry.py",
)

#: Stand-ins: path -> (what it replaces, source).
STUBS: dict[str, tuple[str, str]] = {
    "sglang/__init__.py": ("the frontend language package (imports the whole server)", ""),
    "sglang/srt/utils/__init__.py": (
        "sglang.srt.utils.common: the six helpers the Triton files import, same bodies",
        """
import os
import torch


def is_cuda():
    return torch.version.cuda is not None and torch.cuda.is_available()


def is_hip():
    return torch.version.hip is not None


def get_bool_env_var(name, default="false"):
    return os.getenv(name, default).lower() in ("true", "1")


def get_int_env_var(name, default=0):
    value = os.getenv(name)
    return default if value is None or not value.strip() else int(value)


def get_device_core_count(device_id=0):
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(device_id).multi_processor_count
    return 0


def next_power_of_2(n):
    return 1 << (n - 1).bit_length() if n > 0 else 1


def is_gfx942_supported():
    return False
""",
    ),
    "sglang/srt/utils/common.py": (
        "is_npu() = False (0.5.13's base backend)",
        "def is_npu():\n    return False\n",
    ),
    "sglang/kernel_api_logging.py": (
        "debug_kernel_api: the identity decorator (logging off, as by default)",
        "def debug_kernel_api(fn):\n    return fn\n",
    ),
    "sglang/srt/mem_cache/swa_memory_pool.py": (
        "SWAKVPool: a class no test pool is an instance of (no sliding window)",
        "class SWAKVPool:\n    pass\n",
    ),
    "sglang/srt/environ.py": (
        "envs.SGLANG_PLUGINS (the plugin framework's filter), read from the environment",
        """
import os
from types import SimpleNamespace

envs = SimpleNamespace(
    SGLANG_PLUGINS=SimpleNamespace(get=lambda: os.environ.get("SGLANG_PLUGINS", "")),
    SGLANG_PLATFORM=SimpleNamespace(get=lambda: os.environ.get("SGLANG_PLATFORM", "")),
)
""",
    ),
    "sglang/srt/layers/attention/attention_registry.py": (
        "register_attention_backend and ATTENTION_BACKENDS (same body), without the built-ins",
        """
ATTENTION_BACKENDS = {}


def register_attention_backend(name):
    def decorator(fn):
        ATTENTION_BACKENDS[name] = fn
        return fn

    return decorator
""",
    ),
    "sglang/srt/server_args.py": (
        "ATTENTION_BACKEND_CHOICES and add_attention_backend_choices (same body), nothing else",
        """
ATTENTION_BACKEND_CHOICES = ["triton", "flashinfer", "fa3"]


def add_attention_backend_choices(choices):
    ATTENTION_BACKEND_CHOICES.extend(choices)
""",
    ),
    "sglang/srt/configs/model_config.py": (
        "AttentionArch only",
        """
from enum import IntEnum, auto


class AttentionArch(IntEnum):
    MLA = auto()
    MHA = auto()
""",
    ),
    "sglang/srt/layers/attention/base_attn_backend.py": (
        "AttentionBackend: a base class with 0.5.13's no-op graph hooks (forward() dispatch unused)",
        """
class AttentionBackend:
    def __init__(self):
        pass

    def init_forward_metadata_out_graph(self, forward_batch, in_capture=False):
        pass

    def init_forward_metadata_in_graph(self, forward_batch):
        pass
""",
    ),
    "sglang/srt/layers/dp_attention.py": (
        "get_attention_tp_size() = 1 (one attention-TP rank)",
        "def get_attention_tp_size():\n    return 1\n",
    ),
    "sglang/srt/layers/radix_attention.py": (
        "AttentionType only",
        """
from enum import Enum


class AttentionType(Enum):
    DECODER = "decoder"
    DECODER_BIDIRECTIONAL = "decoder_bidirectional"
    ENCODER_ONLY = "encoder_only"
""",
    ),
    "sglang/srt/model_executor/forward_batch_info.py": (
        "ForwardMode with 0.5.10's predicates; ForwardBatch is a plain namespace",
        """
from enum import IntEnum, auto
from types import SimpleNamespace


class ForwardMode(IntEnum):
    EXTEND = auto()
    DECODE = auto()
    MIXED = auto()
    IDLE = auto()
    TARGET_VERIFY = auto()
    DRAFT_EXTEND = auto()
    DRAFT_EXTEND_V2 = auto()

    def is_decode(self):
        return self == ForwardMode.DECODE

    def is_idle(self):
        return self == ForwardMode.IDLE

    def is_mixed(self):
        return self == ForwardMode.MIXED

    def is_decode_or_idle(self):
        return self in (ForwardMode.DECODE, ForwardMode.IDLE)

    def is_target_verify(self):
        return self == ForwardMode.TARGET_VERIFY

    def is_extend(self, include_draft_extend_v2=False):
        return self in (ForwardMode.EXTEND, ForwardMode.MIXED, ForwardMode.DRAFT_EXTEND,
                        ForwardMode.TARGET_VERIFY) or (
            include_draft_extend_v2 and self == ForwardMode.DRAFT_EXTEND_V2
        )

    def is_draft_extend_v2(self):
        return self == ForwardMode.DRAFT_EXTEND_V2

    def is_draft_extend(self, include_v2=False):
        return self == ForwardMode.DRAFT_EXTEND or (
            include_v2 and self == ForwardMode.DRAFT_EXTEND_V2
        )


class ForwardBatch(SimpleNamespace):
    pass


def build_inner_fb_view(*args, **kwargs):
    raise NotImplementedError("not part of the standalone tree")
""",
    ),
    "sglang/srt/speculative/spec_utils.py": (
        "generate_draft_decode_kv_indices: draft decode only, never reached here",
        "def generate_draft_decode_kv_indices(*args, **kwargs):\n"
        "    raise NotImplementedError('draft decode is not part of the standalone tree')\n"
        "\n\ndraft_kv_indices_buffer_width = draft_kv_indices_used_len = "
        "generate_draft_decode_kv_indices\n",
    ),
    "sgl_kernel/__init__.py": (
        "sgl-kernel (CUDA ops): utils.py imports concat_mla_absorb_q, unused on this path",
        "def concat_mla_absorb_q(*args, **kwargs):\n"
        "    raise NotImplementedError('sgl-kernel is not part of the standalone tree')\n",
    ),
    "sgl_kernel/utils.py": (
        "is_arch_support_pdl() = False (0.5.13 reads it; no PDL launches)",
        "def is_arch_support_pdl():\n    return False\n",
    ),
}


def build_tree(wheel: Path, dest: Path, *, version: str | None = None) -> Path:
    """Write the standalone SGLang tree under ``dest`` and return ``dest``.

    ``version`` overrides the one in the dist-info (to test the decline of unsupported versions
    on SGLang's real code); by default it is the wheel's. Raises ``FileNotFoundError`` naming
    the files a wheel lacks.
    """
    from kdtree_mla.sglang import standalone_runtime

    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        required: tuple[str, ...]
        optional: tuple[str, ...]
        if standalone_runtime.MARKER in names:
            required, optional, stubs = standalone_runtime.FILES, (), standalone_runtime.STUBS
        else:
            required, optional, stubs = REAL_FILES, OPTIONAL_FILES, STUBS
        missing = [f for f in required if f not in names]
        if missing:
            raise FileNotFoundError(f"{wheel.name} lacks {', '.join(missing)}")
        taken = [*required, *(f for f in optional if f in names)]
        for name in taken:
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(name))
        for rel, (_what, source) in stubs.items():
            if rel in taken:
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(
                _TAKEN_RE.sub(lambda m: _definition(zf, m[1], m[2]), source.lstrip("\n"))
            )
    for pkg in sorted({str(Path(f).parent) for f in (*taken, *stubs)}):
        init = dest / pkg / "__init__.py"
        if not init.exists():
            init.write_text("")
    wheel_version = wheel.name.split("-")[1]
    dist = dest / f"sglang-{version or wheel_version}.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: sglang\nVersion: {version or wheel_version}\n"
    )
    return dest


#: A stub line replaced by a definition's source from the wheel: ``#: taken: <path> <name>``.
_TAKEN_RE = re.compile(r"^#: taken: (\S+) (\w+)$", re.MULTILINE)


def _definition(zf: zipfile.ZipFile, path: str, name: str) -> str:
    """The source of the top-level class or function ``name`` in the wheel's ``path``,
    decorators included."""
    source = zf.read(path).decode()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            assert node.end_lineno is not None
            return "\n".join(source.splitlines()[first - 1 : node.end_lineno])
    raise FileNotFoundError(f"{path} in the wheel defines no {name}")


__all__ = [
    "OPTIONAL_FILES",
    "REAL_FILES",
    "STUBS",
    "MLAPool",
    "build_tree",
    "make_layer",
    "make_model_runner",
    "verify_batch",
]
