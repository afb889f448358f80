"""The patch: route the Triton backend's target-verify attention to the kdtree_mla kernel.

Runs inside an SGLang server process only (imported by :mod:`.hook` after SGLang's
``triton_backend`` module has loaded, so torch is already there). What it changes, and why it is
safe to leave everything else alone:

* ``TritonAttnBackend.__init__``: after SGLang's own constructor, read the server's facts
  (:class:`~kdtree_mla.sglang.eligibility.ServerFacts`), decide, and print the one activation
  or decline line. When active, allocate one :class:`kdtree_mla.api.VerifyWorkspace` for the
  server's maximum batch (``max_running_requests`` or the CUDA-graph maximum, times the draft
  tokens) and replace *this instance's* ``extend_attention_fwd`` attribute with a
  :class:`VerifyRouter`. Draft-model backends and declined backends are not touched.
* ``init_forward_metadata`` and the CUDA-graph capture/replay metadata hooks: after SGLang's own
  code, tell the router whether this forward step is a target-verify step, and run the
  kernel's per-step plan when the API has one. This is the once-per-step work; nothing is
  rebuilt per layer, and in CUDA-graph mode the kernel reads SGLang's own static buffers
  (``qo_indptr``/``kv_indptr``/``kv_indices``/``mask_indptr``/``cuda_graph_custom_mask``) and the
  preallocated workspace, so a captured graph replays with new lengths and indices.
* ``init_cuda_graph_state``: grow the workspace (before any capture) if the graph maximum is
  larger than what was allocated.

``forward_extend`` itself is SGLang's code: it saves the draft KV, computes the scales and calls
``self.extend_attention_fwd(...)``, which is the router. The router sends a call to the kernel
only during a target-verify step and only when :func:`~.eligibility.call_refusal` accepts it;
prefill, draft extend and any call the kernel cannot serve go to SGLang's Triton kernel.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kdtree_mla.sglang import announce
from kdtree_mla.sglang.eligibility import (
    HEAD_DIM_QK,
    HEAD_DIM_V,
    ServerFacts,
    call_refusal,
    decide,
)
from kdtree_mla.sglang.releases import REFUSED_KEYWORDS, UnsupportedCall, refused_keyword
from kdtree_mla.sglang.versions import SglangLayout

logger = logging.getLogger(__name__)

#: Class attribute set on a patched class (value: the dict of original methods).
ORIGINALS = "__kdtree_verify_originals__"
#: Instance attribute holding the :class:`VerifyRouter` of an active backend.
ROUTER = "_kdtree_verify_router"

_WRAPPED = (
    "__init__",
    "init_forward_metadata",
    "init_cuda_graph_state",
    "init_forward_metadata_capture_cuda_graph",
    "init_forward_metadata_replay_cuda_graph",
)
_REQUIRED = (*_WRAPPED, "forward_extend")
# Position of ``forward_mode`` in the capture and replay hooks' arguments (after self), the same
# in 0.5.9 and 0.5.10: (bs, num_tokens | req_pool_indices, req_pool_indices | seq_lens,
# seq_lens | seq_lens_sum, encoder_lens, forward_mode, ...).
_FORWARD_MODE_POS = 5
# extend_attention_fwd's positional prefix that every supported version shares.
_COMMON_POSITIONAL = 13


class PatchError(RuntimeError):
    """SGLang's module does not look like the version it claims; nothing was changed."""


def is_patched(cls: type) -> bool:
    """True when ``cls`` (``TritonAttnBackend``) carries this patch."""
    return ORIGINALS in cls.__dict__


def patch_triton_backend(module: ModuleType, layout: SglangLayout, version: str) -> None:
    """Wrap ``module.TritonAttnBackend``'s metadata hooks and constructor (idempotent).

    Raises :class:`PatchError` before changing anything when a method it needs is missing.
    """
    cls = getattr(module, "TritonAttnBackend", None)
    if not isinstance(cls, type):
        raise PatchError("TritonAttnBackend not found")
    if is_patched(cls):
        return
    missing = [name for name in _REQUIRED if not callable(getattr(cls, name, None))]
    if missing:
        raise PatchError(f"TritonAttnBackend lacks {', '.join(missing)}")
    originals: dict[str, Callable[..., Any]] = {name: getattr(cls, name) for name in _WRAPPED}

    def __init__(self: Any, model_runner: Any, *args: Any, **kwargs: Any) -> None:
        originals["__init__"](self, model_runner, *args, **kwargs)
        attach(self, model_runner, layout, version)

    def init_forward_metadata(self: Any, forward_batch: Any) -> None:
        originals["init_forward_metadata"](self, forward_batch)
        router: VerifyRouter | None = self.__dict__.get(ROUTER)
        if router is not None:
            verify = bool(forward_batch.forward_mode.is_target_verify())
            router.begin_step(verify)
            if verify:
                meta = self.forward_metadata
                router.plan(meta.qo_indptr, meta.kv_indptr)

    def init_cuda_graph_state(
        self: Any, max_bs: int, max_num_tokens: int, *a: Any, **kw: Any
    ) -> None:
        originals["init_cuda_graph_state"](self, max_bs, max_num_tokens, *a, **kw)
        router: VerifyRouter | None = self.__dict__.get(ROUTER)
        if router is not None:
            router.ensure_capacity(int(max_bs))

    def init_forward_metadata_capture_cuda_graph(self: Any, *args: Any, **kwargs: Any) -> None:
        originals["init_forward_metadata_capture_cuda_graph"](self, *args, **kwargs)
        router: VerifyRouter | None = self.__dict__.get(ROUTER)
        if router is not None:
            verify = bool(_forward_mode(args, kwargs).is_target_verify())
            router.begin_step(verify)
            if verify:
                meta = self.forward_metadata
                router.plan(meta.qo_indptr, meta.kv_indptr)

    def init_forward_metadata_replay_cuda_graph(self: Any, *args: Any, **kwargs: Any) -> None:
        originals["init_forward_metadata_replay_cuda_graph"](self, *args, **kwargs)
        router: VerifyRouter | None = self.__dict__.get(ROUTER)
        if router is not None:
            verify = bool(_forward_mode(args, kwargs).is_target_verify())
            router.begin_step(verify)
            if verify:
                # SGLang refreshed its static buffers in place for this batch size; the captured
                # kernel reads those same buffers. (forward_metadata may belong to another bs.)
                req_pool_indices = args[1] if len(args) > 1 else kwargs["req_pool_indices"]
                bs = len(req_pool_indices)
                router.plan(self.qo_indptr[: bs + 1], self.kv_indptr[: bs + 1])

    wrappers: dict[str, Callable[..., Any]] = {
        "__init__": __init__,
        "init_forward_metadata": init_forward_metadata,
        "init_cuda_graph_state": init_cuda_graph_state,
        "init_forward_metadata_capture_cuda_graph": init_forward_metadata_capture_cuda_graph,
        "init_forward_metadata_replay_cuda_graph": init_forward_metadata_replay_cuda_graph,
    }
    # All checks passed: apply every wrapper, then mark the class.
    for name, wrapper in wrappers.items():
        setattr(cls, name, functools.wraps(originals[name])(wrapper))
    setattr(cls, ORIGINALS, originals)


def unpatch_triton_backend(module: ModuleType) -> None:
    """Restore SGLang's methods (tests; a live server never unpatches)."""
    cls = module.TritonAttnBackend
    originals = cls.__dict__.get(ORIGINALS)
    if originals is None:
        return
    for name, method in originals.items():
        setattr(cls, name, method)
    delattr(cls, ORIGINALS)


def patch_model_runner(module: ModuleType, version: str) -> None:
    """Print a decline line when the target model's attention backend is not a Triton one.

    Without this a server on ``--attention-backend fa3`` (say) would print nothing, and kctl
    could only time out waiting for the activation line.
    """
    cls = getattr(module, "ModelRunner", None)
    if not isinstance(cls, type) or not callable(getattr(cls, "init_attention_backend", None)):
        raise PatchError("ModelRunner.init_attention_backend not found")
    if ORIGINALS in cls.__dict__:
        return
    original: Callable[..., Any] = cls.init_attention_backend  # type: ignore[attr-defined]

    @functools.wraps(original)
    def init_attention_backend(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if not getattr(self, "is_draft_worker", False) and not announce.decided():
            announce.declined(no_triton_reason(self), version)
        return result

    setattr(cls, "init_attention_backend", init_attention_backend)  # noqa: B010
    setattr(cls, ORIGINALS, {"init_attention_backend": original})


def no_triton_reason(model_runner: Any) -> str:
    """Why no Triton backend decided, for a target model runner whose backend is built."""
    if not _speculative(model_runner):
        return "speculative decoding is off: there is no target-verify step"
    name = (
        _verify_backend_name(model_runner)
        or type(getattr(model_runner, "attn_backend", None)).__name__
    )
    return f"target verify runs on the {name} attention backend, not triton"


def attach(
    backend: Any,
    model_runner: Any,
    layout: SglangLayout,
    version: str,
    path: str = "startup-hook",
    fp8_kv: bool = False,
) -> None:
    """Decide for one freshly built backend; when active, give it a router and a workspace."""
    if getattr(model_runner, "is_draft_worker", False) or getattr(backend, "skip_prefill", False):
        return  # the draft model's attention (decode, draft extend) stays on SGLang
    try:
        facts = gather_facts(backend, model_runner, version, fp8_kv=fp8_kv)
    except Exception as exc:
        announce.declined(
            f"cannot read SGLang's model runner: {type(exc).__name__}: {exc}", version
        )
        return
    decision = decide(facts)
    if not decision.active:
        announce.declined(decision.reason, version)
        return
    try:
        from kdtree_mla import api

        router = VerifyRouter(
            original=backend.extend_attention_fwd,
            layout=layout,
            api=api,
            num_heads=int(backend.num_head),
            num_draft_tokens=int(backend.num_draft_tokens),
            device=_cuda_device(getattr(backend, "device", None)),
            max_batch=_max_batch(model_runner),
            fp8_kv=fp8_kv,
        )
    except Exception as exc:
        announce.declined(f"workspace allocation failed: {type(exc).__name__}: {exc}", version)
        return
    backend.__dict__[ROUTER] = router
    backend.extend_attention_fwd = _compiler_disabled(router)
    assert facts.arch is not None  # decide() refuses a missing device
    announce.active(facts.kernel_version, facts.arch, version, path=path)


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
        self._sm_scale_pos = _COMMON_POSITIONAL + positional.index("sm_scale")
        self._k_scale_pos = (
            _COMMON_POSITIONAL + positional.index("k_scale") if "k_scale" in positional else None
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
        if not self.step_active or len(args) < _COMMON_POSITIONAL:
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
                *args[:_COMMON_POSITIONAL],
                sm_scale,
                workspace=self.workspace,
                k_descale=args[ks],
                v_descale=args[ks + 1],
            )
        else:
            self._kernel(*args[:_COMMON_POSITIONAL], sm_scale, workspace=self.workspace)
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
        named = dict(zip(self.layout.extend_positional, args[_COMMON_POSITIONAL:]))
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


def gather_facts(
    backend: Any, model_runner: Any, version: str, *, fp8_kv: bool = False
) -> ServerFacts:
    """Read what :func:`~.eligibility.decide` needs from SGLang's objects."""
    import kdtree_mla

    kernel_error, kernel_archs = probe_kernel(getattr(model_runner, "gpu_id", None))
    model_config = model_runner.model_config
    server_args = model_runner.server_args
    use_mla = getattr(backend, "use_mla", None)
    if use_mla is None:  # 0.5.9 keeps it on the model runner only
        arch_name = getattr(getattr(model_config, "attention_arch", None), "name", "")
        use_mla = arch_name == "MLA"
    lora = getattr(model_config, "kv_lora_rank", None)
    rope = getattr(model_config, "qk_rope_head_dim", None)
    qk_head_dim = lora + rope if isinstance(lora, int) and isinstance(rope, int) else None
    sliding = getattr(backend, "sliding_window_size", None)
    return ServerFacts(
        sglang_version=version,
        kernel_version=str(kdtree_mla.__version__),
        kernel_error=kernel_error,
        arch=device_arch(model_runner),
        kernel_archs=kernel_archs,
        use_mla=bool(use_mla),
        qk_head_dim=qk_head_dim,
        v_head_dim=_int_or_none(getattr(backend, "v_head_dim", None)),
        kv_cache_dtype=str(getattr(model_runner, "kv_cache_dtype", "unknown")),
        page_size=int(
            getattr(model_runner, "page_size", getattr(server_args, "page_size", 1)) or 1
        ),
        speculative=_speculative(model_runner),
        num_draft_tokens=_int_or_none(getattr(backend, "num_draft_tokens", None)),
        num_heads=int(backend.num_head),
        sliding_window=sliding is not None and sliding > 0,
        deterministic=bool(getattr(backend, "enable_deterministic", False)),
        verify_backend=_verify_backend_name(model_runner),
        fp8_kv=fp8_kv,
    )


def probe_kernel(gpu: int | None = None) -> tuple[str | None, tuple[int, ...] | None]:
    """(why the extension is unusable on GPU ``gpu`` or None, the archs it was built for or None).

    Uses the API's ``load``/``compiled_archs``/``device_supported`` when present (the last one
    also checks that a kernel variant fits the device's shared memory).
    """
    try:
        from kdtree_mla import api

        load = getattr(api, "load", None) or api._load_ext
        load()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}", None
    archs: tuple[int, ...] | None = None
    compiled = getattr(api, "compiled_archs", None)
    if callable(compiled):
        try:
            # [] means "no build information": unknown, not "built for nothing".
            archs = tuple(int(str(a).removeprefix("sm_").rstrip("af")) for a in compiled()) or None
        except (TypeError, ValueError):
            archs = None
    supported = getattr(api, "device_supported", None)
    if callable(supported) and device_arch_index(gpu) is not None:
        ok, why = supported(device_arch_index(gpu))
        if not ok:
            return str(why), archs
    return None, archs


def device_arch_index(gpu: int | None) -> int | None:
    """The CUDA device index to probe, or None when no CUDA device is visible."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return torch.cuda.current_device() if gpu is None else int(gpu)


def device_arch(model_runner: Any) -> int | None:
    """The model runner's GPU compute capability as digits (90, 120), None without CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    gpu = getattr(model_runner, "gpu_id", None)
    index = torch.cuda.current_device() if gpu is None else int(gpu)
    major, minor = torch.cuda.get_device_capability(index)
    return int(major) * 10 + int(minor)


def _max_batch(model_runner: Any) -> int:
    # The largest verify batch the server can form: every running request at once. Graph
    # capture never exceeds it; init_cuda_graph_state grows the workspace if it did.
    pool = getattr(getattr(model_runner, "req_to_token_pool", None), "size", None)
    graph_bs = getattr(model_runner.server_args, "cuda_graph_max_bs", None)
    return max(int(pool or 1), int(graph_bs or 1))


def _speculative(model_runner: Any) -> bool:
    algo = getattr(model_runner, "spec_algorithm", None)
    if algo is not None and callable(getattr(algo, "is_none", None)):
        return not algo.is_none()
    return bool(getattr(model_runner.server_args, "speculative_algorithm", None))


def _verify_backend_name(model_runner: Any) -> str | None:
    mode = getattr(model_runner.server_args, "speculative_attention_mode", "prefill") or "prefill"
    name = getattr(model_runner, f"{mode}_attention_backend_str", None)
    if name is None:
        name = getattr(model_runner.server_args, "attention_backend", None)
    return None if name is None else str(name)


def _forward_mode(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if len(args) > _FORWARD_MODE_POS:
        return args[_FORWARD_MODE_POS]
    return kwargs["forward_mode"]


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


def _int_or_none(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def _cuda_device(device: Any) -> Any:
    import torch

    if device is None:
        return torch.device("cuda", torch.cuda.current_device())
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return dev


def _compiler_disabled(router: VerifyRouter) -> Callable[..., Any]:
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
