"""Random verify-call inputs for tests and benchmarks (SGLang target-verify layout).

Unused KV-pool rows are poisoned with NaN so a kernel that reads a slot it was not given
produces NaN; the pool order is a random permutation (page size 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kdtree_mla_testing.ref import (
    build_custom_mask,
    random_tree_parents,
    tree_mask_from_parents,
    verify_attention_ref,
    verify_attention_torch,
)

__all__ = ["KV_DTYPES", "VerifyInputs", "make_inputs"]

#: KV pool element types by SGLang's --kv-cache-dtype names (None: bf16), for the benchmarks'
#: --kv-dtype; an fp8 pool is ``make_inputs(kv_dtype=...)``'s
KV_DTYPES: dict[str, torch.dtype | None] = {
    "bf16": None,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}


@dataclass
class VerifyInputs:
    q: torch.Tensor
    k_extend: torch.Tensor
    v_extend: torch.Tensor
    k_buffer: torch.Tensor
    v_buffer: torch.Tensor
    qo_indptr: torch.Tensor
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    custom_mask: torch.Tensor | None
    mask_indptr: torch.Tensor | None
    sm_scale: float
    prefix_lens: list[int]
    draft_lens: list[int]
    # fp8 pools (make_inputs kv_dtype): the descales the kernel and the reference take.
    k_descale: float = 1.0
    v_descale: float = 1.0

    @property
    def num_tokens(self) -> int:
        return int(self.q.shape[0])

    @property
    def num_heads(self) -> int:
        return int(self.q.shape[1])

    def reference(self, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
        """(o, lse) of the torch reference (``ref.verify_attention_ref``) on these inputs."""
        return verify_attention_ref(
            self.q,
            self.k_extend,
            self.v_extend,
            self.k_buffer,
            self.v_buffer,
            self.qo_indptr,
            self.kv_indptr,
            self.kv_indices,
            self.custom_mask,
            self.mask_indptr,
            self.sm_scale,
            dtype,
            k_descale=self.k_descale,
            v_descale=self.v_descale,
        )

    def torch_output(self) -> torch.Tensor:
        """o of plain PyTorch at the inputs' precision (``ref.verify_attention_torch``)."""
        return verify_attention_torch(
            self.q,
            self.k_extend,
            self.v_extend,
            self.k_buffer,
            self.v_buffer,
            self.qo_indptr,
            self.kv_indptr,
            self.kv_indices,
            self.custom_mask,
            self.mask_indptr,
            self.sm_scale,
            k_descale=self.k_descale,
            v_descale=self.v_descale,
        )

    def kv_bytes(self) -> int:
        """Bytes of KV a verify call must read: every prefix and draft token row once (pool rows
        at the pool's element size, draft rows bf16)."""
        pool_elem = self.k_buffer.element_size()
        return sum(self.prefix_lens) * 576 * pool_elem + sum(self.draft_lens) * 576 * 2


def make_inputs(
    prefix_lens: list[int],
    draft_lens: list[int],
    num_heads: int,
    *,
    device: torch.device | str = "cpu",
    seed: int = 0,
    tree: bool | None = True,
    index_dtype: torch.dtype = torch.int32,
    mask_indptr_dtype: torch.dtype = torch.int64,
    mask_dtype: torch.dtype = torch.uint8,
    spare_slots: int | None = None,
    sm_scale: float = 192**-0.5,
    q_scale: float = 1.0,
    kv_dtype: torch.dtype | None = None,
    k_scale: float = 1.0,
) -> VerifyInputs:
    """Fresh random inputs. ``tree``: True = random tree masks, False = causal chain masks,
    None = no custom mask at all (the kernel's causal fallback).

    ``kv_dtype`` (torch.float8_e4m3fn / float8_e5m2): the pool holds the keys divided by
    ``k_scale`` in that type, as SGLang stores them (unused rows NaN); ``k_descale`` and
    ``v_descale`` are ``k_scale``."""
    if len(prefix_lens) != len(draft_lens):
        raise ValueError("prefix_lens and draft_lens must have the same length")
    gen = torch.Generator().manual_seed(seed)
    dev = torch.device(device)
    total_prefix = sum(prefix_lens)
    t = sum(draft_lens)
    spare = max(16, total_prefix // 8) if spare_slots is None else spare_slots
    pool = total_prefix + spare

    def randn(*shape: int) -> torch.Tensor:
        # Generated on the device (fast for big pools) from a seed derived from gen.
        g = torch.Generator(device=dev).manual_seed(
            int(torch.randint(0, 2**62, (1,), generator=gen))
        )
        return torch.randn(*shape, generator=g, device=dev, dtype=torch.float32).to(torch.bfloat16)

    k_buffer = randn(pool, 1, 576)
    perm = torch.randperm(pool, generator=gen)
    used = perm[:total_prefix]
    unused = perm[total_prefix:]
    if unused.numel():
        k_buffer[unused.to(dev)] = float("nan")
    descale = 1.0
    if kv_dtype is not None:
        k_buffer = (k_buffer.float() / k_scale).to(kv_dtype)  # (NaN stays NaN)
        descale = float(k_scale)
    v_buffer = k_buffer[..., :512]
    k_extend = randn(t, 1, 576)
    v_extend = k_extend[..., :512]
    q = randn(t, num_heads, 576)
    if q_scale != 1.0:
        q = (q.float() * q_scale).to(torch.bfloat16)

    qo = [0]
    kv = [0]
    for p, d in zip(prefix_lens, draft_lens):
        qo.append(qo[-1] + d)
        kv.append(kv[-1] + p)
    custom_mask = mask_indptr = None
    if tree is not None:
        masks = []
        for d in draft_lens:
            if tree:
                masks.append(tree_mask_from_parents(random_tree_parents(d, gen)))
            else:
                masks.append(torch.ones((d, d), dtype=torch.bool).tril())
        custom_mask, mask_indptr = build_custom_mask(masks, prefix_lens, mask_indptr_dtype)
        custom_mask = custom_mask.to(mask_dtype).to(dev)
        mask_indptr = mask_indptr.to(dev)
    return VerifyInputs(
        q=q,
        k_extend=k_extend,
        v_extend=v_extend,
        k_buffer=k_buffer,
        v_buffer=v_buffer,
        qo_indptr=torch.tensor(qo, dtype=index_dtype, device=dev),
        kv_indptr=torch.tensor(kv, dtype=index_dtype, device=dev),
        kv_indices=used.to(index_dtype).to(dev),
        custom_mask=custom_mask,
        mask_indptr=mask_indptr,
        sm_scale=sm_scale,
        prefix_lens=list(prefix_lens),
        draft_lens=list(draft_lens),
        k_descale=descale,
        v_descale=descale,
    )
