"""``kctl stop --fleet`` in-process, over a fake orchestrator: what it refuses before it
removes anything. The whole command on the simulated orchestrator is in
``test_fleet_simulate.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kctl.cli.text import fleet_stop_text
from kctl.controller.context import Context
from kctl.errors import PreconditionFailed, UsageError
from kctl.fleet import stop
from kctl.fleet.view import Node, Replica, ServiceView


class FakeOrchestrator:
    name = "fake"
    orchestrator = "the fake orchestrator"

    def __init__(self, services: dict[str, ServiceView]) -> None:
        self.services = dict(services)
        self.removed: list[str] = []

    def check_available(self) -> None:
        pass

    def nodes(self) -> list[Node]:
        return [Node(hostname="n1", state="ready", availability="active", addr="10.0.0.1")]

    def service(self, role: str) -> ServiceView | None:
        return self.services.get(role)

    def remove(self, role: str) -> bool:
        self.removed.append(role)
        return self.services.pop(role, None) is not None


def _view(name: str, deployment: str) -> ServiceView:
    replica = Replica(
        slot=1, task="t1", node="n1", node_state="ready", state="running", desired="running",
        deployment=deployment, profile="p", profile_hash="h", image="img", args=(),
        host="10.0.0.1", port=30000,
    )  # fmt: skip
    return ServiceView(
        name=name, id="s1", version=1, deployment=deployment, profile="p", profile_hash="h",
        image="img", desired_replicas=1, replicas=(replica,),
    )  # fmt: skip


@pytest.fixture
def fleet_file(tmp_path: Path) -> str:
    path = tmp_path / "fleet.yaml"
    path.write_text("kind: fleet\nname: ft\nreplicas: 2\n")
    return str(path)


def _run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fleet_file: str, fake: Any, yes: bool
) -> stop.FleetStopResult:
    monkeypatch.setattr(stop, "driver_for", lambda _ctx, _fleet: fake)
    return stop.stop_fleet(Context(state_dir=tmp_path / "state"), fleet_file, yes=yes)


def test_without_yes_nothing_is_asked_or_removed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fleet_file: str
) -> None:
    fake = FakeOrchestrator({"main": _view("ft", "d-1")})
    with pytest.raises(UsageError, match="pass --yes") as info:
        _run(monkeypatch, tmp_path, fleet_file, fake, yes=False)
    assert info.value.exit_code == 2
    assert fake.removed == [] and not (tmp_path / "state").exists()


def test_a_service_this_state_dir_never_recorded_is_not_removed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fleet_file: str
) -> None:
    fake = FakeOrchestrator({"main": _view("ft", "d-20261205-000000-abcd")})
    with pytest.raises(PreconditionFailed, match="never recorded: nothing was stopped") as info:
        _run(monkeypatch, tmp_path, fleet_file, fake, yes=True)
    assert info.value.exit_code == 5 and "docker service rm ft" in (info.value.hint or "")
    assert fake.removed == [] and "main" in fake.services


def test_nothing_running_is_nothing_to_stop(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fleet_file: str
) -> None:
    fake = FakeOrchestrator({})
    result = _run(monkeypatch, tmp_path, fleet_file, fake, yes=True)
    assert result.removed == [] and result.stopped == [] and result.known_good is None
    assert fake.removed == ["canary", "main"]  # asked, found nothing
    assert fleet_stop_text(result, fleet_file) == "fleet ft: nothing ran; nothing to stop"
