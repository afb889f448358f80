"""The shapes the kernel takes and :class:`VerifyWorkspace`, the device scratch its calls use
(exported by :mod:`kdtree_mla.api`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from kdtree_mla import extension

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


@dataclass(frozen=True)
class _Limits:
    max_batch: int
    max_tokens: int
    num_heads: int


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
    with an error; pass a smaller ``num_ctas`` or ``split_combine=True``.

    Args:
        max_batch: largest B a call will pass (1..4096).
        max_tokens: largest T (sum of draft tokens) a call will pass.
        num_heads: H of every call (8, 16, 32, 64 or 128).
        device: CUDA device to allocate on.
        num_ctas: grid size of the main kernel; default the device's SM count.
        split_combine: merge the partials of cut segments in a second (combine) kernel instead
            of inside a cooperative main kernel: two ordinary launches, which need no SM
            placed at once (under an MPS SM limit). Default False: the fused path where the
            grid fits one CTA per SM.
    """

    def __init__(
        self,
        *,
        max_batch: int,
        max_tokens: int,
        num_heads: int,
        device: torch.device | str | int | None = None,
        num_ctas: int | None = None,
        split_combine: bool = False,
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
        #   split_combine: the constructor's argument.
        #   launch_parts, force_variant (and the trace buffer): diagnostics, set only through
        #     kdtree_mla._diag (benchmarks, tests, research/kernel-lab).
        self._options = {
            "min_blocks_per_cta": 1,
            "launch_parts": 3,
            "force_variant": 0,
            "split_combine": int(bool(split_combine)),
        }
        self._trace: torch.Tensor | None = None
        # The extension's Workspace, made here rather than on the first call, so that whatever
        # its making involves happens outside any CUDA-graph capture.
        self._handle: Any = None
        self._make_handle()

    def _make_handle(self) -> Any:
        h = (extension._EXT or extension.load()).Workspace(
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

    def _set_option(self, name: str, value: int) -> None:
        self._options[name] = int(value)
        if self._handle is not None:
            setattr(self._handle, name, int(value))

    @property
    def min_blocks_per_cta(self) -> int:
        """Lower bound on the 32-token KV blocks one CTA takes (default 1)."""
        return self._options["min_blocks_per_cta"]

    @min_blocks_per_cta.setter
    def min_blocks_per_cta(self, value: int) -> None:
        self._set_option("min_blocks_per_cta", value)

    @property
    def split_combine(self) -> bool:
        """The constructor's ``split_combine``: cut segments are merged by the combine kernel."""
        return bool(self._options["split_combine"])

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
