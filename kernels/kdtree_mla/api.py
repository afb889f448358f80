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
        k_descale=None,  # fp8 pool: float, or 1-element float32 CUDA tensor (read by the kernel);
        v_descale=None,  #   None means 1.0; a bf16 pool takes none (None or 1.0)
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
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

__all__ = [
    "compiled_archs",
    "device_supported",
    "load",
    "HEAD_DIM_QK",
    "HEAD_DIM_V",
    "MAX_DRAFT",
    "SUPPORTED_HEADS",
    "VerifyParams",
    "VerifyWorkspace",
    "extend_attention_fwd",
    "verify_attention",
]

HEAD_DIM_QK = 576
HEAD_DIM_V = 512
MAX_DRAFT = 16
SUPPORTED_HEADS = (8, 16, 32, 64, 128)
# 64-bit words of one CTA's schedule plan in the workspace; must match csrc/traits.h.
PLAN_WORDS = 10
# Rows (draft token x head) one CTA handles at once; must match csrc/traits.h.
BLOCK_M = 32
# Hard ceiling of max_batch: the in-kernel scheduler scans request lengths in shared memory.
MAX_BATCH_LIMIT = 4096


_DEFAULT_SCALE = HEAD_DIM_QK**-0.5  # sm_scale=None, as in SGLang

_EXT: Any = None  # the compiled extension, kdtree_mla._C, once imported


def _load_ext() -> Any:  # pragma: no cover - needs the compiled extension
    global _EXT
    if _EXT is None:
        _EXT = importlib.import_module("kdtree_mla._C")
    return _EXT


def load() -> Any:
    """Imports the compiled extension and returns it; raises ImportError with the reason when it
    is not built or does not load (e.g. built against another torch)."""
    try:
        return _load_ext()
    except ImportError as exc:
        raise ImportError(
            f"kdtree_mla._C is not available ({exc}); build it with "
            "`TORCH_CUDA_ARCH_LIST=... pip install --no-build-isolation ./kernels`"
        ) from exc


def _parse_arch_list(arch_list: str) -> list[str]:
    archs = []
    for item in arch_list.replace(",", ";").replace(" ", ";").split(";"):
        item = item.strip().removesuffix("+PTX")
        if not item:
            continue
        major, _, minor = item.partition(".")
        archs.append(f"sm_{major}{minor.rstrip('af') or '0'}")
    return archs


def compiled_archs() -> list[str]:
    """Architectures the installed extension was built for, e.g. ["sm_90", "sm_120"] (its
    TORCH_CUDA_ARCH_LIST at build time, compiled into it); [] when it is not built or does not
    load."""
    try:
        ext = _load_ext()
    except ImportError:
        return []
    return _parse_arch_list(getattr(ext, "ARCH_LIST", ""))


def device_supported(device: torch.device | str | int | None = None) -> tuple[bool, str]:
    """(True, "") when the kernel can run on `device`, else (False, reason). Never raises."""
    try:
        ext = load()
    except ImportError as exc:
        return False, str(exc)
    if not torch.cuda.is_available():
        return False, "no CUDA device visible"
    dev = torch.device("cuda" if device is None else device)
    idx = dev.index if dev.index is not None else torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(idx)
    arch = f"sm_{major}{minor}"
    built = compiled_archs()
    if built and arch not in built:
        return False, f"extension built for {', '.join(built)}, device is {arch}"
    if ext.variant_for_device(idx) == 0:
        return False, f"{arch}: no kernel variant fits the device's shared memory"
    return True, ""


@dataclass(frozen=True)
class _Limits:
    max_batch: int
    max_tokens: int
    num_heads: int


def _launch_option(name: str) -> property:
    """A VerifyWorkspace launch option (see its __init__), kept in step with the extension's
    Workspace object once that exists."""
    return property(
        lambda self: self._options[name], lambda self, value: self._set_option(name, value)
    )


class VerifyWorkspace:
    """Device scratch for one model's verify calls, allocated once.

    The split-KV kernel runs a fixed grid of ``num_ctas`` CTAs (one per SM) whatever the
    lengths are; each CTA leaves at most two partial results (512 bf16 values and one fp32 LSE per
    row, ``BLOCK_M`` rows), merged by the main kernel itself when its grid fits one CTA per SM
    (``fused``), else by a second fixed-geometry kernel. So the partial buffers do
    not depend on context length; the declared maximum only bounds the schedule table
    (``max_batch + 1`` ints) and what a call may pass. A fused call with one request also keeps
    each CTA's schedule here, and the next call with the same request lengths and options takes
    it instead of working it out again (every layer of a model step after the first); the key
    is compared whole, so outputs never depend on it.

    The fused merge reads the partials with an evict-last L2 policy: the partial buffers (at
    most ``2 * num_ctas * 32 KB``) stay in L2 between calls instead of being written back to
    DRAM when other kernels evict them, at the cost of that much L2 for the other kernels.

    One workspace serves one call at a time: calls on one stream (eager or in graphs) are
    fine; two calls in flight at once on different streams would share the partial buffers
    and the fused merge's flags (wrong output, or a merge that waits forever). The fused
    path is a cooperative launch, so the driver must be able to place every CTA at once: where
    fewer SMs are available than the device has (an MPS thread limit, say) the launch fails
    with an error; pass a smaller ``num_ctas`` or set ``split_combine``.

    Args:
        max_batch: largest B a call will pass (1..4096).
        max_tokens: largest T (sum of draft tokens) a call will pass.
        num_heads: H of every call (8, 16, 32, 64 or 128).
        device: CUDA device to allocate on.
        num_ctas: grid size of the main kernel; default the device's SM count.
    """

    def __init__(
        self,
        *,
        max_batch: int,
        max_tokens: int,
        num_heads: int,
        device: torch.device | str | int | None = None,
        num_ctas: int | None = None,
    ) -> None:
        if not 1 <= int(max_batch) <= MAX_BATCH_LIMIT:
            raise ValueError(f"max_batch must be in 1..{MAX_BATCH_LIMIT} (got {max_batch})")
        if int(max_tokens) < 1:
            raise ValueError(f"max_tokens must be positive (got {max_tokens})")
        if int(max_tokens) > int(max_batch) * MAX_DRAFT:
            raise ValueError(
                f"max_tokens={max_tokens} exceeds max_batch*{MAX_DRAFT}={int(max_batch) * MAX_DRAFT}"
            )
        if int(num_heads) not in SUPPORTED_HEADS:
            raise ValueError(f"num_heads must be one of {SUPPORTED_HEADS} (got {num_heads})")
        dev = torch.device("cuda" if device is None else device)
        if dev.type != "cuda":
            raise ValueError(f"VerifyWorkspace needs a CUDA device (got {dev})")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        if num_ctas is None:
            num_ctas = torch.cuda.get_device_properties(dev).multi_processor_count
        if int(num_ctas) < 1:
            raise ValueError(f"num_ctas must be positive (got {num_ctas})")
        self.limits = _Limits(int(max_batch), int(max_tokens), int(num_heads))
        self.device = dev
        self.num_ctas = int(num_ctas)
        # Two partial slots per CTA; each slot is BLOCK_M rows of 512 bf16 (normalised partial
        # output) plus BLOCK_M fp32 LSEs.
        self.partial_o = torch.empty(
            (2 * self.num_ctas, BLOCK_M, HEAD_DIM_V), dtype=torch.bfloat16, device=dev
        )
        self.partial_lse = torch.empty(
            (2 * self.num_ctas, BLOCK_M), dtype=torch.float32, device=dev
        )
        # [0] = blocks per CTA, [1] = total blocks, [2 : 2+B+1] = per-request block prefix sums.
        self.sched = torch.empty((self.limits.max_batch + 3,), dtype=torch.int32, device=dev)
        # Per draft token {qo_begin, unit prefix, units per segment, 0}, for the combine kernel.
        self.tokinfo = torch.empty((self.limits.max_tokens, 4), dtype=torch.int32, device=dev)
        # Fused merge handshakes: CTAs ended over all fused calls (num_ctas a call, so the
        # call's number is known to every CTA), one flag per partial slot (the number of the
        # call that stored it, + 1), then a merge-ticket word (0 between calls), then each
        # CTA's schedule plan (PLAN_WORDS words: what a B = 1 call worked out, with its key);
        # zeros here, the kernel keeps them consistent itself (csrc/verify_common.cuh).
        self.sync = torch.zeros(
            (2 + (2 + PLAN_WORDS) * self.num_ctas,), dtype=torch.int64, device=dev
        )
        # Launch options, held by the extension's Workspace object (one argument per call
        # instead of eight: the host path is part of every eager layer's time). Changing one
        # between eager calls is fine; a captured graph keeps the values it was captured with.
        #   min_blocks_per_cta: lower bound on the 32-token KV blocks one CTA takes.
        #   launch_parts (benchmarks only): 1 = main kernel alone, 2 = combine alone, 3 = both.
        #   force_variant (benchmarks, tests): an index into _C.VARIANTS, 0 = the device's default.
        #   split_combine (benchmarks, tests): 1 = merge cut segments in the combine kernel even
        #     where the main kernel can merge them itself (see ``fused``).
        self._options = {
            "min_blocks_per_cta": 1,
            "launch_parts": 3,
            "force_variant": 0,
            "split_combine": 0,
        }
        self._trace: torch.Tensor | None = None
        self._handle: Any = None  # the extension's Workspace, made on first use

    def _make_handle(self) -> Any:
        h = (_EXT or _load_ext()).Workspace(
            self.partial_o,
            self.partial_lse,
            self.sched,
            self.tokinfo,
            self.sync,
            self.num_ctas,
            self.limits.num_heads,
        )
        for name, value in self._options.items():
            setattr(h, name, value)
        if self._trace is not None:
            h.trace = self._trace
        self._handle = h
        return h

    @property
    def trace(self) -> torch.Tensor | None:
        """Diagnostic: the int64 [TRACE_ROWS, TRACE_SLOTS] buffer the traced kernel variant
        (``_C.VARIANTS`` mode 8, ``KDTREE_DIAG=1`` builds only) writes timestamps to; see
        research/kernel-lab/bench/trace_verify.py."""
        return self._trace

    @trace.setter
    def trace(self, buf: torch.Tensor) -> None:
        self._trace = buf
        if self._handle is not None:
            self._handle.trace = buf

    def _set_option(self, name: str, value: int) -> None:
        self._options[name] = int(value)
        if self._handle is not None:
            setattr(self._handle, name, int(value))

    min_blocks_per_cta = _launch_option("min_blocks_per_cta")
    launch_parts = _launch_option("launch_parts")
    force_variant = _launch_option("force_variant")
    split_combine = _launch_option("split_combine")

    @property
    def fused(self) -> bool:
        """Whether a call is one cooperative kernel that merges the cut segments itself (the
        grid fits one CTA per SM and ``split_combine`` is off) rather than the main kernel
        followed by the combine kernel."""
        return bool((self._handle or self._make_handle()).fused)

    @property
    def nbytes(self) -> int:
        bufs = (self.partial_o, self.partial_lse, self.sched, self.tokinfo, self.sync)
        return sum(t.numel() * t.element_size() for t in bufs)


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


def _launch(p: VerifyParams) -> None:
    # Hot path (every layer of every verify step): one call into the extension, which checks
    # every tensor (against the workspace's declared T and H too) and raises
    # ValueError/TypeError/RuntimeError itself.
    ws = p.workspace
    handle = ws._handle or ws._make_handle()
    ext = _EXT or _load_ext()
    if p.k_descale is None and p.v_descale is None and p.kv_dtype is None:
        ext.verify_fwd(*p[:13], handle)
        return
    code = _KV_CODES.get(p.kv_dtype, -1)
    if code < 0:
        raise ValueError(
            f"kv_dtype must be None, torch.float8_e4m3fn or torch.float8_e5m2 (got {p.kv_dtype})"
        )
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

    ``max_len_extend`` is accepted and ignored: no launch depends on it. An fp8 KV pool takes
    ``k_descale`` / ``v_descale`` (and ``kv_dtype`` when ``k_buffer`` is its uint8 storage).
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
