"""The model against what the rest of kctl relies on: the content hash (stored baseline
fingerprints depend on it), the stored form and its migration, dataclass behaviour."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from kctl.controller.common import _rebuild
from kctl.errors import StoreError
from kctl.profile import load_profile
from kctl.profile.model import GateSpec, PolicySpec, Profile, ServerSpec
from kctl.profile.serialize import from_stored

REPO = Path(__file__).resolve().parents[2]

#: content hashes computed by the hand-written validator this model replaced (main before
#: the pydantic model): a profile must hash the same, byte for byte, or every stored
#: baseline measurement and deployment record would stop matching
PINNED = {
    # the shipped profiles bind 127.0.0.1 since loopback became their default: new content
    # (the test profiles below keep the validator's hashes)
    "profiles/_kdtree-kernel.yaml": "7df44523f0288f4161ad17f8221cf5ab4f16be2b427613e73e7a0ec617570eae",
    "profiles/_kimi-k26-base.yaml": "e376d0d1872583d8a7eb176fbb551c3cc0718dfa558fa210489e3030a2065a2b",
    "profiles/kdtree-eager.yaml": "097414472a09ec0190e8d219a6a471ab9076ac79a0cabc83e213acbe8bf4183f",
    "profiles/kdtree-graphs.yaml": "7df44523f0288f4161ad17f8221cf5ab4f16be2b427613e73e7a0ec617570eae",
    # reference.yaml sets server.secrets and server.api_key since they exist: new content
    "profiles/reference.yaml": "2c063b685b94c2f3ab2609a9fc6f857cd4e4fadfff0b0b8fc8219bd1365eb8ef",
    "profiles/triton-graphs.yaml": "e376d0d1872583d8a7eb176fbb551c3cc0718dfa558fa210489e3030a2065a2b",
    "tests/profiles/sim-baseline.yaml": "a3a6d8178d064a93406dda078bd033d562d2082ec24ab10632753248b417c0c0",
    "tests/profiles/sim-kdtree.yaml": "8b5196c0de7018e1f688dd88783a9fd61f0568cd168962d7d3246377ebb95cc5",
}  # fmt: skip


@pytest.mark.parametrize("path", sorted(PINNED))
def test_the_content_hash_is_the_one_recorded_before_the_model(path: str) -> None:
    assert load_profile(REPO / path).content_hash == PINNED[path]


def stored(profile: Profile) -> dict[str, Any]:
    """As the store keeps it: ``dataclasses.asdict`` through JSON."""
    data: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(profile)))
    return data


@pytest.mark.parametrize("path", sorted(PINNED))
def test_a_stored_profile_rebuilds_equal(path: str) -> None:
    profile = load_profile(REPO / path)
    assert from_stored(Profile, stored(profile)) == profile
    assert _rebuild(Profile, stored(profile)) == profile


def test_an_older_store_migrates() -> None:
    # written before image.install_simulator and gate.policy.stop_at_first_fail existed,
    # with a key a later kctl dropped: defaults fill in, the unknown key is ignored
    profile = load_profile(REPO / "profiles" / "kdtree-eager.yaml")
    data = stored(profile)
    del data["image"]["install_simulator"]
    del data["gate"]["policy"]["stop_at_first_fail"]
    data["health"]["retired_option"] = 5
    data["runtime"]["volumes"][0]["retired_too"] = True
    assert from_stored(Profile, data) == profile


def test_a_stored_profile_is_not_judged_again() -> None:
    # rules added for files later (shell syntax in argv) must not lock a recorded
    # deployment out of rollback
    profile = load_profile(REPO / "profiles" / "triton-graphs.yaml")
    data = stored(profile)
    data["server"]["extra_args"] = ["--chat-template", "a;b"]
    data["server"]["verify_kernel"] = "kdtree"  # a cross-field rule would refuse this
    rebuilt = from_stored(Profile, data)
    assert rebuilt.server.extra_args == ("--chat-template", "a;b")
    assert rebuilt.server.verify_kernel == "kdtree"


def test_a_stored_profile_of_the_wrong_shape_is_a_store_error() -> None:
    data = stored(load_profile(REPO / "profiles" / "triton-graphs.yaml"))
    data["server"]["port"] = "thirty thousand"
    with pytest.raises(StoreError, match=r"server\.port"):
        from_stored(Profile, data)


def test_specs_are_frozen_dataclasses_that_validate_on_replace() -> None:
    profile = load_profile(REPO / "profiles" / "triton-graphs.yaml")
    assert dataclasses.is_dataclass(profile)
    with pytest.raises(dataclasses.FrozenInstanceError):
        profile.name = "other"  # type: ignore[misc]
    assert dataclasses.replace(profile.gate, seed=7).seed == 7
    with pytest.raises(ValidationError):
        dataclasses.replace(profile.gate, seed=-1)
    with pytest.raises(ValidationError):
        GateSpec(contexts=(5700,), unknown_field=1)  # type: ignore[call-arg]


def test_hand_built_specs_coerce_like_the_file() -> None:
    # lists become tuples, mappings sorted pairs, integers floats where a float is meant
    server = ServerSpec(model_path="/m", env={"B": "2", "A": "1"}, extra_args=["--x"])  # type: ignore[arg-type]
    assert (server.env, server.extra_args) == ((("A", "1"), ("B", "2")), ("--x",))
    assert PolicySpec(min_ratio=1).min_ratio == 1.0
    assert isinstance(PolicySpec(min_ratio=1).min_ratio, float)
