"""The :class:`VerifyRouter`: stands in for one backend's ``extend_attention_fwd`` and sends
each target-verify call it can serve to the kernel, every other call to SGLang's."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from kdtree_mla.sglang.eligibility import HEAD_DIM_QK, HEAD_DIM_V, call_refusal
from kdtree_mla.sglang.releases import REFUSED_KEYWORDS, UnsupportedCall, refused_keyword
from kdtree_mla.sglang.versions import SglangLayout

logger = logging.getLogger(__name__)

# extend_attention_fwd's positional prefix that every supported version shares.
COMMON_POSITIONAL = 13


class VerifyRouter:
    """Stands in for one backend's ``extend_attention_fwd``.

    During a target-verify step (``begin_step(True)``) an eligible call goes to
    ``api.extend_attention_fwd`` with the preallocated workspace; every other call goes to
    SGLang's original function with the arguments untouched. ``kernel_calls``/``sglang_calls``
    count what happened (a captured graph counts its capture only).
    """

    def __init__(
        self,
        *,
        original: Callable[..., Any],
        layout: SglangLayout,
        api: Any,
        num_heads: int,
        num_draft_tokens: int,
        device: Any,
        max_batch: int,
        fp8_kv: bool = False,
    ) -> None:
        self.original = original
        self.layout = layout
        self.api = api
        self.num_heads = num_heads
        self.num_draft_tokens = num_draft_tokens
        self.device = device
        self.step_active = False
        self.kernel_calls = 0
        self.sglang_calls = 0
        self.refusals: dict[str, int] = {}
        self._plan = getattr(api, "plan", None)
        self._kernel = api.extend_attention_fwd
        positional = layout.extend_positional
        self._sm_scale_pos = COMMON_POSITIONAL + positional.index("sm_scale")
        self._k_scale_pos = (
            COMMON_POSITIONAL + positional.index("k_scale") if "k_scale" in positional else None
        )
        self._bf16 = _bf16()
        # fp8 pools go to the kernel with SGLang's per-layer descales, where the release's own
        # Triton MLA path reads one (it passes k_scale/v_scale positionally: 0.5.10's layout).
        self.fp8_kv = bool(fp8_kv and self._k_scale_pos is not None)
        self._fp8 = _fp8_dtypes() if self.fp8_kv else ()
        self.workspace = self._allocate(max_batch)

    def _allocate(self, max_batch: int) -> Any:
        max_batch = max(1, min(max_batch, int(getattr(self.api, "MAX_BATCH_LIMIT", max_batch))))
        return self.api.VerifyWorkspace(
            max_batch=max_batch,
            max_tokens=max_batch * self.num_draft_tokens,
            num_heads=self.num_heads,
            device=self.device,
        )

    @property
    def max_batch(self) -> int:
        """The batch size the workspace was allocated for."""
        return int(self.workspace.limits.max_batch)

    def ensure_capacity(self, max_batch: int) -> None:
        """Reallocate for a larger maximum; only called before CUDA graphs are captured."""
        if max_batch > self.max_batch:
            self.workspace = self._allocate(max_batch)

    def begin_step(self, verify: bool) -> None:
        """Mark the start of a forward step; only verify steps use the kernel."""
        self.step_active = verify

    def plan(self, qo_indptr: Any, kv_indptr: Any) -> None:
        """Once-per-step kernel preparation, when the kernel API offers one."""
        if self._plan is not None:
            self._plan(self.workspace, qo_indptr, kv_indptr)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.step_active or len(args) < COMMON_POSITIONAL:
            self.sglang_calls += 1
            return self.original(*args, **kwargs)
        if kwargs:
            for name in REFUSED_KEYWORDS:
                if name in kwargs:
                    why = refused_keyword(name, kwargs[name])
                    if why is not None:
                        raise UnsupportedCall(f"kdtree-verify: target-verify call refused: {why}")
        # The fast check runs 61 times a step in eager mode, so it is plain attribute and
        # comparison work (~1 us); only a call it does not accept pays for the full,
        # reason-giving check, which has the last word.
        if not self._fast_accept(args, kwargs):
            refusal = self._refusal(args, kwargs)
            if refusal is not None:
                self._refused(refusal)
                return self.original(*args, **kwargs)
        sm_pos = self._sm_scale_pos
        sm_scale = args[sm_pos] if len(args) > sm_pos else kwargs.get("sm_scale")
        if self._fp8 and args[4].dtype in self._fp8:
            ks = self._k_scale_pos
            assert ks is not None
            self._kernel(
                *args[:COMMON_POSITIONAL],
                sm_scale,
                workspace=self.workspace,
                k_descale=args[ks],
                v_descale=args[ks + 1],
            )
        else:
            self._kernel(*args[:COMMON_POSITIONAL], sm_scale, workspace=self.workspace)
        self.kernel_calls += 1
        return None

    def _fast_accept(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        q, o, k_buf = args[0], args[3], args[4]
        ks = self._k_scale_pos
        fp8 = k_buf.dtype in self._fp8
        if (
            not fp8
            and ks is not None
            and len(args) > ks + 1
            and (args[ks] != 1.0 or args[ks + 1] != 1.0)
        ):
            return False
        q_shape, kb_shape = q.shape, k_buf.shape
        limits = self.workspace.limits
        get = kwargs.get
        window = get("sliding_window_size")
        xai = get("xai_temperature_len")
        return bool(
            len(q_shape) == 3
            and q_shape[2] == HEAD_DIM_QK
            and o.shape[-1] == HEAD_DIM_V
            and (k_buf.dtype is self._bf16 or fp8)
            and len(kb_shape) == 3
            and kb_shape[1] == 1
            and kb_shape[2] == HEAD_DIM_QK
            and args[9] is not None
            and args[10]
            and q_shape[0] <= limits.max_tokens
            and args[6].shape[0] - 1 <= limits.max_batch
            and not get("logit_cap")
            and get("sinks") is None
            and get("window_kv_offsets") is None
            and (window is None or window < 0)
            and (xai is None or xai <= 0)
            and get("skip_prefix_custom_mask", True)
            and get("page_size", 1) == 1
            and not get("skip_extend")
            and not get("identity_kv_indices")
        )

    def _refusal(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        q, o, k_buf, qo_indptr, mask, causal = args[0], args[3], args[4], args[6], args[9], args[10]
        named = dict(zip(self.layout.extend_positional, args[COMMON_POSITIONAL:]))
        named.update(kwargs)
        limits = self.workspace.limits
        refusal = call_refusal(
            q_shape=tuple(q.shape),
            o_shape=tuple(o.shape),
            kv_buffer_shape=tuple(k_buf.shape),
            kv_dtype=str(k_buf.dtype),
            has_custom_mask=mask is not None,
            is_causal=bool(causal),
            logit_cap=_float_or(named.get("logit_cap"), 0.0),
            sliding_window_size=_int_or(named.get("sliding_window_size"), -1),
            has_sinks=named.get("sinks") is not None,
            has_window_offsets=named.get("window_kv_offsets") is not None,
            xai_temperature_len=_int_or(named.get("xai_temperature_len"), -1),
            k_scale=_float_or(named.get("k_scale"), 1.0),
            v_scale=_float_or(named.get("v_scale"), 1.0),
            max_tokens=int(limits.max_tokens),
            max_batch=int(limits.max_batch),
            batch=int(qo_indptr.shape[0]) - 1,
            fp8_ok=self.fp8_kv,
        )
        if refusal is None and not named.get("skip_prefix_custom_mask", True):
            refusal = "prefix columns masked"
        if refusal is None and _int_or(named.get("page_size"), 1) != 1:
            refusal = f"page size {named.get('page_size')}"
        if refusal is None and (named.get("skip_extend") or named.get("identity_kv_indices")):
            refusal = "skip_extend / identity_kv_indices (a DCP or dense-prefix call)"
        return refusal

    def _refused(self, reason: str) -> None:
        self.sglang_calls += 1
        if reason not in self.refusals:
            logger.warning("kdtree_mla: a verify call stays on SGLang's Triton kernel: %s", reason)
        self.refusals[reason] = self.refusals.get(reason, 0) + 1


def _bf16() -> Any:
    # The fast path compares dtype objects by identity; without torch (CPU tests with stand-in
    # tensors) nothing is identical to it and every call takes the full check.
    try:
        import torch
    except ImportError:
        return object()
    return torch.bfloat16


def _fp8_dtypes() -> tuple[Any, ...]:
    try:
        import torch
    except ImportError:
        return ()
    return tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n))


def _int_or(value: Any, default: int) -> int:
    return default if value is None else int(value)


def _float_or(value: Any, default: float) -> float:
    # A KV scale may be a 0-d tensor in some versions; float() reads it without a sync only on
    # CPU tensors, and SGLang passes Python floats here (layer.k_scale_float).
    return default if value is None else float(value)


def compiler_disabled(router: VerifyRouter) -> Callable[..., Any]:
    # SGLang wraps its own kernels with torch.compiler.disable; keep that so a server run with
    # --enable-torch-compile does not trace into the router.
    def kdtree_extend_attention_fwd(*args: Any, **kwargs: Any) -> Any:
        return router(*args, **kwargs)

    kdtree_extend_attention_fwd.router = router  # type: ignore[attr-defined]
    try:
        import torch

        disable: Any = torch.compiler.disable  # typed in some torch releases, not in others
    except (ImportError, AttributeError):
        return kdtree_extend_attention_fwd
    disabled: Callable[..., Any] = disable(kdtree_extend_attention_fwd)
    with contextlib.suppress(AttributeError):
        disabled.router = router  # type: ignore[attr-defined]
    return disabled
