"""CPU tests of the plugin path: decisions per release, the entry point, registration, refusals.

No torch, no GPU, no SGLang. The decisions are checked on every release of the table kctl
derives from the published wheels (``kctl/sglang/data/releases.json``); the entry point on the
metadata setuptools builds from ``kernels/pyproject.toml``; registration and the backend
subclass against stand-in SGLang modules with the names, signatures and hooks of 0.5.11 and
0.5.23 (read in their wheels).
"""

from __future__ import annotations

import importlib.machinery
import inspect
import json
import shutil
import subprocess
import sys
import textwrap
import types
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

KERNELS = Path(__file__).resolve().parents[1]
REPO = KERNELS.parent
sys.path.insert(0, str(KERNELS))

from kdtree_mla.sglang import announce, backend, loglines, plugin, releases  # noqa: E402
from kdtree_mla.sglang.releases import (  # noqa: E402
    HookFacts,
    UnsupportedRelease,
    facts_from_table,
    route,
)

TABLE = REPO / "kctl" / "sglang" / "data" / "releases.json"


def table() -> list[dict[str, Any]]:
    return list(json.loads(TABLE.read_text())["releases"])


def record(version: str) -> dict[str, Any]:
    return next(r for r in table() if r["version"] == version)


# --- decisions per release, from the release table --------------------------------------------


def test_the_table_covers_every_release_from_0_5_9() -> None:
    versions = [r["version"] for r in table()]
    assert versions[0] == "0.5.9" and "0.5.10.post1" in versions and "0.5.23" in versions


@pytest.mark.parametrize("rec", table(), ids=lambda r: r["version"])
def test_each_release_gets_its_path_and_hooks(rec: dict[str, Any]) -> None:
    decided = route(facts_from_table(rec))
    key = releases.version_key(rec["version"])
    assert key is not None
    assert decided.supported, decided.reason
    # The path: the startup hook before the plugin framework (0.5.11), the plugin after.
    expected_path = "plugin" if key >= (0, 5, 11, -1) else "startup-hook"
    assert decided.path == expected_path
    assert rec["hooks"]["plugins"]["package"] == (expected_path == "plugin")
    # The CUDA-graph hooks: capture/replay up to 0.5.12.post1, out_graph/in_graph from 0.5.13.
    expected_graphs = "out_in_graph" if key >= (0, 5, 13, -1) else "capture_replay"
    assert decided.graph_hooks == expected_graphs
    # The positional layout of extend_attention_fwd after max_len_extend.
    assert decided.layout is not None
    expected = ("sm_scale",) if rec["version"] == "0.5.9" else ("k_scale", "v_scale", "sm_scale")
    assert decided.layout.extend_positional == expected


def test_0_5_10_post1_is_0_5_10() -> None:
    a, b = (
        route(facts_from_table(record("0.5.10"))),
        route(facts_from_table(record("0.5.10.post1"))),
    )
    assert (a.path, a.graph_hooks, a.layout.extend_positional) == (  # type: ignore[union-attr]
        b.path, b.graph_hooks, b.layout.extend_positional,  # type: ignore[union-attr]
    )  # fmt: skip


def test_releases_without_the_plugin_framework_and_not_read_are_refused() -> None:
    facts = facts_from_table(record("0.5.10"))
    for version, why in [
        ("0.5.8", "older than 0.5.9"),
        ("0.5.10.post2", "startup hook was read against 0.5.9, 0.5.10, 0.5.10.post1 only"),
        ("nightly", "older than 0.5.9"),
    ]:
        decided = route(replace(facts, version=version))
        assert not decided.supported and why in decided.reason


@pytest.mark.parametrize(
    "change, why",
    [
        (
            {"triton_methods": frozenset({"__init__", "init_forward_metadata"})},
            "lacks forward_extend",
        ),
        ({"extend_params": ()}, "leading parameters are unknown"),
        ({"extend_params": ("q", "k")}, "leading parameters are q, k"),
        ({"register_attention_backend": False}, "register_attention_backend"),
        ({"choices_module": None}, "add_attention_backend_choices"),
    ],
)
def test_a_release_missing_a_hook_is_refused_with_the_reason(
    change: dict[str, Any], why: str
) -> None:
    decided = route(replace(facts_from_table(record("0.5.23")), **change))
    assert decided.path is None and why in decided.reason


def test_an_unknown_extend_parameter_is_refused_until_read() -> None:
    facts = facts_from_table(record("0.5.23"))
    decided = route(replace(facts, extend_params=(*facts.extend_params, "new_knob")))
    assert decided.path is None and "new_knob" in decided.reason


def test_no_graph_hooks_is_refused() -> None:
    facts = facts_from_table(record("0.5.23"))
    methods = facts.triton_methods - {"init_forward_metadata_out_graph"}
    decided = route(replace(facts, triton_methods=methods))
    assert decided.path is None and "CUDA-graph" in decided.reason


def test_refused_keywords() -> None:
    assert releases.refused_keyword("score_mod", None) is None
    assert releases.refused_keyword("skip_prefix", False) is None
    assert "score_mod" in str(releases.refused_keyword("score_mod", lambda s: s))
    assert "skip_prefix" in str(releases.refused_keyword("skip_prefix", True))
    assert releases.refused_keyword("page_size", 16) is None  # a per-call fallback, not a refusal


def test_the_pure_modules_import_without_torch_or_sglang() -> None:
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import kdtree_mla.sglang.plugin, kdtree_mla.sglang.releases;"
        "bad = [m for m in ('torch', 'sglang') if m in sys.modules]; print(bad); sys.exit(bool(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(KERNELS)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


# --- the entry point, in the metadata setuptools builds ---------------------------------------

# setup.py imports torch's extension helpers; metadata needs none of their work.
FAKE_CPP_EXTENSION = """
from setuptools import Extension
from setuptools.command.build_ext import build_ext


def CUDAExtension(name, sources, **kwargs):
    return Extension(name, sources)


class BuildExtension(build_ext):
    @classmethod
    def with_options(cls, **kwargs):
        return cls
"""


@pytest.fixture(scope="module")
def built_metadata(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("meta")
    fake = root / "fake"
    (fake / "torch" / "utils").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text("")
    (fake / "torch" / "utils" / "__init__.py").write_text("")
    (fake / "torch" / "utils" / "cpp_extension.py").write_text(FAKE_CPP_EXTENSION)
    src = root / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "kdtree_mla_startup.pth"):
        shutil.copy(KERNELS / name, src / name)
    shutil.copytree(KERNELS / "kdtree_mla", src / "kdtree_mla",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))  # fmt: skip
    out = root / "out"
    out.mkdir()
    code = "import setuptools.build_meta as b, sys; print(b.prepare_metadata_for_build_wheel(sys.argv[1]))"
    env = {"PYTHONPATH": str(fake), "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "-c", code, str(out)], cwd=src, env=env,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    return out / run.stdout.strip().splitlines()[-1]


def test_the_built_metadata_declares_the_plugin_entry_point(built_metadata: Path) -> None:
    text = (built_metadata / "entry_points.txt").read_text()
    assert "[sglang.srt.plugins]" in text
    assert "kdtree = kdtree_mla.sglang.plugin:register" in text


def test_sglang_discovery_finds_and_loads_the_register_function(built_metadata: Path) -> None:
    """What SGLang's load_plugins_by_group does: entry_points(group=...), then ep.load()."""
    code = textwrap.dedent(
        """
        import sys
        sys.path[:0] = [sys.argv[1], sys.argv[2]]
        from importlib.metadata import entry_points
        eps = [ep for ep in entry_points(group="sglang.srt.plugins") if ep.dist.name == "kdtree-mla"]
        assert [ep.name for ep in eps] == ["kdtree"], eps
        fn = eps[0].load()
        print(fn.__module__, fn.__name__)
        """
    )
    run = subprocess.run([sys.executable, "-c", code, str(built_metadata.parent), str(KERNELS)],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["kdtree_mla.sglang.plugin", "register"]


# --- registration and the backend subclass, against stand-in SGLang modules -------------------


def _module(name: str, **attrs: Any) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
    mod.__dict__.update(attrs)
    return mod


def fake_sglang(monkeypatch: pytest.MonkeyPatch, *, release: str) -> dict[str, Any]:
    """sys.modules entries with the registry, choices hook and plugin module of ``release``."""
    backends: dict[str, Any] = {}
    choices = ["triton", "flashinfer"]

    def register_attention_backend(name: str) -> Any:
        def deco(fn: Any) -> Any:
            backends[name] = fn
            return fn

        return deco

    choices_name = (
        "sglang.srt.arg_groups.choices" if release >= "0.5.20" else "sglang.srt.server_args"
    )
    mods = {
        "sglang.srt.layers.attention.attention_registry": _module(
            "sglang.srt.layers.attention.attention_registry",
            ATTENTION_BACKENDS=backends,
            register_attention_backend=register_attention_backend,
        ),
        choices_name: _module(
            choices_name,
            ATTENTION_BACKEND_CHOICES=choices,
            add_attention_backend_choices=choices.extend,
        ),  # fmt: skip
        "sglang.srt.plugins": _module(
            "sglang.srt.plugins", GENERAL_PLUGINS_GROUP="sglang.srt.plugins"
        ),
    }
    for name in plugin.CHOICES_MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(plugin.importlib, "import_module", _only_fakes(mods))
    return {"backends": backends, "choices": choices}


def _only_fakes(mods: dict[str, Any]) -> Any:
    def import_module(name: str) -> Any:
        if name in mods:
            return mods[name]
        raise ModuleNotFoundError(name)

    return import_module


@pytest.mark.parametrize("release", ["0.5.11", "0.5.23"])
def test_register_adds_the_backend_and_the_choice_once(
    monkeypatch: pytest.MonkeyPatch, release: str
) -> None:
    fake = fake_sglang(monkeypatch, release=release)
    plugin.register()
    plugin.register()  # idempotent (SGLang guards load_plugins, but cheap to be sure)
    assert fake["backends"] == {"kdtree": plugin.create_backend}
    assert fake["choices"] == ["triton", "flashinfer", "kdtree"]


def test_register_without_the_registry_raises_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plugin.importlib, "import_module", _only_fakes({}))
    with pytest.raises(UnsupportedRelease, match="attention_registry"):
        plugin.register()


def test_register_without_a_choices_hook_raises_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_sglang(monkeypatch, release="0.5.23")
    mods = {"sglang.srt.layers.attention.attention_registry":
            sys.modules["sglang.srt.layers.attention.attention_registry"]}  # fmt: skip
    monkeypatch.setattr(plugin.importlib, "import_module", _only_fakes(mods))
    with pytest.raises(UnsupportedRelease, match="add_attention_backend_choices"):
        plugin.register()


# The extend_attention_fwd signature of 0.5.23 (sglang/kernels/ops/attention/extend_attention.py).
def extend_attention_fwd_0_5_23(  # noqa: PLR0913
    q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer, qo_indptr, kv_indptr,
    kv_indices, custom_mask, is_causal, mask_indptr, max_len_extend, k_scale, v_scale,
    sm_scale=None, logit_cap=0.0, skip_prefix_custom_mask=True, sliding_window_size=-1,
    sinks=None, window_kv_offsets=None, xai_temperature_len=-1, lse_extend=None,
    skip_prefix=False, skip_extend=False, page_size=1, score_mod=None, aux_tensors=None,
    extend_seq_lens_cpu=None, identity_kv_indices=False,
):  # type: ignore[no-untyped-def]  # fmt: skip
    raise AssertionError("not called")


class Mode:
    def __init__(self, verify: bool) -> None:
        self.verify = verify

    def is_target_verify(self) -> bool:
        return self.verify


class FakeRouter:
    _plan = None

    def __init__(self) -> None:
        self.steps: list[bool] = []
        self.capacity: list[int] = []

    def begin_step(self, verify: bool) -> None:
        self.steps.append(verify)

    def ensure_capacity(self, n: int) -> None:
        self.capacity.append(n)


def fake_triton_class(graphs: str) -> type:
    """A TritonAttnBackend with the hooks of 0.5.23 (out/in graph) or 0.5.11 (capture/replay)."""
    calls: list[str] = []

    class TritonAttnBackend:
        log = calls

        def __init__(self, model_runner: Any) -> None:
            self.extend_attention_fwd = extend_attention_fwd_0_5_23
            calls.append("__init__")

        def forward_extend(self, *a: Any) -> None: ...

        def init_forward_metadata(self, forward_batch: Any) -> None:
            calls.append("init_forward_metadata")

        def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int) -> None:
            calls.append("init_cuda_graph_state")

    if graphs == "out_in_graph":

        def out_graph(self: Any, forward_batch: Any, in_capture: bool = False) -> None:
            calls.append(f"out_graph({in_capture})")

        def in_graph(self: Any, forward_batch: Any) -> None:
            calls.append("in_graph")

        TritonAttnBackend.init_forward_metadata_out_graph = out_graph  # type: ignore[attr-defined]
        TritonAttnBackend.init_forward_metadata_in_graph = in_graph  # type: ignore[attr-defined]
    else:

        def capture(self: Any, bs: int, num_tokens: int, req_pool_indices: Any, seq_lens: Any,
                    encoder_lens: Any, forward_mode: Any, spec_info: Any) -> None:  # fmt: skip
            calls.append("capture")

        def replay(self: Any, bs: int, req_pool_indices: Any, seq_lens: Any, seq_lens_sum: int,
                   encoder_lens: Any, forward_mode: Any, spec_info: Any, seq_lens_cpu: Any) -> None:  # fmt: skip
            calls.append("replay")

        TritonAttnBackend.init_forward_metadata_capture_cuda_graph = capture  # type: ignore[attr-defined]
        TritonAttnBackend.init_forward_metadata_replay_cuda_graph = replay  # type: ignore[attr-defined]
    return TritonAttnBackend


@pytest.fixture
def attached(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Replaces patch.attach (which reads a real model runner) with a recorder + fake router."""
    seen: list[tuple[Any, ...]] = []

    def attach(
        self: Any, runner: Any, layout: Any, version: str, path: str = "", fp8_kv: bool = False
    ) -> None:
        seen.append((layout.extend_positional, version, path))
        self.__dict__[backend.patch.ROUTER] = FakeRouter()

    monkeypatch.setattr(backend.patch, "attach", attach)
    return seen


def test_backend_on_0_5_23_routes_out_graph_and_in_graph(
    monkeypatch: pytest.MonkeyPatch, attached: list[tuple[Any, ...]]
) -> None:
    fake_sglang(monkeypatch, release="0.5.23")
    monkeypatch.setattr(backend, "installed_version", lambda: "0.5.23")
    base = fake_triton_class("out_in_graph")
    cls = backend.backend_class(base)
    assert issubclass(cls, base) and cls.kdtree_graph_hooks == "out_in_graph"
    assert "init_forward_metadata_capture_cuda_graph" not in vars(cls)
    b = cls(SimpleNamespace())
    assert attached == [(("k_scale", "v_scale", "sm_scale"), "0.5.23", "plugin")]
    router = vars(b)[backend.patch.ROUTER]
    verify, decode = (SimpleNamespace(forward_mode=Mode(v), batch_size=2) for v in (True, False))
    b.init_cuda_graph_state(48, 192)
    b.init_forward_metadata_out_graph(verify, True)  # before capture
    b.init_forward_metadata_in_graph(verify)  # inside the capture
    b.init_forward_metadata_out_graph(decode, False)  # replay of a decode graph
    b.init_forward_metadata(verify)  # eager
    assert router.steps == [True, True, False, True] and router.capacity == [48]
    assert base.log == ["__init__", "init_cuda_graph_state", "out_graph(True)", "in_graph",
                        "out_graph(False)", "init_forward_metadata"]  # fmt: skip


def test_backend_on_0_5_11_routes_capture_and_replay(
    monkeypatch: pytest.MonkeyPatch, attached: list[tuple[Any, ...]]
) -> None:
    fake_sglang(monkeypatch, release="0.5.11")
    monkeypatch.setattr(backend, "installed_version", lambda: "0.5.11")
    base = fake_triton_class("capture_replay")
    cls = backend.backend_class(base)
    assert cls.kdtree_graph_hooks == "capture_replay"
    b = cls(SimpleNamespace())
    router = vars(b)[backend.patch.ROUTER]
    b.init_forward_metadata_capture_cuda_graph(2, 8, [0, 1], None, None, Mode(True), None)
    b.init_forward_metadata_replay_cuda_graph(2, [0, 1], None, 9, None, Mode(False), None, None)
    assert router.steps == [True, False] and base.log[-2:] == ["capture", "replay"]
    assert attached[0][2] == "plugin"


def test_backend_on_a_release_without_the_plugin_framework_refuses_loudly(
    monkeypatch: pytest.MonkeyPatch, attached: list[tuple[Any, ...]], capsys: Any
) -> None:
    fake_sglang(monkeypatch, release="0.5.23")
    monkeypatch.delitem(sys.modules, "sglang.srt.plugins")
    monkeypatch.setattr(backend, "installed_version", lambda: "0.5.10")
    announce.reset_for_tests()
    cls = backend.backend_class(fake_triton_class("capture_replay"))
    with pytest.raises(UnsupportedRelease, match="kdtree on sglang 0.5.10"):
        cls(SimpleNamespace())
    assert attached == []
    m = loglines.DECLINED_LINE_RE.search(capsys.readouterr().err.strip())
    assert m and m.group("sglang") == "0.5.10" and "KDTREE_VERIFY=1" in m.group("reason")
    announce.reset_for_tests()


def test_backend_refuses_an_extend_signature_it_does_not_know(
    monkeypatch: pytest.MonkeyPatch, attached: list[tuple[Any, ...]]
) -> None:
    fake_sglang(monkeypatch, release="0.5.23")
    monkeypatch.setattr(backend, "installed_version", lambda: "0.5.24")
    base = fake_triton_class("out_in_graph")
    orig_init = base.__init__

    def init(self: Any, runner: Any) -> None:
        orig_init(self, runner)

        def extend_attention_fwd(*args: Any, new_knob: int = 0, **kwargs: Any) -> None: ...

        sig = inspect.signature(extend_attention_fwd_0_5_23)
        params = [
            *sig.parameters.values(),
            inspect.Parameter("new_knob", inspect.Parameter.KEYWORD_ONLY, default=0),
        ]
        extend_attention_fwd.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        self.extend_attention_fwd = extend_attention_fwd

    base.__init__ = init  # type: ignore[method-assign]
    announce.reset_for_tests()
    with pytest.raises(UnsupportedRelease, match="new_knob"):
        backend.backend_class(base)(SimpleNamespace())
    announce.reset_for_tests()


def test_a_class_without_graph_hooks_is_refused() -> None:
    class Bare:
        def __init__(self, runner: Any) -> None: ...

    with pytest.raises(UnsupportedRelease, match="out_graph"):
        backend.backend_class(Bare)


def test_runtime_facts_match_the_table_for_0_5_23(monkeypatch: pytest.MonkeyPatch) -> None:
    """The facts read from running modules equal those derived from the wheel, where both see."""
    fake_sglang(monkeypatch, release="0.5.23")
    base = fake_triton_class("out_in_graph")
    got = backend.runtime_facts("0.5.23", base, base(SimpleNamespace()))
    want = facts_from_table(record("0.5.23"))
    assert got.extend_params == want.extend_params
    assert got.plugin_entry_points and want.plugin_entry_points
    assert got.choices_module == want.choices_module
    assert route(got).path == route(want).path == "plugin"
    assert isinstance(got, HookFacts)
