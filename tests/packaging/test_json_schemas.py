"""docs/json-output.md's schemas are generated from kctl's result models by
``scripts/gen_json_docs.py`` (what ``kctl schema COMMAND`` prints): a model changed without
the page regenerated fails here. Real ``--json`` outputs of commands run in-process validate
against those schemas."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest

from kctl.cli import main
from kctl.cli.results import result_names, result_schema

REPO = Path(__file__).resolve().parents[2]
PROFILE = str(REPO / "profiles" / "triton-graphs.yaml")


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_json_docs", REPO / "scripts" / "gen_json_docs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_is_the_generated_schemas() -> None:
    script = _script()
    text = script.DOC.read_text()
    assert script.render(text) == text, (
        "docs/json-output.md's schemas differ from the result models: run "
        "`python scripts/gen_json_docs.py`"
    )


def test_the_drift_check_sees_a_hand_edit() -> None:
    script = _script()
    text = script.DOC.read_text().replace('"type": "integer"', '"type": "number"', 1)
    assert script.render(text) != text


def test_every_command_has_a_valid_schema() -> None:
    from kctl.cli import app

    names = set(result_names())
    commands = {c.name or c.callback.__name__ for c in app.registered_commands if c.callback}
    assert commands | {"lock show", "lock release", "envelope"} <= names, commands - names
    for name in names:
        jsonschema.Draft202012Validator.check_schema(result_schema(name))


def test_schema_prints_a_result_schema_and_refuses_an_unknown_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["schema", "deploy", "--fleet"]) == 0
    assert json.loads(capsys.readouterr().out) == result_schema("deploy --fleet")
    assert main(["schema"]) == 0
    assert "properties" in json.loads(capsys.readouterr().out)  # the profile's, as before
    assert main(["schema", "deploi"]) == 2
    err = capsys.readouterr().err
    assert "no such result" in err and "deploy" in err, err


def _json(capsys: pytest.CaptureFixture[str], *args: str, code: int = 0) -> dict[str, Any]:
    """Run ``kctl --json ARGS`` in-process; the envelope, validated with its result."""
    assert main(["--json", *args]) == code, capsys.readouterr()
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, result_schema("envelope"))
    name = doc["command"] + (" --fleet" if "--fleet" in args and args[0] != "render" else "")
    if doc["error"] is None or doc["result"] is not None:
        jsonschema.validate(doc["result"], result_schema(name))
    return doc


def test_real_outputs_validate(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    state = ("--state-dir", str(tmp_path / "state"), "--simulate")
    fleet = str(REPO / "fleets" / "example.yaml")
    status = _json(capsys, *state, "status")["result"]
    assert status["needs_attention"] is False and status["problems"], status
    assert _json(capsys, *state, "history")["result"] == []
    rows = _json(capsys, "validate", PROFILE, str(tmp_path / "missing.yaml"), code=2)["result"]
    assert [r["ok"] for r in rows] == [True, False], rows
    plan = _json(capsys, *state, "plan", PROFILE)["result"]
    assert plan["simulate"] is True and plan["steps"], plan
    assert _json(capsys, *state, "plan", PROFILE, "--fleet", fleet)["result"]["replicas"] > 1
    assert _json(capsys, *state, "lock", "show")["result"] is None
    assert _json(capsys, *state, "lock", "release")["result"] == {"released": False, "lock": None}
    k8s = str(REPO / "fleets" / "k8s-example.yaml")
    assert _json(capsys, "render", "--k8s", PROFILE, "--fleet", k8s)["result"]["objects"]
    doc = _json(capsys, *state, "deploy", str(tmp_path / "missing.yaml"), code=2)
    assert doc["result"] is None and doc["error"]["type"], doc


def test_a_fleet_stop_result_validates() -> None:
    from kctl.fleet.stop import FleetStopResult, StoppedReplica
    from kctl.render import dump

    result = FleetStopResult(
        fleet="ft",
        driver="simulated",
        removed=["ft"],
        stopped=[
            StoppedReplica(role="main", slot=1, node="n", port=1, profile="p", deployment="d")
        ],
        known_good="d",
        warnings=[],
    )
    jsonschema.validate(dump(result), result_schema("stop --fleet"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**dump(result), "extra": 1}, result_schema("stop --fleet"))


def test_a_fleet_status_over_a_fake_orchestrator_validates(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The main service and a left-over canary, on a state dir that never recorded them:
    each replica, node and service typed, and the result as the schema says."""
    from kctl.controller.context import Context
    from kctl.fleet import status
    from kctl.render import dump
    from tests.fleet.test_fleet_stop import FakeOrchestrator, _view

    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text("kind: fleet\nname: ft\nreplicas: 1\n")
    fake = FakeOrchestrator({"main": _view("ft", "d-1"), "canary": _view("ft-canary", "d-2")})
    monkeypatch.setattr(status, "driver_for", lambda _ctx, _fleet: fake)
    result = status.status_fleet(Context(state_dir=tmp_path / "state"), str(fleet_file))
    assert result.needs_attention and result.canary is not None, result
    assert result.replicas[0].healthy and result.replicas[0].last_gate == ""
    data = dump(result)
    jsonschema.validate(data, result_schema("status --fleet"))
    assert "replicas" not in data["service"] and data["canary"]["replicas"][0]["slot"] == 1
    from kctl.cli.text import fleet_status_text

    text = fleet_status_text(result)
    assert "a canary service (ft-canary) is left over" in text, text


def test_a_deploy_result_keeps_the_drift_checks_keys_in_their_order() -> None:
    """--json prints the drift check as its dataclass did: the same keys, in the same order."""
    from kctl.controller.deploy import BaselineCheckResult
    from kctl.gate.drift import DriftCheck, DriftRow

    row = DriftRow(context=5700, stored=100.0, now=None, ratio=None, lo=None, hi=None,
                   completed=0, sent=2)  # fmt: skip
    check = DriftCheck(rows=(row,), steady=False, reason="requests failed", elapsed_s=1.5)
    dumped = BaselineCheckResult.model_validate(check.to_dict()).model_dump(mode="json")
    assert json.dumps(dumped) == json.dumps(check.to_dict())
