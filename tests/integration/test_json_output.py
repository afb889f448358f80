"""Every command's ``--json`` output validates against the schemas of docs/json-output.md
(the envelope, then the command's result), run for real against the simulator."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.integration.conftest import REPO, Kctl, candidate_profile

DOC = REPO / "docs" / "json-output.md"


def _schemas() -> dict[str, Any]:
    """Section name -> its JSON Schema, with ``{"$ref": "#record"}`` resolved."""
    import json

    text = DOC.read_text()
    found = {
        m.group(1).strip("` "): json.loads(m.group(2))
        for m in re.finditer(r"^## (.+?)\n.*?```json\n(.*?)```", text, re.S | re.M)
    }

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            if node.get("$ref") == "#record":
                return resolve(found["record"])
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    return {name: resolve(schema) for name, schema in found.items()}


SCHEMAS = _schemas()


def check(
    kctl: Kctl, command: str, *args: str, code: int = 0, schema: str | None = None
) -> dict[str, Any]:
    r = kctl.run("--json", *args)
    assert r.code == code, r.out + r.err
    doc = r.json()
    jsonschema.validate(doc, SCHEMAS["envelope"])
    assert doc["command"] == command and doc["exit_code"] == code
    if doc["result"] is not None or command in ("lock show",):
        jsonschema.validate(doc["result"], SCHEMAS[schema or command])
    return doc


def test_the_page_has_a_schema_for_every_command() -> None:
    from kctl.cli import app

    commands = {c.name or c.callback.__name__ for c in app.registered_commands if c.callback}
    commands |= {"lock show", "lock release"}
    assert commands <= set(SCHEMAS), commands - set(SCHEMAS)
    for schema in SCHEMAS.values():
        jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.slow
def test_every_command_validates(kctl: Kctl, tmp_path: Path) -> None:
    base = str(kctl.tmp / "base.yaml")
    check(kctl, "status", "status")
    check(kctl, "history", "history")
    check(kctl, "validate", "validate", base)
    check(kctl, "schema", "schema")
    check(kctl, "plan", "plan", base)
    check(kctl, "deploy", "deploy", base)
    # a rejected candidate: exit 3, the deploy's result and the error in one envelope
    wrong = kctl.write("wrong.yaml", candidate_profile(kctl.port, KCTL_SIM_FAULT="wrong_output"))
    doc = check(kctl, "deploy", "deploy", wrong, code=3)
    assert doc["error"]["type"] == "CandidateRejected" and doc["result"]["outcome"] == "rejected"
    st = check(kctl, "status", "status")["result"]
    assert st["last_gate_rows"] and st["last_gate_rows"][0]["context"] > 0, st
    assert st["report"] is not None and st["report"]["deployment"] == doc["result"]["deployment_id"]
    rep = check(kctl, "report", "report")["result"]
    assert rep["path"] == doc["result"]["report"] == st["report"]["path"], rep
    rows = check(kctl, "history", "history")["result"]
    assert [r["serving"] for r in rows].count(True) == 1, rows
    check(kctl, "bench", "bench")
    check(kctl, "logs", "logs", "-n", "5")
    check(kctl, "rollback", "rollback")
    check(kctl, "lock show", "lock", "show")
    check(kctl, "lock release", "lock", "release")
    check(kctl, "stop", "stop", "--yes")
    # an error envelope: no result, the error with its hint
    doc = check(kctl, "deploy", "deploy", str(tmp_path / "missing.yaml"), code=2)
    assert doc["error"]["message"]


@pytest.mark.slow
def test_every_fleet_command_validates(kctl: Kctl, tmp_path: Path) -> None:
    """deploy/status/history/rollback --fleet, on the simulated orchestrator."""
    from kctl.runtime.local import LocalRuntime
    from tests.fleet.ports import free_range
    from tests.fleet.test_fleet_simulate import PROFILES

    for src in PROFILES.glob("*.yaml"):
        (tmp_path / src.name).write_text(
            src.read_text().replace("deadline_s: 30", "deadline_s: 600")
        )
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        f"kind: fleet\nname: js\nreplicas: 2\nports: {{first: {free_range(3)}}}\n"
        "rollout: {canary: 1, monitor_s: 1, smoke_requests: 1}\n"
    )
    f = ("--fleet", str(fleet))
    try:
        doc = check(
            kctl, "plan", "plan", str(tmp_path / "candidate.yaml"), *f, schema="plan --fleet"
        )
        assert doc["result"]["steps"][0].startswith("create the fleet's service")
        doc = check(
            kctl, "deploy", "deploy", str(tmp_path / "baseline.yaml"), *f, schema="deploy --fleet"
        )
        assert doc["result"]["outcome"] == "established"
        doc = check(
            kctl, "deploy", "deploy", str(tmp_path / "baseline.yaml"), *f, schema="deploy --fleet"
        )
        assert doc["result"]["outcome"] == "already-serving"
        crash = str(tmp_path / "crash.yaml")
        doc = check(kctl, "deploy", "deploy", crash, *f, code=3, schema="deploy --fleet")
        assert doc["result"]["outcome"] == "rejected"
        # the verdict the record keeps is the one the result says (not null)
        history = check(kctl, "history", "history", *f, schema="history --fleet")
        assert doc["result"]["verdict"] == history["result"][0]["verdict"] is not None
        st = check(kctl, "status", "status", *f, schema="status --fleet")["result"]
        assert st["driver"] == "simulated" and len(st["replicas"]) == 2, st
        check(kctl, "history", "history", *f, schema="history --fleet")
        check(kctl, "rollback", "rollback", *f, schema="rollback --fleet")
        doc = check(kctl, "stop", "stop", *f, "--yes", schema="stop --fleet")
        assert len(doc["result"]["stopped"]) == 2 and doc["result"]["removed"] == ["js"], doc
    finally:
        rt = LocalRuntime(kctl.state / "simulate" / "fleets" / "js" / "orchestrator")
        for inst in rt.running():
            rt.stop(inst, 5)


def test_render_validates(kctl: Kctl) -> None:
    profile = str(REPO / "profiles" / "triton-graphs.yaml")
    fleet = str(REPO / "fleets" / "k8s-example.yaml")
    doc = check(kctl, "render", "render", "--k8s", profile, "--fleet", fleet)
    assert doc["result"]["objects"], doc["result"]
