"""Faults on the Docker runtime (marker ``docker``): kctl killed during the gate, the
known-good baseline's container removed, its image deleted.

The servers are containers of the simulator serving image built FROM the test base image
(``scripts/build-base-image.sh``). Without an engine or that image these cases skip with
the reason, except under CI (``CI`` set), where they fail: CI must prove the docker path.
The profiles are named ``faults-*`` so that their images and containers are this suite's
own; every container carries the case's state dir as ``kctl.owner``.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.harness import BASE_NAME, CAND_NAME, Case, cand_profile
from tests.faults.test_kill import act_at

pytestmark = [pytest.mark.docker, pytest.mark.slow]

BASE_IMAGE = os.environ.get("KCTL_TEST_BASE_IMAGE", "kctl-test-base:bookworm")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"docker tests must run under CI: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def engine() -> Iterator[Any]:
    try:
        import docker.errors
    except ImportError as exc:  # pragma: no cover - docker is a dependency
        _unavailable(f"the docker SDK is missing: {exc}")
        raise
    # kctl's own connect: it probes a unix socket before the SDK tries (the SDK leaks the
    # socket of a failed connect, which filterwarnings=error turns into the next test's
    # error) and closes a client whose ping failed
    from kctl.errors import KctlError
    from kctl.runtime.docker import connect

    try:
        client = connect(timeout_s=120)
    except KctlError as exc:
        _unavailable(f"no docker engine: {exc.message} (run scripts/ci-docker.sh as root)")
        raise
    try:
        try:
            client.images.get(BASE_IMAGE)
        except docker.errors.ImageNotFound:
            _unavailable(f"base image {BASE_IMAGE} missing (run scripts/build-base-image.sh)")
        yield client
    finally:
        client.close()


def _docker(p: dict[str, Any]) -> dict[str, Any]:
    # the test base's tag names no SGLang release: the simulator imitates 0.5.10
    p["image"] = {
        "base": BASE_IMAGE,
        "kernel_source": None,
        "install_simulator": True,
        "sglang": "0.5.10",
    }
    p["runtime"] = {
        "kind": "docker",
        "gpus": [],
        "shm_size": "64m",
        "volumes": [],
        "stop_timeout_s": 5,
        "retain": 3,
    }
    p["health"]["deadline_s"] = 30
    p["simulator"] = {"speedup": 50, "load_s": 50}
    p.pop("baseline", None)
    return p


class DockerCase(Case):
    """A case on the docker runtime: no --simulate, the store at the state dir's top."""

    def __init__(self, tmp: Path, item: Any, engine: Any) -> None:
        super().__init__(tmp, item, slow_gate=True)
        self.engine = engine
        self.owner = str(self.state.resolve())
        base = _docker(cand_profile(self.port, slow_gate=True))
        base["server"].update({"served_model_name": BASE_NAME, "verify_kernel": "none", "env": {}})
        base["description"] = "fault suite docker baseline"
        self.base = self.write("faults-base.yaml", base)
        cand = _docker(cand_profile(self.port, slow_gate=True))
        cand["baseline"] = "faults-base.yaml"
        self.cand = self.write("faults-cand.yaml", cand)

    @property
    def db(self) -> Path:
        return self.state / "kctl.db"

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "kctl", "--state-dir", str(self.state), *args]

    def containers(self, profile: str | None = None) -> list[Any]:
        found = self.engine.containers.list(all=True, filters={"label": f"kctl.owner={self.owner}"})
        return [c for c in found if profile is None or c.labels.get("kctl.profile") == profile]

    def servers(self) -> list[int]:
        return [0 for c in self.containers() if c.status == "running"]

    def cleanup(self) -> None:
        super().cleanup()
        for c in self.containers():
            c.remove(force=True)


@pytest.fixture
def dcase(engine: Any, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[DockerCase]:
    c = DockerCase(tmp_path, request.node, engine)
    try:
        yield c
    finally:
        c.cleanup()


def test_docker_kill_during_gate(dcase: DockerCase) -> None:
    case = dcase
    case.establish()
    before = case.history()
    run = act_at(case, ("deploy", case.cand), r" is healthy", 1, ("gate", 1))
    assert run.code == -signal.SIGKILL, str(run)
    code, st = case.status()
    assert code == 4 and len(st["interrupted"]) == 1, st
    r = case.run("rollback")
    assert r.code == 0, str(r)
    case.assert_serves(BASE_NAME)
    case.check_store(before)
    assert len(case.servers()) == 1


def test_docker_baseline_container_removed(dcase: DockerCase) -> None:
    """The known-good baseline's stopped container is removed while the candidate serves:
    rollback creates it again from its image."""
    case = dcase
    case.establish()
    case.promote()
    before = case.history()
    (old,) = case.containers("faults-base")
    old.remove(force=True)
    r = case.run("rollback")
    assert r.code == 0, str(r)
    case.assert_serves(BASE_NAME)
    case.check_store(before)
    assert [c.status for c in case.containers("faults-base")] == ["running"]


def test_docker_baseline_image_deleted(dcase: DockerCase) -> None:
    """The baseline's container and image are both gone: rollback builds the image again
    (content-addressed, same tag) and restores the baseline."""
    case = dcase
    case.establish()
    case.promote()
    before = case.history()
    (old,) = case.containers("faults-base")
    image = old.image
    old.remove(force=True)
    for tag in image.tags:
        case.engine.images.remove(tag, force=True)
    r = case.run("rollback", timeout=600)
    assert r.code == 0, str(r)
    case.assert_serves(BASE_NAME)
    case.check_store(before)
    assert CAND_NAME not in str(case.serving())


def test_docker_revert_after_baseline_container_removed(dcase: DockerCase) -> None:
    """The baseline's stopped container is removed while a regressing candidate is gated:
    the revert creates it again and verifies it (exit 3)."""
    case = dcase
    case.establish()
    before = case.history()
    slow = cand_profile(case.port, slow_gate=True)
    slow = _docker(slow)
    slow["baseline"] = "faults-base.yaml"
    slow["server"]["env"]["KCTL_SIM_SLOWDOWN"] = "4"
    path = case.write("faults-slow.yaml", slow)
    old = {row[0] for row in case.journal()}
    proc = case.spawn("deploy", path)
    case.wait_journal("gate", 1, old)
    (base,) = case.containers("faults-base")
    base.remove(force=True)
    r = proc.finish()
    assert r.code == 3, str(r)
    assert "restored and verified" in r.err, str(r)
    case.assert_serves(BASE_NAME)
    case.check_store(before)
