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

The builders below (:func:`make_model_runner`, :class:`MLAPool`, :func:`make_layer`,
:func:`verify_batch`) stand in for the model runner, the KV pool and the speculative batch with
exactly the attributes ``TritonAttnBackend`` reads. They import torch when called.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

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


def _runtime_layout() -> bool:
    """Whether the SGLang on the path is a runtime-context release's standalone tree."""
    return importlib.util.find_spec("sglang.srt.runtime_context") is not None


class MLAPool:
    """``MLATokenToKVPool`` as the Triton backend uses it: one [S, 1, 576] bf16 buffer a layer.

    Unused rows hold NaN so a kernel that reads a slot it was not given shows it.
    """

    def __init__(self, num_layers: int, size: int, device: Any = "cuda", dtype: Any = None) -> None:
        import torch

        self.size = size
        self.start_layer = 0
        self.dtype = torch.bfloat16 if dtype is None else dtype
        self.buffers = [
            torch.full((size, 1, 576), float("nan"), dtype=torch.bfloat16, device=device).to(
                self.dtype
            )
            for _ in range(num_layers)
        ]

    def get_key_buffer(self, layer_id: int) -> Any:
        return self.buffers[layer_id]

    def get_value_buffer(self, layer_id: int) -> Any:
        return self.buffers[layer_id][..., :512]

    def get_kv_buffer(self, layer_id: int) -> tuple[Any, Any]:
        return self.get_key_buffer(layer_id), self.get_value_buffer(layer_id)

    def set_kv_buffer(self, layer: Any, loc: Any, cache_k: Any, cache_v: Any, *args: Any) -> None:
        loc = getattr(loc, "loc", loc)  # 0.5.14 on: a KVWriteLoc
        self.buffers[layer.layer_id][loc] = cache_k.to(self.buffers[layer.layer_id].dtype)


def make_model_runner(
    *,
    pool: MLAPool,
    num_heads: int,
    num_draft_tokens: int,
    max_requests: int,
    context_len: int,
    cuda_graph_max_bs: int | None = None,
    device: str = "cuda",
) -> SimpleNamespace:
    """A model runner with what ``TritonAttnBackend.__init__`` and the patch read.

    The KV-cache dtype is the pool's (``MLAPool(dtype=torch.float8_e4m3fn)`` for an fp8 cache).
    In a runtime-context release's tree it also publishes the runtime context and carries the
    wheel's ``KVIndexTranslator`` (:func:`.standalone_runtime.fit_runner`).
    """
    import torch
    from sglang.srt.configs.model_config import AttentionArch

    req_to_token = torch.zeros((max_requests, context_len), dtype=torch.int32, device=device)
    runner = SimpleNamespace(
        req_to_token_pool=SimpleNamespace(size=max_requests, req_to_token=req_to_token),
        sliding_window_size=None,
        token_to_kv_pool_allocator=None,
        token_to_kv_pool=pool,
        server_args=SimpleNamespace(
            speculative_num_draft_tokens=num_draft_tokens,
            speculative_num_steps=num_draft_tokens - 1,
            speculative_attention_mode="prefill",
            speculative_algorithm="EAGLE",
            speculative_eagle_topk=4,
            triton_attention_num_kv_splits=8,
            triton_attention_split_tile_size=None,
            enable_deterministic_inference=False,
            disable_cuda_graph=cuda_graph_max_bs is None,
            chunked_prefill_size=8192,
            cuda_graph_max_bs=cuda_graph_max_bs,
            page_size=1,
            attention_backend="triton",
        ),
        model_config=SimpleNamespace(
            attention_arch=AttentionArch.MLA,
            num_attention_heads=num_heads,
            get_max_num_attention_heads=lambda: num_heads,
            get_num_kv_heads=lambda *parallel: 1,
            context_len=context_len,
            head_dim=256,  # DeepSeek V3 / Kimi K2's ModelConfig
            hf_config=SimpleNamespace(architectures=["DeepseekV3ForCausalLM"]),
            is_encoder_decoder=False,
            kv_lora_rank=512,
            qk_nope_head_dim=128,
            qk_rope_head_dim=64,
            v_head_dim=512,
            swa_v_head_dim=None,
        ),
        hybrid_gdn_config=None,
        linear_attn_model_spec=None,
        kimi_linear_config=None,
        device=device,
        gpu_id=torch.cuda.current_device() if torch.cuda.is_available() else 0,
        is_draft_worker=False,
        spec_algorithm=SimpleNamespace(is_none=lambda: False),
        kv_cache_dtype=pool.dtype,
        page_size=1,
        prefill_attention_backend_str="triton",
        decode_attention_backend_str="triton",
    )
    if _runtime_layout():
        from kdtree_mla.sglang import standalone_runtime

        standalone_runtime.fit_runner(runner, pool)
    return runner


def make_layer(
    layer_id: int, num_heads: int, scaling: float, kv_scale: float | None = None
) -> SimpleNamespace:
    """The ``RadixAttention`` attributes ``forward_extend`` reads, for absorbed MLA.

    ``kv_scale`` sets the layer's fp8 KV scales (``k_scale``/``v_scale`` tensors and floats).
    """
    from sglang.srt.layers.radix_attention import AttentionType

    scale = None
    if kv_scale is not None:
        import torch

        scale = torch.tensor(kv_scale, dtype=torch.float32, device="cuda")

    return SimpleNamespace(
        layer_id=layer_id,
        tp_q_head_num=num_heads,
        qk_head_dim=576,
        v_head_dim=512,
        k_scale=scale,
        v_scale=scale,
        k_scale_float=kv_scale,
        v_scale_float=kv_scale,
        logit_capping_method="tanh",
        logit_cap=0.0,
        is_cross_attention=False,
        attn_type=AttentionType.DECODER,
        sliding_window_size=None,
        xai_temperature_len=-1,
        scaling=scaling,
    )


def verify_batch(
    *,
    runner: SimpleNamespace,
    prefix_lens: list[int],
    num_draft_tokens: int,
    parents: list[list[int]],
    req_rows: list[int],
    slots: Any,
    mask_dtype: Any = None,
) -> Any:
    """A TARGET_VERIFY forward batch (the tree's ``ForwardBatch``), as ``EagleVerifyInput.prepare_for_verify`` leaves it.

    ``slots`` gives each request's pool rows for its prefix and then its draft tokens
    (``slots[b]`` has ``prefix_lens[b] + D`` entries); they are written into ``req_to_token``.
    ``parents[b]`` is request b's draft tree (parents[b][i] < i, root -1). The mask is
    ``[D, P_b + D]`` row-major per request, prefix columns set (SGLang's FULL_MASK).
    """
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    device = runner.req_to_token_pool.req_to_token.device
    d = num_draft_tokens
    masks = []
    out_cache_loc = []
    for b, p in enumerate(prefix_lens):
        row = req_rows[b]
        runner.req_to_token_pool.req_to_token[row, : p + d] = slots[b].to(torch.int32)
        out_cache_loc.append(slots[b][p : p + d])
        tree = torch.zeros((d, d), dtype=torch.bool)
        for i, par in enumerate(parents[b]):
            tree[i, i] = True
            if par >= 0:
                tree[i] |= tree[par]
        full = torch.ones((d, p + d), dtype=torch.bool)
        full[:, p:] = tree
        masks.append(full.reshape(-1))
    custom_mask = torch.cat(masks).to(device)
    if mask_dtype is not None:
        custom_mask = custom_mask.to(mask_dtype)
    seq_lens = torch.tensor(prefix_lens, dtype=torch.int32, device=device)
    batch = ForwardBatch(
        forward_mode=ForwardMode.TARGET_VERIFY,
        batch_size=len(prefix_lens),
        req_pool_indices=torch.tensor(req_rows, dtype=torch.int64, device=device),
        seq_lens=seq_lens,
        seq_lens_sum=int(sum(prefix_lens)),
        seq_lens_cpu=seq_lens.cpu(),
        out_cache_loc=torch.cat(out_cache_loc).to(device=device, dtype=torch.int64),
        spec_info=SimpleNamespace(custom_mask=custom_mask, draft_token_num=d, num_tokens_per_req=d),
        token_to_kv_pool=runner.token_to_kv_pool,
        extend_seq_lens=None,
        extend_start_loc=None,
        extend_prefix_lens=None,
        extend_prefix_lens_cpu=None,
        extend_seq_lens_cpu=None,
        encoder_lens=None,
        positions=None,
        mha_one_shot=False,
        attn_attend_prefix_cache=None,
    )
    if getattr(runner, "kv_index_translator", None) is not None:
        from kdtree_mla.sglang import standalone_runtime

        standalone_runtime.bind_plan(runner, batch)
    return batch
