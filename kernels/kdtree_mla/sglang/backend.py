"""The ``kdtree`` attention backend: a subclass of the running release's ``TritonAttnBackend``.

Built by the plugin's factory (:func:`create`) inside an SGLang process, so torch and SGLang are
there. Everything is SGLang's code except these overrides, each of which calls SGLang's method
first:

* ``__init__``: read the release's hooks and decide the path (:func:`.releases.route`); a
  release the backend cannot serve raises :class:`.releases.UnsupportedRelease` with the reason
  (after the decline line). Then the same per-server decision as the startup hook
  (:func:`.patch.attach`): the activation line with ``path=plugin`` and a
  :class:`~.patch.VerifyRouter` on this instance's ``extend_attention_fwd``, or the decline
  line (the backend then serves exactly as ``triton``).
* ``init_forward_metadata`` and the release's CUDA-graph metadata hooks (capture/replay up to
  0.5.12, ``init_forward_metadata_out_graph``/``_in_graph`` from 0.5.13): tell the router
  whether this step is a target-verify step.
* ``init_cuda_graph_state``: grow the workspace before capture if the graph batch is larger.

A draft worker's backend (``is_draft_worker``) and ``skip_prefill`` backends are plain Triton.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import sys
from typing import Any

from kdtree_mla.sglang import announce, patch
from kdtree_mla.sglang.loglines import UNKNOWN_VERSION
from kdtree_mla.sglang.releases import (
    PLUGIN_GROUP,
    HookFacts,
    UnsupportedRelease,
    graph_hooks,
    route,
)
from kdtree_mla.sglang.versions import installed_version

TRITON_MODULE = "sglang.srt.layers.attention.triton_backend"
#: Where ``extend_attention_fwd`` lives, newest first (moved in 0.5.16).
EXTEND_MODULES = (
    "sglang.kernels.ops.attention.extend_attention",
    "sglang.srt.layers.attention.triton_ops.extend_attention",
)


def create(model_runner: Any, *args: Any, **kwargs: Any) -> Any:
    """A ``kdtree`` backend for ``model_runner`` (the registered factory's body)."""
    triton_backend = importlib.import_module(TRITON_MODULE)
    cls = backend_class(triton_backend.TritonAttnBackend)
    return cls(model_runner, *args, **kwargs)


def _step(backend: Any, verify: bool, bs: int | None = None) -> None:
    router: patch.VerifyRouter | None = backend.__dict__.get(patch.ROUTER)
    if router is None:
        return
    router.begin_step(verify)
    if verify and router._plan is not None:
        if bs is None:
            meta = backend.forward_metadata
            router.plan(meta.qo_indptr, meta.kv_indptr)
        else:
            router.plan(backend.qo_indptr[: bs + 1], backend.kv_indptr[: bs + 1])


@functools.cache
def backend_class(base: type) -> type:
    """The ``kdtree`` subclass of ``base`` (a release's ``TritonAttnBackend``), built once.

    Raises :class:`UnsupportedRelease` when ``base`` has neither pair of CUDA-graph hooks.
    """
    graphs = graph_hooks(name for name in dir(base) if callable(getattr(base, name, None)))
    parent: Any = base  # the release's class: its hooks are looked up at run time
    if graphs is None:
        raise UnsupportedRelease(
            "TritonAttnBackend has neither init_forward_metadata_capture/replay_cuda_graph "
            "nor init_forward_metadata_out_graph/in_graph"
        )

    def __init__(self: Any, model_runner: Any, *args: Any, **kwargs: Any) -> None:
        parent.__init__(self, model_runner, *args, **kwargs)
        version = installed_version() or UNKNOWN_VERSION
        facts = runtime_facts(version, base, self)
        decided = route(facts)
        if decided.path != "plugin" or decided.layout is None:
            reason = decided.reason
            if not facts.plugin_entry_points:
                reason = (
                    f"sglang {version} has no plugin framework (sglang.srt.plugins); there the "
                    "kernel enters through the startup hook: KDTREE_VERIFY=1 with "
                    "--attention-backend triton"
                )
            announce.declined(reason, version)
            raise UnsupportedRelease(f"--attention-backend kdtree on sglang {version}: {reason}")
        patch.attach(
            self, model_runner, decided.layout, version, path="plugin", fp8_kv=reads_fp8_mla(base)
        )

    def init_forward_metadata(self: Any, forward_batch: Any) -> None:
        parent.init_forward_metadata(self, forward_batch)
        _step(self, bool(forward_batch.forward_mode.is_target_verify()))

    def init_cuda_graph_state(self: Any, max_bs: int, *args: Any, **kwargs: Any) -> None:
        parent.init_cuda_graph_state(self, max_bs, *args, **kwargs)
        router: patch.VerifyRouter | None = self.__dict__.get(patch.ROUTER)
        if router is not None:
            router.ensure_capacity(int(max_bs))

    ns: dict[str, Any] = {
        "__init__": __init__,
        "init_forward_metadata": init_forward_metadata,
        "init_cuda_graph_state": init_cuda_graph_state,
        "__doc__": f"{base.__name__} with target-verify MLA attention on the kdtree_mla kernel.",
        "__module__": __name__,
        "kdtree_graph_hooks": graphs,
    }
    if graphs == "capture_replay":

        def init_forward_metadata_capture_cuda_graph(self: Any, *args: Any, **kw: Any) -> None:
            parent.init_forward_metadata_capture_cuda_graph(self, *args, **kw)
            _step(self, bool(patch._forward_mode(args, kw).is_target_verify()))

        def init_forward_metadata_replay_cuda_graph(self: Any, *args: Any, **kw: Any) -> None:
            parent.init_forward_metadata_replay_cuda_graph(self, *args, **kw)
            req_pool_indices = args[1] if len(args) > 1 else kw["req_pool_indices"]
            verify = bool(patch._forward_mode(args, kw).is_target_verify())
            _step(self, verify, len(req_pool_indices))

        ns["init_forward_metadata_capture_cuda_graph"] = init_forward_metadata_capture_cuda_graph
        ns["init_forward_metadata_replay_cuda_graph"] = init_forward_metadata_replay_cuda_graph
    else:

        def init_forward_metadata_out_graph(
            self: Any, forward_batch: Any, *args: Any, **kw: Any
        ) -> None:
            parent.init_forward_metadata_out_graph(self, forward_batch, *args, **kw)
            verify = bool(forward_batch.forward_mode.is_target_verify())
            _step(self, verify, int(forward_batch.batch_size))

        def init_forward_metadata_in_graph(self: Any, forward_batch: Any) -> None:
            parent.init_forward_metadata_in_graph(self, forward_batch)
            router: patch.VerifyRouter | None = self.__dict__.get(patch.ROUTER)
            if router is not None:
                router.begin_step(bool(forward_batch.forward_mode.is_target_verify()))

        ns["init_forward_metadata_out_graph"] = init_forward_metadata_out_graph
        ns["init_forward_metadata_in_graph"] = init_forward_metadata_in_graph
    return type("KdtreeAttnBackend", (base,), ns)


#: The comment 0.5.9 to 0.5.11 carry where their Triton backend stores MLA KV unscaled.
NO_FP8_MLA_MARK = "Triton MLA currently doesn't support quantized kv cache"


def reads_fp8_mla(base: type) -> bool:
    """Whether the release's own Triton MLA path reads an fp8 KV cache, from its source.

    From 0.5.13 (read in the wheels) ``forward_extend`` divides an MLA layer's K by
    ``layer.k_scale`` before storing it and passes ``k_descale``/``v_descale`` to its kernel;
    up to 0.5.11 it stores K unscaled and says so. Unreadable source counts as no.
    """
    try:
        source = inspect.getsource(base.forward_extend)  # type: ignore[attr-defined]
    except (OSError, TypeError, AttributeError):
        return False
    return NO_FP8_MLA_MARK not in source and "k_descale" in source and "k_scale" in source


def runtime_facts(version: str, base: type, instance: Any = None) -> HookFacts:
    """The running release's :class:`~.releases.HookFacts`, read from its modules."""
    methods = frozenset(name for name in dir(base) if callable(getattr(base, name, None)))
    registry = _module("sglang.srt.layers.attention.attention_registry")
    plugins = _module("sglang.srt.plugins")
    from kdtree_mla.sglang.plugin import choices_hook

    choices_module, _add = choices_hook()
    runner_module = sys.modules.get("sglang.srt.model_executor.model_runner")
    runner_cls = getattr(runner_module, "ModelRunner", None)
    return HookFacts(
        version=version,
        plugin_entry_points=getattr(plugins, "GENERAL_PLUGINS_GROUP", None) == PLUGIN_GROUP,
        register_attention_backend=callable(getattr(registry, "register_attention_backend", None)),
        choices_module=None if choices_module is None else choices_module.__name__,
        triton_methods=methods,
        model_runner=tuple(
            n
            for n in ("init_attention_backend", "init_attention_backends")
            if callable(getattr(runner_cls, n, None))
        ),
        extend_params=extend_params(instance),
    )


def extend_params(instance: Any = None) -> tuple[str, ...]:
    """``extend_attention_fwd``'s parameter names: the instance's (what the router wraps), else
    the function in the module the release defines it in; () when neither can be read."""
    candidates = [getattr(instance, "extend_attention_fwd", None)]
    for name in EXTEND_MODULES:
        candidates.append(getattr(_module(name), "extend_attention_fwd", None))
    for fn in candidates:
        if fn is None:
            continue
        try:
            params = tuple(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            continue
        if params[:1] == ("q_extend",):  # not a (*args, **kwargs) wrapper
            return params
    return ()


def _module(name: str) -> Any:
    try:
        if importlib.util.find_spec(name) is None:
            return None
        return importlib.import_module(name)
    except Exception:
        return None
