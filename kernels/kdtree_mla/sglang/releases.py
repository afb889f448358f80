"""Which way the kernel enters an SGLang release, decided from the hooks the release has.

Pure data and plain functions (imports nothing beyond the standard library), so CPU tests check
every published release's decision without torch or SGLang:

* :class:`HookFacts` is what a release offers at the points the integration touches: the
  plugin framework (``sglang.srt.plugins`` entry points), the attention-backend registry and
  its choices hook, the Triton backend's metadata and CUDA-graph hooks, ``ModelRunner``'s
  backend constructor, and the parameters of ``extend_attention_fwd``.
* :func:`route` turns them into a :class:`Route`: the **plugin** path (a registered attention
  backend named ``kdtree``, selected with ``--attention-backend kdtree``), the **startup hook**
  (``.pth`` + ``KDTREE_VERIFY=1``, for releases before the plugin framework), or a refusal with
  its reason.

At run time the facts are read from the SGLang that is running (:mod:`.plugin`, :mod:`.hook`);
the CPU tests read them from the release table kctl derives from every published wheel
(``kctl/sglang/data/releases.json``, :func:`facts_from_table`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kdtree_mla.sglang.versions import SglangLayout, version_key

#: The name the plugin registers (``--attention-backend kdtree``).
BACKEND_NAME = "kdtree"
#: The entry-point group SGLang's plugin framework loads in every process.
PLUGIN_GROUP = "sglang.srt.plugins"
#: The entry point's name (what ``SGLANG_PLUGINS`` must list when it is set).
PLUGIN_NAME = "kdtree"

#: Releases the startup hook was read against (0.5.10.post1 ships 0.5.10's Triton backend).
STARTUP_HOOK_RELEASES = ("0.5.9", "0.5.10", "0.5.10.post1")

#: ``extend_attention_fwd``'s positional prefix that every release shares.
COMMON_PARAMS = (
    "q_extend",
    "k_extend",
    "v_extend",
    "o_extend",
    "k_buffer",
    "v_buffer",
    "qo_indptr",
    "kv_indptr",
    "kv_indices",
    "custom_mask",
    "is_causal",
    "mask_indptr",
    "max_len_extend",
)
#: The two positional layouts after ``max_len_extend`` (0.5.10 inserted the KV scales).
SCALE_LAYOUTS = (("k_scale", "v_scale", "sm_scale"), ("sm_scale",))

#: Keyword parameters the router understands, with the value that leaves the kernel's
#: semantics unchanged (None: checked elsewhere or ignored as bookkeeping).
KNOWN_KEYWORDS: Mapping[str, Any] = {
    "logit_cap": 0.0,
    "skip_prefix_custom_mask": True,
    "sliding_window_size": -1,
    "sinks": None,
    "window_kv_offsets": None,
    "xai_temperature_len": -1,
    "lse_extend": None,
    "skip_prefix": False,
    "skip_extend": False,
    "page_size": 1,
    "score_mod": None,
    "aux_tensors": None,
    "extend_seq_lens_cpu": None,
    "identity_kv_indices": False,
}
#: Keywords whose non-default value the kernel cannot honour: a verify call carrying one raises
#: :class:`UnsupportedCall` (never a silent fallback).
REFUSED_KEYWORDS: Mapping[str, Any] = {
    "score_mod": None,
    "aux_tensors": None,
    "lse_extend": None,
    "skip_prefix": False,
}

CAPTURE_REPLAY = (
    "init_forward_metadata_capture_cuda_graph",
    "init_forward_metadata_replay_cuda_graph",
)
OUT_IN_GRAPH = ("init_forward_metadata_out_graph", "init_forward_metadata_in_graph")
TRITON_REQUIRED = ("__init__", "forward_extend", "init_forward_metadata", "init_cuda_graph_state")

Path = Literal["plugin", "startup-hook"]
GraphHooks = Literal["capture_replay", "out_in_graph"]


class UnsupportedCall(RuntimeError):
    """A target-verify call asks for something the kernel does not compute (``score_mod``...)."""


class UnsupportedRelease(RuntimeError):
    """``--attention-backend kdtree`` on an SGLang whose hooks the backend cannot use."""


@dataclass(frozen=True)
class HookFacts:
    """What one SGLang release offers the integration.

    Attributes:
        version: the distribution version.
        plugin_entry_points: ``sglang.srt.plugins`` exists and loads the ``sglang.srt.plugins``
            entry-point group.
        register_attention_backend: ``attention_registry.register_attention_backend`` exists.
        choices_module: the module that defines ``add_attention_backend_choices``, or None.
        triton_methods: the methods ``TritonAttnBackend`` has (its own or inherited).
        model_runner: ``ModelRunner``'s backend constructors (``init_attention_backend(s)``).
        extend_params: ``extend_attention_fwd``'s parameter names, in order (empty: unknown).
    """

    version: str
    plugin_entry_points: bool
    register_attention_backend: bool
    choices_module: str | None
    triton_methods: frozenset[str]
    model_runner: tuple[str, ...]
    extend_params: tuple[str, ...]


@dataclass(frozen=True)
class Route:
    """How the kernel enters a release; ``path`` None means refused, ``reason`` says why."""

    version: str
    path: Path | None
    graph_hooks: GraphHooks | None = None
    layout: SglangLayout | None = None
    reason: str = ""

    @property
    def supported(self) -> bool:
        return self.path is not None


def graph_hooks(methods: Iterable[str]) -> GraphHooks | None:
    """Which CUDA-graph metadata hooks a Triton backend has (capture/replay wins if both)."""
    names = set(methods)
    if all(m in names for m in CAPTURE_REPLAY):
        return "capture_replay"
    if all(m in names for m in OUT_IN_GRAPH):
        return "out_in_graph"
    return None


def extend_layout(version: str, params: tuple[str, ...]) -> SglangLayout | str:
    """The router's view of ``extend_attention_fwd``'s parameters, or why it cannot route them."""
    if tuple(params[: len(COMMON_PARAMS)]) != COMMON_PARAMS:
        return (
            f"extend_attention_fwd's leading parameters are {', '.join(params[:13]) or 'unknown'}"
        )
    rest = tuple(params[len(COMMON_PARAMS) :])
    for positional in SCALE_LAYOUTS:
        if rest[: len(positional)] == positional:
            unknown = [p for p in rest[len(positional) :] if p not in KNOWN_KEYWORDS]
            if unknown:
                return f"extend_attention_fwd has parameters the router does not know: {', '.join(unknown)}"
            return SglangLayout(version, positional)
    return f"extend_attention_fwd's parameters after max_len_extend are {', '.join(rest[:3])}"


def route(facts: HookFacts) -> Route:
    """The path the kernel takes into the release ``facts`` describes, or the refusal.

    The plugin path needs the plugin framework, the backend registry and its choices hook; the
    startup hook needs ``ModelRunner.init_attention_backend`` and the capture/replay hooks, on the
    releases it was read against. Both need a Triton backend with the methods the router wraps
    and an ``extend_attention_fwd`` whose parameters it knows.
    """
    version = facts.version
    key = version_key(version)
    if key is None or key < (0, 5, 9, -1):
        return Route(
            version, None, reason=f"sglang {version} is older than 0.5.9, the first release read"
        )
    missing = [m for m in TRITON_REQUIRED if m not in facts.triton_methods]
    if missing:
        return Route(version, None, reason=f"TritonAttnBackend lacks {', '.join(missing)}")
    graphs = graph_hooks(facts.triton_methods)
    if graphs is None:
        return Route(
            version,
            None,
            reason="TritonAttnBackend has no CUDA-graph metadata hooks the backend knows",
        )
    layout = extend_layout(version, facts.extend_params)
    if isinstance(layout, str):
        return Route(version, None, graph_hooks=graphs, reason=layout)
    if facts.plugin_entry_points:
        if not facts.register_attention_backend or facts.choices_module is None:
            return Route(
                version,
                None,
                graph_hooks=graphs,
                reason="the plugin framework is there but register_attention_backend / "
                "add_attention_backend_choices is not",
            )
        return Route(version, "plugin", graphs, layout)
    if version not in STARTUP_HOOK_RELEASES:
        return Route(
            version,
            None,
            graph_hooks=graphs,
            reason=f"sglang {version} has no plugin framework and the startup hook was read "
            f"against {', '.join(STARTUP_HOOK_RELEASES)} only",
        )
    if graphs != "capture_replay" or "init_attention_backend" not in facts.model_runner:
        return Route(
            version, None, graph_hooks=graphs, reason="the startup hook's patch points are missing"
        )
    return Route(version, "startup-hook", graphs, layout)


def refused_keyword(name: str, value: Any) -> str | None:
    """Why a verify call's keyword ``name=value`` cannot go to the kernel, or None."""
    if name not in REFUSED_KEYWORDS:
        return None
    default = REFUSED_KEYWORDS[name]
    if value is default or (default is not None and value == default):
        return None
    return f"{name} is set ({type(value).__name__}); the kdtree kernel does not compute it"


def facts_from_table(record: Mapping[str, Any]) -> HookFacts:
    """The facts of one release record of kctl's release table (``releases.json``)."""
    hooks = record["hooks"]
    triton = hooks["triton_backend"]
    methods = set(triton["methods"])
    if triton.get("class"):
        methods.add("__init__")
    extend = hooks.get("extend_attention_fwd") or {}
    plugins = hooks["plugins"]
    registry = hooks["attention_registry"]
    return HookFacts(
        version=record["version"],
        plugin_entry_points=bool(plugins["package"])
        and PLUGIN_GROUP in plugins["entry_point_groups"],
        register_attention_backend=bool(registry["register_attention_backend"]),
        choices_module=registry["add_attention_backend_choices"],
        triton_methods=frozenset(methods),
        model_runner=tuple(hooks["model_runner"]),
        extend_params=tuple(extend.get("params") or ()),
    )
