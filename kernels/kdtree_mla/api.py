"""Public API of the MLA target-verify attention kernel.

Signature contract (stable; the SGLang integration codes against it)
--------------------------------------------------------------------

``extend_attention_fwd`` takes SGLang 0.5.5's ``extend_attention_fwd`` arguments in the same
order and with the same meanings (target-verify mode, absorbed MLA, page size 1), plus a
keyword-only ``workspace``::

    extend_attention_fwd(
        q_extend,        # [T, H, 576] bf16   T = qo_indptr[B]; 512 latent ("nope") dims + 64 rope dims
        k_extend,        # [T, 1, 576] bf16   draft-token keys (their latent + rope)
        v_extend,        # [T, 1, 512] bf16   draft-token values; MLA: equal to k_extend[..., :512]
        o_extend,        # [T, H, 512] bf16   output, written in place (last dim contiguous)
        k_buffer,        # [S, 1, 576] bf16   KV pool (MLATokenToKVPool); row = one token, 1152 B;
                         #                    or fp8 (float8_e4m3fn / float8_e5m2, 576 B a row), or its
                         #                    uint8 storage together with kv_dtype=
        v_buffer,        # [S, 1, 512]        same dtype; must be the view k_buffer[..., :512]
        qo_indptr,       # [B+1] int32/int64  request b's draft rows are q[qo_indptr[b]:qo_indptr[b+1]]
        kv_indptr,       # [B+1] int32/int64  request b's prefix is kv_indices[kv_indptr[b]:kv_indptr[b+1]]
        kv_indices,      # [>= kv_indptr[B]] int32/int64  pool rows of the prefix tokens (page size 1)
        custom_mask,     # [>= mask_indptr[B]] uint8/bool, or None (then drafts are causal: j <= i)
        is_causal,       # bool; only used when custom_mask is None (must then be True)
        mask_indptr,     # [B+1] int32/int64  request b's mask is [D_b, P_b + D_b] row-major at
                         #                    custom_mask[mask_indptr[b]:]; draft column j of row i is
                         #                    custom_mask[mask_indptr[b] + i*(P_b+D_b) + P_b + j]
        max_len_extend,  # int, ignored (kept for argument compatibility; no launch depends on it)
        sm_scale=None,   # float; None means 576**-0.5 as in SGLang (pass layer.scaling)
        logit_cap=0.0,   # must be 0 (MLA models use none)
        skip_prefix_custom_mask=True,  # must be True: every prefix column is visible
        *,
        workspace,       # VerifyWorkspace, allocated once for the declared maximum
        lse_extend=None, # optional [T, H] float32 output: natural-log sum-exp of scaled logits
        k_descale=None,  # fp8 pool: required, a float or a 1-element float32 CUDA tensor (read by
        v_descale=None,  #   the kernel); a bf16 pool takes none (None or 1.0)
        kv_dtype=None,   # torch.float8_e4m3fn / float8_e5m2 when k_buffer is uint8 storage
    ) -> None

with D_b = qo_indptr[b+1] - qo_indptr[b] draft tokens and P_b = kv_indptr[b+1] - kv_indptr[b]
prefix tokens for request b. Draft K/V are read from ``k_extend`` (V being its first 512
columns) and prefix K/V from ``k_buffer`` (V being its first 512 columns), exactly as MLA
defines them; ``v_extend``/``v_buffer`` are checked for shape, dtype and device only.

fp8 KV pool (SGLang's ``--kv-cache-dtype fp8_e4m3`` / ``fp8_e5m2``: it stores K / layer.k_scale):
a prefix key is ``k_buffer`` row times ``k_descale``, its value the first 512 columns times
``v_descale`` (SGLang passes ``layer.k_scale_float`` / ``layer.v_scale_float``, 1.0 without
scales); the descales multiply the logits and the probabilities of the prefix columns in fp32.
An fp8 pool needs both: a call without either raises ``ValueError`` before anything is launched
(a pool stored without scaling passes 1.0 explicitly).
Draft keys (``k_extend``, bf16) take no descale, as in SGLang's Triton kernel. q, k_extend and
the output stay bf16.

``verify_attention(params)`` is the same call for new code: one :class:`VerifyParams` value (the
tensors and scalars of one call, by name, as the C++ side's ``VerifyParams``).

Availability: ``load()`` imports the extension or raises ImportError with the reason;
``compiled_archs()`` lists the architectures it was built for (the extension's ``ARCH_LIST``);
``device_supported(device)`` returns (ok, reason) and never raises.

Per-step work: none is needed. Each call is one kernel launch (a cooperative split-KV kernel
that merges its own partials) where the grid fits one CTA per SM, else two (main kernel, LSE
combine; see ``VerifyWorkspace.fused``); the schedule is computed inside the main kernel from
``qo_indptr``/``kv_indptr`` (one read of B+1 values per CTA), so there is no separate
scheduler launch to hoist out of the 61 layers.

CUDA-graph safety: the call does no host synchronisation, no allocation and chooses its launch
geometry from tensor shapes and the workspace only, never from index values; it can be captured
once and replayed after the index, length and mask tensors change in place (within the
workspace's maximum). A bad argument raises ``ValueError``/``TypeError``/``RuntimeError``
before anything is launched; a CUDA launch error raises ``RuntimeError``.

No warm-up is needed before capture: a workspace, when it is made, loads the device's kernels
and sets their shared-memory opt-in (csrc/verify_launch.cu ``verify_prepare``), so the first
call may be captured into a CUDA graph. The one thing an eager call still settles is whether the
driver accepts a cooperative launch with programmatic dependent launch (PDL): a fused call
captured before any eager fused call on its device launches without PDL (the same result;
PDL only lets the kernel be scheduled while the previous one drains), since a refused launch
inside a capture would invalidate it. SGLang's graph runner runs every batch size eagerly before
capturing it, so its graphs use PDL.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kdtree_mla import extension
from kdtree_mla.extension import compiled_archs, device_supported, load
from kdtree_mla.workspace import (
    BLOCK_M,
    HEAD_DIM_QK,
    HEAD_DIM_V,
    MAX_BATCH_LIMIT,
    MAX_DRAFT,
    PLAN_WORDS,
    SUPPORTED_HEADS,
    VerifyWorkspace,
)

__all__ = [
    "compiled_archs",
    "device_supported",
    "load",
    "BLOCK_M",
    "HEAD_DIM_QK",
    "HEAD_DIM_V",
    "MAX_BATCH_LIMIT",
    "MAX_DRAFT",
    "PLAN_WORDS",
    "SUPPORTED_HEADS",
    "VerifyParams",
    "VerifyWorkspace",
    "extend_attention_fwd",
    "verify_attention",
]

_DEFAULT_SCALE = HEAD_DIM_QK**-0.5  # sm_scale=None, as in SGLang


class VerifyParams(NamedTuple):
    """One verify call's arguments (module docstring for shapes and meanings), in the order the
    extension's ``verify_fwd`` takes them.

    A NamedTuple rather than a dataclass: it is built on every layer of every eager step, and
    it is immutable, names its fields and unpacks straight into the extension's positional
    fast-call entry point, at a third of a frozen dataclass's construction cost.
    """

    q: torch.Tensor
    k_extend: torch.Tensor
    v_extend: torch.Tensor
    o_extend: torch.Tensor
    k_buffer: torch.Tensor
    v_buffer: torch.Tensor
    qo_indptr: torch.Tensor
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    custom_mask: torch.Tensor | None
    mask_indptr: torch.Tensor | None
    sm_scale: float
    lse: torch.Tensor | None
    workspace: VerifyWorkspace
    # fp8 KV pools (module docstring); after the workspace, so older positional callers hold.
    k_descale: float | torch.Tensor | None = None
    v_descale: float | torch.Tensor | None = None
    kv_dtype: torch.dtype | None = None


# kv_dtype codes of the extension's verify_fwd (csrc/params.h KvDtype; 0: from k_buffer's dtype).
_KV_CODES = {None: 0, torch.float8_e4m3fn: 1, torch.float8_e5m2: 2}
_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _missing_descale(p: VerifyParams) -> ValueError:
    missing = " and ".join(
        name
        for name, value in (("k_descale", p.k_descale), ("v_descale", p.v_descale))
        if value is None
    )
    pool = p.kv_dtype if p.kv_dtype is not None else getattr(p.k_buffer, "dtype", None)
    return ValueError(
        f"{missing}: an fp8 KV pool ({pool}) needs k_descale and v_descale; pass the layer's "
        "descales (SGLang: layer.k_scale_float / layer.v_scale_float), or 1.0 for a pool "
        "stored without scaling"
    )


def _launch(p: VerifyParams) -> None:
    # Hot path (every layer of every verify step): one call into the extension, which checks
    # every tensor (against the workspace's declared T and H too) and raises
    # ValueError/TypeError/RuntimeError itself.
    ws = p.workspace
    handle = ws._handle or ws._make_handle()
    ext = extension._EXT or extension.load_ext()
    if p.k_descale is None and p.v_descale is None and p.kv_dtype is None:
        if getattr(p.k_buffer, "dtype", None) in _FP8:
            raise _missing_descale(p)
        ext.verify_fwd(*p[:13], handle)
        return
    code = _KV_CODES.get(p.kv_dtype, -1)
    if code < 0:
        raise ValueError(
            f"kv_dtype must be None, torch.float8_e4m3fn or torch.float8_e5m2 (got {p.kv_dtype})"
        )
    if (p.k_descale is None or p.v_descale is None) and (
        code or getattr(p.k_buffer, "dtype", None) in _FP8
    ):
        raise _missing_descale(p)
    ext.verify_fwd(*p[:13], handle, p.k_descale, p.v_descale, code)


def verify_attention(params: VerifyParams) -> None:
    """Target-verify MLA attention of one call; see the module docstring for shapes and
    meanings (``params.lse``: the optional [T, H] float32 LSE output, or None)."""
    _launch(params)


def extend_attention_fwd(
    q_extend: torch.Tensor,
    k_extend: torch.Tensor,
    v_extend: torch.Tensor,
    o_extend: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor,
    kv_indices: torch.Tensor,
    custom_mask: torch.Tensor | None,
    is_causal: bool,
    mask_indptr: torch.Tensor | None,
    max_len_extend: int,
    sm_scale: float | None = None,
    logit_cap: float = 0.0,
    skip_prefix_custom_mask: bool = True,
    *,
    workspace: VerifyWorkspace,
    lse_extend: torch.Tensor | None = None,
    k_descale: float | torch.Tensor | None = None,
    v_descale: float | torch.Tensor | None = None,
    kv_dtype: torch.dtype | None = None,
) -> None:
    """Drop-in for SGLang's ``extend_attention_fwd`` in target-verify mode (module docstring).

    ``max_len_extend`` is accepted and ignored: no launch depends on it. An fp8 KV pool needs
    ``k_descale`` and ``v_descale`` (and ``kv_dtype`` when ``k_buffer`` is its uint8 storage).
    """
    if logit_cap != 0.0:
        raise ValueError(f"logit_cap must be 0 for the MLA verify kernel (got {logit_cap})")
    if not skip_prefix_custom_mask:
        raise ValueError(
            "skip_prefix_custom_mask=False is not supported: prefix columns are all visible"
        )
    if custom_mask is None and not is_causal:
        raise ValueError("custom_mask=None needs is_causal=True (draft tokens are then a chain)")
    _launch(
        VerifyParams(
            q_extend,
            k_extend,
            v_extend,
            o_extend,
            k_buffer,
            v_buffer,
            qo_indptr,
            kv_indptr,
            kv_indices,
            custom_mask,
            mask_indptr,
            _DEFAULT_SCALE if sm_scale is None else sm_scale,
            lse_extend,
            workspace,
            k_descale,
            v_descale,
            kv_dtype,
        )
    )
