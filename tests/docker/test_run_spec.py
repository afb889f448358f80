"""The docker run spec is data: built by a pure function and compared by equality."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kctl.errors import KctlError
from kctl.profile.model import RuntimeSpec, VolumeSpec
from kctl.runtime.base import LaunchSpec
from kctl.runtime.docker import container_name, device_requests, run_spec, spec_hash

LAUNCH = LaunchSpec(
    deployment_id="d-0007",
    profile_name="kdtree-eager",
    profile_hash="ab" * 32,
    argv=("python3", "-m", "sglang.launch_server", "--model-path", "/models/k2", "--port", "30000"),
    env=(("KDTREE_VERIFY", "1"),),
    host="127.0.0.1",
    port=30000,
    image="kctl/kdtree-eager:0123456789ab",
    labels=(("team", "serving"),),
)
RUNTIME = RuntimeSpec(
    gpus="all",
    shm_size="32g",
    volumes=(
        VolumeSpec(host="/models", container="/models", read_only=True),
        VolumeSpec(
            host="/root/.cache/huggingface", container="/root/.cache/huggingface", read_only=False
        ),
    ),
)


def test_run_spec_is_sglangs_documented_docker_run() -> None:
    spec = run_spec(LAUNCH, RUNTIME)
    expected_labels = {
        "team": "serving",
        "kctl.managed": "true",
        "kctl.deployment": "d-0007",
        "kctl.profile": "kdtree-eager",
        "kctl.profile-hash": "ab" * 32,
        "kctl.port": "30000",
        "kctl.spec-hash": spec_hash(spec),
    }
    assert spec == {
        "image": "kctl/kdtree-eager:0123456789ab",
        "command": [
            "python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "/models/k2",
            "--port",
            "30000",
        ],
        "name": "kctl-kdtree-eager-d-0007",
        "environment": {"KDTREE_VERIFY": "1"},
        "network_mode": "host",
        "ipc_mode": "host",
        "shm_size": "32g",
        "ulimits": [
            {"Name": "memlock", "Soft": -1, "Hard": -1},
            {"Name": "stack", "Soft": 67108864, "Hard": 67108864},
        ],
        "volumes": {
            "/models": {"bind": "/models", "mode": "ro"},
            "/root/.cache/huggingface": {"bind": "/root/.cache/huggingface", "mode": "rw"},
        },
        "restart_policy": {"Name": "no"},
        "init": True,
        "device_requests": [{"Driver": "nvidia", "Count": -1, "Capabilities": [["gpu"]]}],
        "labels": expected_labels,
    }


def test_device_requests() -> None:
    assert device_requests("all") == [{"Driver": "nvidia", "Count": -1, "Capabilities": [["gpu"]]}]
    assert device_requests((0, 3)) == [
        {"Driver": "nvidia", "DeviceIDs": ["0", "3"], "Capabilities": [["gpu"]]}
    ]
    assert device_requests(()) == []


def test_no_gpus_means_no_device_request_key() -> None:
    spec = run_spec(LAUNCH, RuntimeSpec(gpus=(), volumes=()))
    assert "device_requests" not in spec
    assert "ulimits" not in spec  # memlock matters for pinned GPU memory only
    assert spec["volumes"] == {}


def test_spec_hash_ignores_deployment_identity_but_not_the_server() -> None:

    a = run_spec(LAUNCH, RUNTIME)
    later = dataclasses.replace(
        LAUNCH, deployment_id="d-0042", labels=(("kctl.deployment", "d-0042"),)
    )
    b = run_spec(later, RUNTIME)
    assert a["name"] != b["name"]
    assert a["labels"]["kctl.spec-hash"] == b["labels"]["kctl.spec-hash"]
    changed_env = dataclasses.replace(LAUNCH, env=(("KDTREE_VERIFY", "0"),))
    assert (
        run_spec(changed_env, RUNTIME)["labels"]["kctl.spec-hash"] != a["labels"]["kctl.spec-hash"]
    )
    new_image = dataclasses.replace(LAUNCH, image="kctl/kdtree-eager:ffffffffffff")
    assert run_spec(new_image, RUNTIME)["labels"]["kctl.spec-hash"] != a["labels"]["kctl.spec-hash"]


def test_container_name_is_docker_safe() -> None:
    assert (
        container_name("kdtree eager/x", "2026-11-29T10:00:00")
        == "kctl-kdtree-eager-x-2026-11-29T10-00-00"
    )


def test_kctl_labels_cannot_be_overridden_by_launch_labels() -> None:
    sneaky = dataclasses.replace(LAUNCH, labels=(("kctl.managed", "false"),))
    assert run_spec(sneaky, RUNTIME)["labels"]["kctl.managed"] == "true"


def test_run_spec_needs_an_image() -> None:
    with pytest.raises(KctlError, match="no image to run"):
        run_spec(dataclasses.replace(LAUNCH, image=None), RUNTIME)


def test_plan_runs_the_tag_the_build_would_make_from_any_directory(tmp_path: Path) -> None:
    """``kctl plan`` hashes the build context once and its run spec names that tag, with
    the kernel source found beside the profile, not in the working directory."""
    import json
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kctl",
            "--state-dir",
            str(tmp_path / "state"),
            "--json",
            "plan",
            str(repo / "profiles" / "kdtree-eager.yaml"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    plan = json.loads(out.stdout)["result"]
    assert plan["run_spec"]["image"] == plan["image"]["tag"]
    assert plan["image"]["tag"].startswith("kctl/kdtree-eager:")
    assert any(line.endswith("kernels/csrc/verify_main.cuh") for line in plan["image"]["files"])
