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

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kdtree_mla.sglang import announce
from kdtree_mla.sglang import facts as server_facts
from kdtree_mla.sglang.eligibility import (
    decide,
)
from kdtree_mla.sglang.router import VerifyRouter, compiler_disabled
from kdtree_mla.sglang.versions import SglangLayout

__all__ = [
    "ORIGINALS",
    "ROUTER",
    "PatchError",
    "VerifyRouter",
    "attach",
    "is_patched",
    "no_triton_reason",
    "patch_model_runner",
    "patch_triton_backend",
    "unpatch_triton_backend",
]

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
    if not server_facts.speculative(model_runner):
        return "speculative decoding is off: there is no target-verify step"
    name = (
        server_facts.verify_backend_name(model_runner)
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
        facts = server_facts.gather_facts(backend, model_runner, version, fp8_kv=fp8_kv)
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
            device=server_facts.cuda_device(getattr(backend, "device", None)),
            max_batch=server_facts.max_batch(model_runner),
            fp8_kv=fp8_kv,
        )
    except Exception as exc:
        announce.declined(f"workspace allocation failed: {type(exc).__name__}: {exc}", version)
        return
    backend.__dict__[ROUTER] = router
    backend.extend_attention_fwd = compiler_disabled(router)
    assert facts.arch is not None  # decide() refuses a missing device
    announce.active(facts.kernel_version, facts.arch, version, path=path)


def _forward_mode(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if len(args) > _FORWARD_MODE_POS:
        return args[_FORWARD_MODE_POS]
    return kwargs["forward_mode"]
