"""extends/merge rules, baseline resolution, the content hash and the JSON form."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kctl.profile import content_hash, load_profile, profile_to_dict
from kctl.profile.loader import deep_merge

Write = Callable[[str, str], str]
REPO = Path(__file__).resolve().parents[2]


def test_deep_merge_merges_mappings_and_replaces_the_rest() -> None:
    base = {"a": {"x": 1, "y": [1, 2]}, "b": 1}
    over = {"a": {"y": [3], "z": None}, "c": 2}
    assert deep_merge(base, over) == {"a": {"x": 1, "y": [3], "z": None}, "b": 1, "c": 2}
    assert base == {"a": {"x": 1, "y": [1, 2]}, "b": 1}  # inputs untouched


def test_env_merges_by_variable_and_null_removes(write: Write) -> None:
    write("base.yaml", "extends: ok.yaml\nserver:\n  env: {A: '1', B: '2', C: '3'}\n")
    path = write("x.yaml", "extends: base.yaml\nserver:\n  env: {B: '20', A: null, D: '4'}\n")
    assert load_profile(path).server.env == (("B", "20"), ("C", "3"), ("D", "4"))


def test_lists_replace_and_a_three_level_chain(write: Write) -> None:
    write("a.yaml", "extends: ok.yaml\ngate: {contexts: [1, 2, 3], repeats: 5}\n")
    write("b.yaml", "extends: a.yaml\ngate: {contexts: [4]}\n")
    profile = load_profile(write("c.yaml", "extends: b.yaml\ngate: {warmup: 0}\n"))
    assert (profile.gate.contexts, profile.gate.repeats, profile.gate.warmup) == ((4,), 5, 0)


def test_null_switches_an_inherited_section_off(write: Write) -> None:
    write("a.yaml", "extends: ok.yaml\nserver:\n  speculative: {draft_model_path: /d}\n")
    assert load_profile("a.yaml").server.speculative is not None
    path = write("b.yaml", "extends: a.yaml\nserver:\n  speculative: null\n")
    assert load_profile(path).server.speculative is None


def test_name_defaults_to_the_stem_and_is_not_inherited(write: Write) -> None:
    write("named.yaml", "extends: ok.yaml\nname: my-base\n")
    assert load_profile("named.yaml").name == "my-base"
    assert load_profile(write("child.yaml", "extends: named.yaml\n")).name == "child"
    assert load_profile(write("sub/own.yaml", "extends: ../named.yaml\nname: n1\n")).name == "n1"


def test_x_keys_hold_anchors_and_are_ignored(write: Write) -> None:
    path = write(
        "x.yaml",
        """\
        extends: ok.yaml
        x-volume: &vol {host: /models, container: /models}
        runtime:
          volumes: [*vol]
        """,
    )
    (vol,) = load_profile(path).runtime.volumes
    assert (vol.host, vol.container, vol.read_only) == ("/models", "/models", True)


def test_baseline_is_relative_to_the_file_that_declares_it(write: Write) -> None:
    write("profiles/known.yaml", "extends: ../ok.yaml\n")
    write("profiles/bases/kernel.yaml", "extends: ../../ok.yaml\nbaseline: ../known.yaml\n")
    profile = load_profile(write("cand.yaml", "extends: profiles/bases/kernel.yaml\n"))
    assert profile.baseline == os.path.join("profiles", "known.yaml")
    assert load_profile(profile.baseline).name == "known"  # usable from where kctl runs


def test_source_is_the_path_as_given(write: Write) -> None:
    write("sub/p.yaml", "extends: ../ok.yaml\n")
    assert load_profile("sub/p.yaml").source == "sub/p.yaml"
    assert load_profile(Path("sub/p.yaml")).source == "sub/p.yaml"


FLAT = """\
server:
  model_path: /models/m
  port: 39999
  env: {A: '1', B: '2'}
runtime:
  kind: local
gate:
  contexts: [5700, 23000]
  policy: {min_ratio_per_context: {5700: 0.9, 23000: 1.1}}
"""
REORDERED = """\
gate:
  policy: {min_ratio_per_context: {23000: 1.1, 5700: 0.9}}
  contexts: [5700, 23000]
runtime: {kind: local}
server: {env: {B: '2', A: '1'}, port: 39999, model_path: /models/m}
"""


def test_hash_ignores_key_order_layout_name_and_description(write: Write) -> None:
    flat = load_profile(write("flat.yaml", FLAT))
    assert load_profile(write("re.yaml", REORDERED)).content_hash == flat.content_hash
    write("layer.yaml", "extends: ok.yaml\nserver: {env: {A: '1', B: '2'}}\n")
    layered = write(
        "sub/top.yaml",
        "extends: ../layer.yaml\nname: other\ndescription: words\ngate:\n"
        "  contexts: [5700, 23000]\n  policy: {min_ratio_per_context: {5700: 0.9, 23000: 1.1}}\n",
    )
    assert load_profile(layered).content_hash == flat.content_hash
    # a default spelt out is the same as the default left out, and 30 is 30.0
    write("tp.yaml", FLAT.replace("port: 39999", "port: 39999\n  tp: 1"))
    assert load_profile("tp.yaml").content_hash == flat.content_hash
    a = load_profile(write("i.yaml", FLAT + "health: {deadline_s: 30}\n")).content_hash
    assert load_profile(write("f.yaml", FLAT + "health: {deadline_s: 30.0}\n")).content_hash == a


def test_hash_changes_with_any_value_and_with_the_baseline(write: Write) -> None:
    flat = load_profile(write("flat.yaml", FLAT)).content_hash
    assert load_profile(write("b.yaml", FLAT.replace("'2'", "'3'"))).content_hash != flat
    assert (
        load_profile(write("c.yaml", FLAT.replace("5700, 23000]", "23000, 5700]"))).content_hash
        != flat
    )
    write("base1.yaml", "extends: ok.yaml\n")
    write("base2.yaml", "extends: ok.yaml\ngate: {repeats: 9}\n")
    with1 = load_profile(write("d.yaml", FLAT + "baseline: base1.yaml\n")).content_hash
    with2 = load_profile(write("e.yaml", FLAT + "baseline: base2.yaml\n")).content_hash
    assert len({flat, with1, with2}) == 3
    # the baseline enters by content: a copy elsewhere gives the same hash
    write("elsewhere/base1.yaml", "extends: ../ok.yaml\n")
    moved = load_profile(write("f.yaml", FLAT + "baseline: elsewhere/base1.yaml\n"))
    assert moved.content_hash == with1


def test_hash_is_stable_across_processes_and_working_directories(tmp_path: Path) -> None:
    code = (
        "import sys; from kctl.profile import load_profile; "
        "print(load_profile(sys.argv[1]).content_hash)"
    )
    target = REPO / "profiles" / "kdtree-eager.yaml"
    hashes = set()
    for seed, cwd, arg in (("1", REPO, "profiles/kdtree-eager.yaml"), ("2", tmp_path, str(target))):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)}
        out = subprocess.run(
            [sys.executable, "-c", code, arg],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        hashes.add(out.stdout.strip())
    assert hashes == {load_profile(target).content_hash}


def test_content_hash_function_matches_the_loaded_hash() -> None:
    profile = load_profile(REPO / "profiles" / "triton-graphs.yaml")
    assert content_hash(profile) == profile.content_hash  # a baseline has no baseline hash


def test_profile_to_dict_is_json_ready(write: Write) -> None:
    profile = load_profile(write("flat.yaml", FLAT))
    data = profile_to_dict(profile)
    assert json.loads(json.dumps(data)) == data
    assert data["name"] == "flat" and data["source"] == "flat.yaml"
    assert data["server"]["env"] == {"A": "1", "B": "2"}
    assert data["gate"]["contexts"] == [5700, 23000]
    assert data["gate"]["policy"]["min_ratio_per_context"] == {"5700": 0.9, "23000": 1.1}
    assert data["server"]["speculative"] is None
    assert data["runtime"]["volumes"] == []
    assert data["content_hash"] == profile.content_hash


@pytest.mark.parametrize("speedup", [1, 2.5, 1000])
def test_simulator_numbers_reach_the_env_as_written(write: Write, speedup: float) -> None:
    from kctl.launch import launch_spec

    path = write("s.yaml", f"extends: ok.yaml\nsimulator: {{speedup: {speedup}, load_s: 0}}\n")
    env = dict(launch_spec(load_profile(path), "d", simulate=True).env)
    assert env == {
        "KCTL_SIM_SPEEDUP": str(speedup),
        "KCTL_SIM_LOAD_S": "0",
        "KCTL_SIM_SGLANG_VERSION": "0.5.10",
    }


def test_a_field_added_later_changes_no_hash_until_set() -> None:
    # gate.policy.stop_at_first_fail came after HASH_VERSION 1: the shipped profiles keep
    # the hashes they were recorded with (the hashes of the shipped profiles as they bind
    # 127.0.0.1, computed without the field)
    shipped = {"triton-graphs": "e376d0d18725", "kdtree-eager": "097414472a09",
               "kdtree-graphs": "7df44523f028"}  # fmt: skip
    for name, digest in shipped.items():
        profile = load_profile(REPO / "profiles" / f"{name}.yaml")
        assert profile.gate.policy.stop_at_first_fail is False
        assert profile.content_hash.startswith(digest), name
        on = dataclasses.replace(
            profile,
            gate=dataclasses.replace(
                profile.gate,
                policy=dataclasses.replace(profile.gate.policy, stop_at_first_fail=True),
            ),
        )
        assert content_hash(on, baseline_hash="b") != content_hash(profile, baseline_hash="b")
