"""Reference implementation and input helpers (pure torch; runs on the CPU).

``verify_attention_ref`` computes exactly what the kernel computes, in float64 by default,
from the inputs of a :class:`kdtree_mla.api.VerifyParams` (all but the outputs and the
workspace); ``verify_attention_torch`` computes it as plain PyTorch does in the inputs'
precision (bf16), whose error is the yardstick of the kernel's. The mask helpers build the SGLang tree-mask layout: request b's mask is
``[D_b, P_b + D_b]`` row-major, starting at ``mask_indptr[b]``; prefix columns are all visible;
draft column j is visible to draft row i when j is i or an ancestor of i.
"""

from __future__ import annotations

import torch

__all__ = [
    "build_custom_mask",
    "draft_visibility",
    "random_tree_parents",
    "tree_mask_from_parents",
    "verify_attention_ref",
    "verify_attention_torch",
]


def tree_mask_from_parents(parents: list[int]) -> torch.Tensor:
    """[D, D] bool: row i sees column j iff j is i or an ancestor of i (parents[root] = -1).

    Draft tokens are in topological order as SGLang lays them out: parents[i] < i.
    """
    d = len(parents)
    mask = torch.zeros((d, d), dtype=torch.bool)
    for i, par in enumerate(parents):
        if par >= i:
            raise ValueError(f"parents[{i}]={par}: a parent must precede its child")
        mask[i, i] = True
        if par >= 0:
            mask[i] |= mask[par]
    return mask


def random_tree_parents(d: int, gen: torch.Generator) -> list[int]:
    """A random tree of d nodes in topological order (node 0 is the root)."""
    if d == 0:
        return []
    parents = [-1]
    for i in range(1, d):
        parents.append(int(torch.randint(0, i, (1,), generator=gen)))
    return parents


def build_custom_mask(
    tree_masks: list[torch.Tensor], prefix_lens: list[int], index_dtype: torch.dtype = torch.int64
) -> tuple[torch.Tensor, torch.Tensor]:
    """Flatten per-request [D_b, D_b] draft masks into SGLang's (custom_mask, mask_indptr).

    Each request contributes [D_b, P_b + D_b] uint8 with the prefix columns set to 1.
    """
    if len(tree_masks) != len(prefix_lens):
        raise ValueError("tree_masks and prefix_lens must have the same length")
    chunks = []
    indptr = [0]
    for tm, p in zip(tree_masks, prefix_lens):
        d = tm.shape[0]
        full = torch.ones((d, p + d), dtype=torch.uint8)
        full[:, p:] = tm.to(torch.uint8)
        chunks.append(full.reshape(-1))
        indptr.append(indptr[-1] + full.numel())
    mask = torch.cat(chunks) if chunks else torch.zeros((0,), dtype=torch.uint8)
    return mask, torch.tensor(indptr, dtype=index_dtype)


def draft_visibility(
    custom_mask: torch.Tensor | None, mask_indptr: torch.Tensor | None, b: int, d: int, p: int
) -> torch.Tensor:
    """[D, D] bool draft-to-draft visibility of request b (causal when custom_mask is None)."""
    if custom_mask is None:
        return torch.ones((d, d), dtype=torch.bool).tril()
    assert mask_indptr is not None
    start = int(mask_indptr[b])
    full = custom_mask[start : start + d * (p + d)].reshape(d, p + d)
    return full[:, p:].to(torch.bool)


_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _pool_rows(
    buf: torch.Tensor, idx: torch.Tensor, dtype: torch.dtype, kv_dtype: torch.dtype | None
) -> torch.Tensor:
    """buf[idx, 0] in ``dtype``; an fp8 pool is gathered as bytes (fp8 indexing is not
    implemented everywhere) and converted exactly."""
    if buf.dtype in _FP8 or buf.dtype == torch.uint8:
        fp8 = buf.dtype if buf.dtype in _FP8 else kv_dtype
        if fp8 not in _FP8:
            raise ValueError("a uint8 pool needs kv_dtype=torch.float8_e4m3fn or torch.float8_e5m2")
        rows = buf.view(torch.uint8)[idx, 0].view(fp8)
        return rows.float().to(dtype)
    return buf[idx, 0].to(dtype)


def verify_attention_ref(
    q: torch.Tensor,
    k_extend: torch.Tensor,
    v_extend: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    custom_mask: torch.Tensor | None,
    mask_indptr: torch.Tensor | None,
    sm_scale: float,
    dtype: torch.dtype = torch.float64,
    *,
    k_descale: float = 1.0,
    v_descale: float = 1.0,
    kv_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (o [T, H, 512], lse [T, H]) in ``dtype``, on q's device.

    Same argument meanings as the kernel: prefix K/V rows via kv_indices into k_buffer/v_buffer,
    draft K/V from k_extend/v_extend, all prefix columns visible, drafts by the mask.
    lse is the natural-log sum of exp(sm_scale * q.k) over visible columns.

    An fp8 pool (k_buffer float8_e4m3fn / float8_e5m2, or uint8 storage with ``kv_dtype``) is
    dequantized in ``dtype``: prefix keys are its rows times ``k_descale``, prefix values its
    first 512 columns times ``v_descale``; draft keys and values are not scaled.
    """
    t_total, h, dq = q.shape
    dv = v_extend.shape[-1]
    o = torch.zeros((t_total, h, dv), dtype=dtype, device=q.device)
    lse = torch.full((t_total, h), float("-inf"), dtype=dtype, device=q.device)
    qo = qo_indptr.tolist()
    kv = kv_indptr.tolist()
    cmask = None if custom_mask is None else custom_mask.cpu()
    mind = None if mask_indptr is None else mask_indptr.cpu()
    for b in range(len(qo) - 1):
        q0, q1 = qo[b], qo[b + 1]
        d = q1 - q0
        if d == 0:
            continue
        idx = kv_indices[kv[b] : kv[b + 1]].long()
        p = idx.numel()
        kp = _pool_rows(k_buffer, idx, dtype, kv_dtype) * k_descale  # [P, 576]
        vp = _pool_rows(v_buffer, idx, dtype, kv_dtype) * v_descale  # [P, 512]
        k = torch.cat([kp, k_extend[q0:q1, 0].to(dtype)], dim=0)  # [L, 576]
        v = torch.cat([vp, v_extend[q0:q1, 0].to(dtype)], dim=0)  # [L, 512]
        qb = q[q0:q1].to(dtype)  # [D, H, 576]
        s = torch.einsum("dhk,lk->dhl", qb, k) * sm_scale
        vis = torch.ones((d, p + d), dtype=torch.bool)
        vis[:, p:] = draft_visibility(cmask, mind, b, d, p)
        s = s.masked_fill(~vis.to(s.device)[:, None, :], float("-inf"))
        row_lse = torch.logsumexp(s, dim=-1)  # [D, H]
        prob = torch.exp(s - row_lse[..., None].clamp_min(torch.finfo(dtype).min))
        prob = torch.nan_to_num(prob, nan=0.0)
        o[q0:q1] = torch.einsum("dhl,lv->dhv", prob, v)
        lse[q0:q1] = row_lse
    return o, lse


def verify_attention_torch(
    q: torch.Tensor,
    k_extend: torch.Tensor,
    v_extend: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    custom_mask: torch.Tensor | None,
    mask_indptr: torch.Tensor | None,
    sm_scale: float,
    *,
    k_descale: float = 1.0,
    v_descale: float = 1.0,
    kv_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """o [T, H, 512] as plain PyTorch computes it in the inputs' precision (bf16), the way
    flash-attention's tests build their "PyTorch at the same precision" output: q times
    ``sm_scale`` in bf16, the logits a bf16 matmul, ``torch.softmax`` to bf16, the output a
    bf16 matmul; an fp8 pool is widened to bf16 and multiplied by its descales in bf16.

    Its error against :func:`verify_attention_ref` (fp64) is what bf16 attention costs on
    these inputs; the GPU tests bound the kernel's error by a multiple of it
    (docs/kernel-tests.md)."""
    dtype = q.dtype
    t_total, h, _ = q.shape
    o = torch.zeros((t_total, h, v_extend.shape[-1]), dtype=dtype, device=q.device)
    qo = qo_indptr.tolist()
    kv = kv_indptr.tolist()
    cmask = None if custom_mask is None else custom_mask.cpu()
    mind = None if mask_indptr is None else mask_indptr.cpu()
    for b in range(len(qo) - 1):
        q0, q1 = qo[b], qo[b + 1]
        d = q1 - q0
        if d == 0:
            continue
        idx = kv_indices[kv[b] : kv[b + 1]].long()
        p = idx.numel()
        kp = _pool_rows(k_buffer, idx, dtype, kv_dtype) * k_descale
        vp = _pool_rows(v_buffer, idx, dtype, kv_dtype) * v_descale
        k = torch.cat([kp, k_extend[q0:q1, 0].to(dtype)], dim=0)
        v = torch.cat([vp, v_extend[q0:q1, 0].to(dtype)], dim=0)
        s = torch.einsum("dhk,lk->dhl", q[q0:q1] * sm_scale, k)
        vis = torch.ones((d, p + d), dtype=torch.bool)
        vis[:, p:] = draft_visibility(cmask, mind, b, d, p)
        s = s.masked_fill(~vis.to(s.device)[:, None, :], float("-inf"))
        o[q0:q1] = torch.einsum("dhl,lv->dhv", torch.softmax(s, dim=-1), v)
    return o
