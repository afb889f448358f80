"""End to end: the real `kctl` CLI (a subprocess) deploys real containers of the simulator
serving image on a real engine, gates them over real HTTP, promotes or reverts."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .conftest import REPO, copy_profiles, free_port, http_status, kctl_env, remove_owned

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@dataclass
class Run:
    code: int
    out: str
    err: str


class KctlDocker:
    """`python -m kctl --state-dir DIR ...` against the copied docker test profiles."""

    def __init__(self, tmp: Path, engine: DockerClient) -> None:
        self.tmp = tmp
        self.engine = engine
        self.state = tmp / "state"
        self.port = free_port()
        self.profiles = copy_profiles(tmp / "profiles", self.port)
        self.owner = str(self.state.resolve())

    def run(self, *args: str, timeout: float = 180) -> Run:
        proc = subprocess.run(
            [sys.executable, "-m", "kctl", "--state-dir", str(self.state), *args],
            capture_output=True, text=True, timeout=timeout, cwd=REPO, env=kctl_env(self.tmp),
        )  # fmt: skip
        return Run(proc.returncode, proc.stdout, proc.stderr)

    def deploy(self, name: str) -> Run:
        return self.run("deploy", str(self.profiles / f"{name}.yaml"))

    def status(self) -> dict[str, Any]:
        r = self.run("--json", "status")
        return dict(json.loads(r.out)["result"])

    def containers(self) -> dict[str, tuple[str, str]]:
        """Container id -> (kctl.profile label, status) for this state dir's containers."""
        found = self.engine.containers.list(all=True, filters={"label": f"kctl.owner={self.owner}"})
        return {c.id: (c.labels["kctl.profile"], c.status) for c in found}

    def running(self) -> list[tuple[str, str]]:
        return [(cid, prof) for cid, (prof, st) in self.containers().items() if st == "running"]


@pytest.fixture
def k(engine: DockerClient, tmp_path: Path) -> Iterator[KctlDocker]:
    kd = KctlDocker(tmp_path, engine)
    try:
        yield kd
    finally:
        remove_owned(engine, kd.owner)


def _explain(r: Run) -> str:
    return f"exit {r.code}\n--- stdout\n{r.out}\n--- stderr\n{r.err}"


def test_deploy_gate_promote_then_rollback_restarts_the_stopped_baseline(k: KctlDocker) -> None:
    first = k.deploy("baseline")
    assert first.code == 0, _explain(first)
    [(baseline_cid, prof)] = k.running()
    assert prof == "baseline"

    promoted = k.deploy("candidate")
    assert promoted.code == 0, _explain(promoted)
    assert "PROMOTED" in promoted.out, _explain(promoted)
    [(candidate_cid, prof)] = k.running()
    assert prof == "candidate"
    assert k.containers()[baseline_cid] == ("baseline", "exited")  # kept for rollback
    assert http_status(k.port) == 200
    assert k.status()["serving"]["profile"] == "candidate"

    back = k.run("rollback")
    assert back.code == 0, _explain(back)
    # the known-good container was restarted, not re-created
    assert k.running() == [(baseline_cid, "baseline")]
    assert set(k.containers()) == {baseline_cid, candidate_cid}
    assert k.containers()[candidate_cid] == ("candidate", "exited")
    assert k.status()["serving"]["profile"] == "baseline"
    assert http_status(k.port) == 200

    # unchanged profile and source: the redeploy does not rebuild the image
    again = k.deploy("candidate")
    assert again.code == 0, _explain(again)
    assert "is up to date; not rebuilt" in again.err
    assert k.running() == [(candidate_cid, "candidate")]  # reused as well


def test_throughput_regression_reverts_to_the_baseline(k: KctlDocker) -> None:
    assert k.deploy("baseline").code == 0
    [(baseline_cid, _)] = k.running()
    r = k.deploy("regression")
    assert r.code == 3, _explain(r)
    assert "REJECTED" in r.out and "gate FAIL" in r.err, _explain(r)  # the reason: stderr
    assert k.running() == [(baseline_cid, "baseline")]
    assert [st for prof, st in k.containers().values() if prof == "regression"] == ["exited"]
    assert http_status(k.port) == 200
    assert k.status()["serving"]["profile"] == "baseline"


def test_crash_in_container_is_detected_fast_and_reverted(k: KctlDocker) -> None:
    assert k.deploy("baseline").code == 0
    [(baseline_cid, _)] = k.running()
    start = time.monotonic()
    r = k.deploy("crash")
    took = time.monotonic() - start
    assert r.code == 3, _explain(r)
    # the failing container ends the wait at once, far inside the 30 s health deadline
    assert took < 20, f"crash took {took:.1f} s to detect\n{_explain(r)}"
    assert "simulated crash while loading weights" in r.out + r.err, _explain(r)
    assert k.running() == [(baseline_cid, "baseline")]
    assert [st for prof, st in k.containers().values() if prof == "crash"] == ["exited"]
    logs = k.run("logs")
    assert logs.code == 0, _explain(logs)
