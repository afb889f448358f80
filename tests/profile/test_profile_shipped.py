"""The shipped profiles: they load, the reference documents every field, and their
launch commands are exactly what SGLang 0.5.10 expects (compared by equality)."""

from __future__ import annotations

import dataclasses
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from kctl.launch import launch_spec, server_args
from kctl.profile import load_profile
from kctl.profile.model import Profile

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "profiles").glob("*.yaml"))
TEST_PROFILES = sorted((REPO / "tests" / "profiles").glob("*.yaml"))


def test_the_expected_profiles_ship() -> None:
    names = {p.name for p in SHIPPED}
    assert {
        "_kimi-k26-base.yaml",
        "triton-graphs.yaml",
        "kdtree-eager.yaml",
        "kdtree-graphs.yaml",
        "reference.yaml",
    } <= names


@pytest.mark.parametrize("path", SHIPPED + TEST_PROFILES, ids=lambda p: p.name)
def test_every_shipped_profile_loads(path: Path) -> None:
    profile = load_profile(path)
    assert profile.name == path.stem
    assert re.fullmatch(r"[0-9a-f]{64}", profile.content_hash)


def _field_paths(cls: Any, prefix: str = "") -> list[str]:
    """Every settable field of the model as a dotted path (list items as ``[]``)."""
    out: list[str] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if cls is Profile and f.name in ("source", "content_hash", "overrides"):
            continue  # filled in by the loader, never written
        path = f"{prefix}{f.name}"
        out.append(path)
        tp = hints[f.name]
        union = typing.get_origin(tp) in (typing.Union, types.UnionType)
        inner = [a for a in typing.get_args(tp) if a is not type(None)] if union else [tp]
        for t in inner:
            args = typing.get_args(t)
            if dataclasses.is_dataclass(t):
                out += _field_paths(t, path + ".")
            elif typing.get_origin(t) is tuple and args and dataclasses.is_dataclass(args[0]):
                out += _field_paths(args[0], path + "[].")
    return out


def _lookup(data: Any, path: str) -> bool:
    node = data
    for part in path.replace("[]", ".[]").split("."):
        if part == "[]":
            if not isinstance(node, list) or not node:
                return False
            node = node[-1]  # the last item spells every key out
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return False
    return True


def test_reference_sets_every_field() -> None:
    data = yaml.safe_load((REPO / "profiles" / "reference.yaml").read_text())
    paths = _field_paths(Profile)
    assert "server.speculative.num_draft_tokens" in paths  # the walk reaches nested specs
    assert "runtime.volumes[].read_only" in paths
    missing = [p for p in paths if not _lookup(data, p)]
    assert missing == [], f"reference.yaml does not set: {missing}"


def _documented(text: str) -> dict[str, str]:
    """``# key: text`` comment blocks of reference.yaml by dotted path; the path comes
    from the indentation (a comment documents a key at its own indentation level)."""
    docs: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    current: str | None = None
    for line in text.splitlines():
        doc = re.match(r"^(\s*)# (\w+): (.*)$", line)
        more = re.match(r"^\s*# ?(.*)$", line)
        key = re.match(r"^(\s*)(- )?([\w-]+):", line)
        if doc:
            indent = len(doc.group(1))
            parents = [k for i, k in stack if i < indent]
            current = ".".join([*parents, doc.group(2)])
            docs[current] = doc.group(3)
        elif more and current:
            docs[current] += " " + more.group(1)
        elif key:
            indent = len(key.group(1)) + (2 if key.group(2) else 0)
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, key.group(3)))
            current = None
        else:
            current = None
    return docs


def _default(path: str) -> Any:
    """The model's default for a dotted field path, or "REQUIRED"."""
    node: Any = Profile
    parts = path.split(".")
    for i, part in enumerate(parts):
        cls = node if isinstance(node, type) else type(node)
        f = {f.name: f for f in dataclasses.fields(cls)}[part]
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            return "REQUIRED"
        if i == len(parts) - 1:
            return value
        if value is None or isinstance(value, tuple):  # an optional or listed spec
            tp = typing.get_type_hints(cls)[part]
            inner = [a for a in typing.get_args(tp) if a is not type(None)][0]
            node = typing.get_args(inner)[0] if typing.get_origin(inner) is tuple else inner
        else:
            node = value
    return node


def _plain(path: str, value: Any) -> Any:
    """A model default as YAML writes it: pair tuples are mappings, tuples are lists."""
    pairs = ("server.env", "server.secrets", "min_ratio_per_context", "weights")
    if isinstance(value, tuple) and path.endswith(pairs):
        return dict(value)
    return list(value) if isinstance(value, tuple) else value


def test_reference_documents_every_field_with_its_true_default() -> None:
    docs = _documented((REPO / "profiles" / "reference.yaml").read_text())
    checked = 0
    for path in _field_paths(Profile):
        key = path.replace("[]", "")
        assert key in docs, (
            f"reference.yaml has no '# {key.rsplit('.', 1)[-1]}:' comment for {path}"
        )
        said = re.search(r"default: (.+?)(?:\.(?:\s|$)| \()", docs[key])
        if "REQUIRED" in docs[key]:
            # server.model_path defaults to "" in the model, but the loader requires it
            assert _default(key) == "REQUIRED" or key == "server.model_path", path
        elif said and path != "name":
            expected = _plain(key, _default(key))
            assert yaml.safe_load(said.group(1)) == expected, (path, said.group(1), expected)
            checked += 1
    assert checked >= 40  # every field with a default states it


KIMI = (
    "--model-path", "/models/Kimi-K2.6",
    "--served-model-name", "kimi-k2.6",
    "--host", "127.0.0.1",
    "--port", "30000",
    "--tp-size", "8",
    "--attention-backend", "triton",
)  # fmt: skip
SPEC = (
    "--speculative-algorithm", "EAGLE3",
    "--speculative-draft-model-path", "/models/Kimi-K26-eagle3",
    "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4",
)  # fmt: skip
GRAPHS = ("--cuda-graph-max-bs", "48", "--trust-remote-code", "--kv-cache-dtype", "bf16")
EAGER = ("--disable-cuda-graph", "--trust-remote-code", "--kv-cache-dtype", "bf16")
ARGS = {
    "triton-graphs": KIMI + GRAPHS + SPEC,
    "kdtree-graphs": KIMI + GRAPHS + SPEC,
    "kdtree-eager": KIMI + EAGER + SPEC,
    "reference": KIMI + GRAPHS + SPEC + ("--max-running-requests", "48"),
}
ENV = {
    "triton-graphs": (("HF_HUB_OFFLINE", "1"),),
    "kdtree-graphs": (("HF_HUB_OFFLINE", "1"), ("KDTREE_VERIFY", "1")),
    "kdtree-eager": (("HF_HUB_OFFLINE", "1"), ("KDTREE_VERIFY", "1")),
    "reference": (("HF_HUB_OFFLINE", "1"),),
}
SIM_ENV = (
    ("KCTL_SIM_LOAD_S", "330"),
    ("KCTL_SIM_SGLANG_VERSION", "0.5.10"),
    ("KCTL_SIM_SPEEDUP", "50"),
)


@pytest.mark.parametrize("name", sorted(ARGS))
def test_real_launch_argv(name: str) -> None:
    profile = load_profile(REPO / "profiles" / f"{name}.yaml")
    assert server_args(profile.server) == ARGS[name]
    spec = launch_spec(profile, "dep-1", simulate=False, image="kctl-serve:abc")
    assert spec.argv == ("sglang", "serve", *ARGS[name])
    assert spec.env == ENV[name]
    assert (spec.host, spec.port, spec.image) == ("127.0.0.1", 30000, "kctl-serve:abc")
    assert spec.labels == (
        ("kctl.deployment", "dep-1"),
        ("kctl.profile", name),
        ("kctl.profile-hash", profile.content_hash),
        ("kctl.managed", "true"),
    )
    assert (spec.profile_name, spec.profile_hash) == (name, profile.content_hash)
    assert spec.runtime == profile.runtime


@pytest.mark.parametrize("name", sorted(ARGS))
def test_simulated_launch_argv(name: str) -> None:
    profile = load_profile(REPO / "profiles" / f"{name}.yaml")
    spec = launch_spec(profile, "dep-2", simulate=True, python="/venv/bin/python")
    assert spec.argv == ("/venv/bin/python", "-m", "kctl.sim", *ARGS[name])
    assert spec.env == tuple(sorted(ENV[name] + SIM_ENV))
    assert spec.image is None


def test_simulate_defaults_to_this_interpreter() -> None:
    profile = load_profile(REPO / "tests" / "profiles" / "sim-baseline.yaml")
    assert launch_spec(profile, "d", simulate=True).argv[:3] == (sys.executable, "-m", "kctl.sim")


def test_sim_test_profiles_launch() -> None:
    profile = load_profile(REPO / "tests" / "profiles" / "sim-kdtree.yaml")
    spec = launch_spec(profile, "t-1", simulate=True, python="py")
    assert spec.argv == (
        "py", "-m", "kctl.sim",
        "--model-path", "/models/sim-model",
        "--host", "127.0.0.1",
        "--port", "39301",
        "--tp-size", "1",
        "--attention-backend", "triton",
        "--trust-remote-code",
        "--kv-cache-dtype", "auto",
        "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", "/models/sim-draft",
        "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4",
    )  # fmt: skip
    assert spec.env == (
        ("KCTL_SIM_LOAD_S", "20"),
        ("KCTL_SIM_SGLANG_VERSION", "0.5.10"),
        ("KCTL_SIM_SPEEDUP", "20"),
        ("KDTREE_VERIFY", "1"),
    )
    assert profile.baseline is not None
    assert Path(profile.baseline) == REPO / "tests" / "profiles" / "sim-baseline.yaml"


def test_the_kernel_profiles_differ_from_the_baseline_only_where_intended() -> None:
    base = load_profile(REPO / "profiles" / "triton-graphs.yaml")
    eager = load_profile(REPO / "profiles" / "kdtree-eager.yaml")
    graphs = load_profile(REPO / "profiles" / "kdtree-graphs.yaml")
    for cand in (eager, graphs):
        assert cand.baseline == str(REPO / "profiles" / "triton-graphs.yaml")
        assert cand.server.verify_kernel == "kdtree"
        assert cand.image.kernel_source == "kernels"
        assert cand.image.cuda_archs == ("12.0",)
        assert cand.gate == base.gate
        assert cand.runtime == base.runtime
    assert base.baseline is None and base.image.kernel_source is None
    assert (eager.server.cuda_graphs, graphs.server.cuda_graphs) == (False, True)
    expected = dataclasses.replace(
        base.server, verify_kernel="kdtree", env=(("HF_HUB_OFFLINE", "1"), ("KDTREE_VERIFY", "1"))
    )
    assert graphs.server == expected
    assert eager.server == dataclasses.replace(expected, cuda_graphs=False)
