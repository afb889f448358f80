"""The differences a gate judges together with the change under test (kctl/profile/compare.py),
and that deploy and plan say so: a candidate with another KV cache than its baseline."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kctl.profile import load_profile
from kctl.profile.compare import gate_mismatches, kv_cache
from kctl.profile.model import Profile

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "profiles").glob("*.yaml"))
#: the shipped profiles that name a baseline: the candidates a deploy gates
CANDIDATES = [p for p in SHIPPED if load_profile(p).baseline is not None]


def with_cache(profile: Profile, dtype: str) -> Profile:
    server = dataclasses.replace(profile.server, kv_cache_dtype=dtype)  # type: ignore[arg-type]
    return dataclasses.replace(profile, server=server)


@pytest.mark.parametrize(
    "mine, theirs, warned",
    [
        ("fp8_e4m3", "bf16", True),
        ("bf16", "fp8_e5m2", True),
        ("fp8_e4m3", "fp8_e5m2", True),
        ("fp8_e4m3", "fp8_e4m3", False),
        ("auto", "bf16", False),  # the model's own cache, spelled two ways
        ("bfloat16", "auto", False),
    ],
)
def test_a_kv_cache_change_is_named_with_both_types(mine: str, theirs: str, warned: bool) -> None:
    base = load_profile(REPO / "profiles" / "kdtree-graphs.yaml")
    found = gate_mismatches(with_cache(base, mine), with_cache(base, theirs), "its baseline")
    assert bool(found) is warned
    if warned:
        (line,) = found
        assert line.startswith("server.kv_cache_dtype: ")
        assert f"keeps its KV cache in {kv_cache(with_cache(base, mine))} and" in line
        assert f"its baseline kdtree-graphs in {kv_cache(with_cache(base, theirs))}," in line
        assert "gate against a profile with the same kv_cache_dtype" in line


def test_the_shipped_candidates_include_the_fp8_one() -> None:
    assert "kdtree-graphs-fp8.yaml" in {p.name for p in CANDIDATES}


@pytest.mark.parametrize("path", CANDIDATES, ids=lambda p: p.name)
def test_no_shipped_candidate_is_gated_across_kv_caches(path: Path) -> None:
    profile = load_profile(path)
    assert profile.baseline is not None
    baseline = load_profile((path.parent / profile.baseline).resolve())
    assert gate_mismatches(profile, baseline, "its baseline") == []


def test_plan_warns_of_a_kv_cache_change_against_the_baseline(tmp_path: Path) -> None:
    cand = tmp_path / "fp8-vs-bf16.yaml"
    cand.write_text(
        f"extends: {REPO / 'profiles' / 'kdtree-graphs-fp8.yaml'}\n"
        f"baseline: {REPO / 'profiles' / 'triton-graphs.yaml'}\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "kctl", "--state-dir", str(tmp_path / "st"), "--simulate",
         "--json", "plan", str(cand)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    warnings = json.loads(r.stdout)["result"]["warnings"]
    assert any(
        w.startswith(
            "server.kv_cache_dtype: the candidate fp8-vs-bf16 keeps its KV cache in fp8_e4m3"
        )
        and "its baseline triton-graphs in bf16," in w
        for w in warnings
    ), warnings
