"""Stand-ins for the model runner, the KV pool, the layer and the speculative batch, with
exactly the attributes SGLang's ``TritonAttnBackend`` reads (GPU tests, benchmarks); they
import torch when called. Used on a tree :func:`.standalone.build_tree` wrote."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace
from typing import Any


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
        from kdtree_mla_testing import standalone_runtime

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
        from kdtree_mla_testing import standalone_runtime

        standalone_runtime.bind_plan(runner, batch)
    return batch
