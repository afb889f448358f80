"""The standalone tree of releases that read SGLang's runtime context (read against 0.5.23).

From 0.5.14 on, ``TritonAttnBackend`` takes the server's settings from
``sglang.srt.runtime_context`` (``get_exec()``, ``get_spec()``, ``get_parallel()``,
``get_schedule()``) instead of ``model_runner.server_args``, turns ``req_to_token`` rows into
KV indices through the model runner's ``KVIndexTranslator`` and the batch's ``KVLocPlan``,
keeps its Triton kernels in ``sglang/kernels/ops/attention/`` and writes the KV cache through a
``KVWriteLoc``. :func:`.standalone.build_tree` uses this module's lists for a wheel that has
``sglang/srt/runtime_context.py``:

* :data:`FILES` are taken unchanged: the Triton backend and its base class, the verify mask,
  the Triton kernels it imports, the KV-index translator and plan with their Triton kernels,
  the CUDA-graph settings module, the DCP layout helpers, the environment table, the choices
  module and the plugin framework.
* :data:`STUBS` stand in for what those import that cannot run without a server: the runtime
  context (published from the stand-in model runner, :func:`publish_context`), distributed
  communicators, the memory-pool classes the code only tests ``isinstance`` against, the model
  configuration helpers, the draft-decode helpers, ``sgl_kernel``. A stub line
  ``#: taken: <path in the wheel> <name>`` is replaced by that definition's source from the
  wheel (``ForwardMode``, ``KVWriteLoc``, ``TreeMaskMode``), so those bodies are the release's.
  The stand-ins the older layout writes too are :mod:`.standalone_stubs`'s.

Nothing on the target-verify path is stubbed: ``init_forward_metadata``, the CUDA-graph hooks
(``init_forward_metadata_out_graph`` / ``_in_graph``), ``pack_read_stream`` and its KV-index
kernel, ``forward_extend`` and ``extend_attention_fwd`` are the wheel's code.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kdtree_mla_testing.standalone_stubs import COMMON, classes, raising

#: The file whose presence selects this layout.
MARKER = "sglang/srt/runtime_context.py"

#: Taken unchanged from the wheel (paths inside it).
FILES = (
    "sglang/srt/layers/attention/triton_backend.py",
    "sglang/srt/layers/attention/base_attn_backend.py",
    "sglang/srt/layers/attention/verify_mask.py",
    "sglang/kernels/kernel_api_logging.py",
    "sglang/kernels/ops/attention/extend_attention.py",
    "sglang/kernels/ops/attention/decode_attention.py",
    "sglang/kernels/ops/attention/metadata.py",
    "sglang/kernels/ops/attention/kv_indices.py",
    "sglang/kernels/ops/attention/score_mod.py",
    "sglang/kernels/ops/attention/verify_mla.py",
    "sglang/kernels/ops/attention/verify_splitkv.py",
    "sglang/kernels/ops/attention/mla_kv_pack_quantize_fp8.py",
    "sglang/kernels/ops/kvcache/kv_read_table.py",
    "sglang/srt/mem_cache/kv_index_translator.py",
    "sglang/srt/mem_cache/kv_loc_plan.py",
    "sglang/srt/model_executor/cuda_graph_config.py",
    "sglang/srt/layers/dcp/layout.py",
    "sglang/srt/environ.py",
    "sglang/srt/arg_groups/choices.py",
    "sglang/srt/plugins/__init__.py",
    "sglang/srt/plugins/hook_registry.py",
)

_RUNTIME_CONTEXT = '''
_published = {}


def publish(**groups):
    """Set the groups the getters return (the stand-in model runner calls this)."""
    _published.update(groups)


def _get(name):
    try:
        return _published[name]
    except KeyError:
        raise ValueError(f"config namespace {name!r} not published") from None


def get_exec():
    return _get("exec")


def get_spec():
    return _get("spec")


def get_parallel():
    return _get("parallel")


def get_schedule():
    return _get("schedule")


def get_platform():
    return _get("platform")
'''

_MEMORY_POOL = """
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

#: taken: sglang/srt/mem_cache/memory_pool.py KVWriteLoc


#: taken: sglang/srt/mem_cache/memory_pool.py unwrap_write_loc
"""

_EAGLE_UTILS = """
from enum import IntEnum

#: taken: sglang/kernels/ops/speculative/spec_tree.py TreeMaskMode


def default_tree_mask_mode():
    return TreeMaskMode.FULL_MASK


def per_step_draft_out_cache_loc(*args, **kwargs):
    raise NotImplementedError("draft decode is not part of the standalone tree")
"""


#: Stand-ins: path -> (what it replaces, source); the ones both layouts write come from
#: :data:`.standalone_stubs.COMMON`.
STUBS: dict[str, tuple[str, str]] = {
    **COMMON,
    "sglang/srt/runtime_context.py": (
        "get_exec/get_spec/get_parallel/get_schedule: the groups the stand-in model runner "
        "publishes from its server arguments (one rank, no DCP)",
        _RUNTIME_CONTEXT,
    ),
    "sglang/srt/mem_cache/memory_pool.py": (
        "the wheel's KVWriteLoc and unwrap_write_loc only",
        _MEMORY_POOL,
    ),
    "sglang/srt/speculative/eagle_utils.py": (
        "the wheel's TreeMaskMode, default_tree_mask_mode on CUDA (FULL_MASK); draft helpers raise",
        _EAGLE_UTILS,
    ),
    "sglang/srt/configs/hybrid_arch.py": (
        "mambaish_config() = None: the model has no linear-attention layers",
        "def mambaish_config(model_config):\n    return None\n",
    ),
    "sglang/srt/distributed/device_communicators/pynccl_allocator.py": (
        "use_symmetric_memory: a null context (one rank; DCP decode only)",
        "from contextlib import nullcontext\n\n\n"
        "def use_symmetric_memory(*args, **kwargs):\n    return nullcontext()\n",
    ),
    "sglang/srt/layers/dcp/__init__.py": (
        "get_dcp_lens from the taken layout.py; the DCP kernels and collectives raise (DCP off)",
        "from sglang.srt.layers.dcp.layout import get_dcp_lens  # noqa: F401\n"
        + raising(
            "cp_lse_ag_out_rs_mha",
            "create_triton_kv_indices_for_dcp_triton",
            why="decode context parallelism is off in the standalone tree",
        ),
    ),
    "sglang/srt/mem_cache/deepseek_v4_memory_pool.py": (
        "DeepSeekV4TokenToKVPool: a class no stand-in pool is an instance of",
        classes("DeepSeekV4TokenToKVPool"),
    ),
    "sglang/srt/mem_cache/allocator/unified_hybrid_swa.py": (
        "UnifiedSWAAllocatorBase: the unified pool's allocator, not used (a plain pool)",
        classes("UnifiedSWAAllocatorBase"),
    ),
    "sglang/srt/mem_cache/allocator/unified_mamba.py": (
        "UnifiedMambaTokenToKVPoolAllocator, likewise",
        classes("UnifiedMambaTokenToKVPoolAllocator"),
    ),
    "sglang/srt/mem_cache/unified_draft_pool.py": (
        "fused_draft_host_allocator() = None: no fused draft pool",
        "def fused_draft_host_allocator(token_to_kv_pool):\n    return None\n",
    ),
    "sglang/kernels/jit/utils/__init__.py": (
        "is_arch_support_pdl() = False (the fp8 prefill packer's PDL launch; not on this path)",
        "def is_arch_support_pdl():\n    return False\n",
    ),
}


def publish_context(server_args: Any, *, device: str) -> None:
    """Publish the runtime context the release's backend reads, from ``server_args``.

    Imports the tree's stand-in ``runtime_context`` and the wheel's ``cuda_graph_config``.
    """
    from sglang.srt import runtime_context
    from sglang.srt.model_executor.cuda_graph_config import Backend, CudaGraphConfig

    graphs = Backend.DISABLED if server_args.disable_cuda_graph else Backend.FULL
    runtime_context.publish(
        exec=SimpleNamespace(
            kernel=SimpleNamespace(
                enable_lean_attention=None,
                triton_attention_num_kv_splits=server_args.triton_attention_num_kv_splits,
                triton_attention_split_tile_size=server_args.triton_attention_split_tile_size,
            ),
            dllm=SimpleNamespace(dllm_algorithm=None),
            deterministic=SimpleNamespace(
                enable_deterministic_inference=server_args.enable_deterministic_inference
            ),
            graph=SimpleNamespace(
                cuda_graph_config=CudaGraphConfig.from_dict(
                    {
                        "decode": {"backend": graphs, "max_bs": server_args.cuda_graph_max_bs},
                        "prefill": {"backend": Backend.DISABLED},
                    }
                )
            ),
        ),
        spec=SimpleNamespace(
            speculative_algorithm=server_args.speculative_algorithm,
            speculative_num_draft_tokens=server_args.speculative_num_draft_tokens,
            speculative_num_steps=server_args.speculative_num_steps,
            speculative_eagle_topk=server_args.speculative_eagle_topk,
        ),
        parallel=SimpleNamespace(
            tp_size=1,
            attn_tp_size=1,
            attn_dcp_size=1,
            attn_dcp_rank=0,
            dcp_enabled=False,
            dcp_size=1,
            dcp_rank=0,
            dcp_group=None,
        ),
        schedule=SimpleNamespace(
            chunked_prefill_size=server_args.chunked_prefill_size,
            page_size=server_args.page_size,
        ),
        platform=SimpleNamespace(device=device),
    )


def fit_runner(runner: Any, pool: Any) -> None:
    """Give the stand-in model runner what this layout's backend reads beyond the older ones:
    the published runtime context and the wheel's ``KVIndexTranslator`` over its pool."""
    from sglang.srt.mem_cache.kv_index_translator import KVIndexTranslator

    publish_context(runner.server_args, device=str(runner.device))
    draft = runner.server_args.speculative_num_draft_tokens
    runner.decode_num_tokens_per_req = lambda *, num_draft_tokens=None: num_draft_tokens or draft
    runner.kv_index_translator = KVIndexTranslator(
        req_to_token=runner.req_to_token_pool.req_to_token,
        token_to_kv_pool_allocator=runner.token_to_kv_pool_allocator,
        token_to_kv_pool=pool,
        page_size=runner.page_size,
        device=runner.device,
        is_draft_worker=runner.is_draft_worker,
    )


def bind_plan(runner: Any, batch: Any) -> None:
    """Give ``batch`` its ``KVLocPlan`` the way ``ForwardBatch.init_new`` does: the write
    window is the batch's ``out_cache_loc`` (a plain pool's ids are physical)."""
    translator = runner.kv_index_translator
    plan = translator.plan(
        req_pool_indices=batch.req_pool_indices,
        seq_lens=batch.seq_lens,
        seq_lens_cpu=batch.seq_lens_cpu,
        write_virtual=batch.out_cache_loc,
    )
    plan.bind(batch, translator)
