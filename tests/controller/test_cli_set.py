"""``--set`` through the CLI, in-process: on every command that takes it, and what
``validate`` and ``plan`` print with it (a simulated plan over an empty state dir)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kctl.cli import app
from kctl.cli.app import OPTS

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("sim-baseline.yaml", "sim-kdtree.yaml"):
        shutil.copy(REPO / "tests" / "profiles" / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(OPTS, "simulate", False)
    return tmp_path


@pytest.mark.parametrize("command", ["deploy", "plan", "validate", "bench"])
def test_every_profile_command_takes_set(command: str) -> None:
    out = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output
    words = " ".join(out.replace("│", " ").split())
    assert "--set FIELD=VALUE" in words and "its baseline alike" in words, out


def test_validate_with_set_hashes_the_effective_profile(profiles: Path) -> None:
    plain = CliRunner().invoke(app, ["--json", "validate", "sim-kdtree.yaml"])
    moved = CliRunner().invoke(
        app, ["--json", "validate", "sim-kdtree.yaml", "--set", "server.port=31000"]
    )
    assert plain.exit_code == moved.exit_code == 0, moved.output
    a, b = (json.loads(r.stdout)["result"][0]["hash"] for r in (plain, moved))
    assert a != b


def test_validate_refuses_a_bad_set_with_the_field_and_exit_2(profiles: Path) -> None:
    r = CliRunner().invoke(app, ["validate", "sim-kdtree.yaml", "--set", "server.port=abc"])
    assert r.exit_code == 2
    assert "--set server.port=abc: server.port: must be a TCP port" in r.output, r.output


def test_plan_shows_the_overrides_on_profile_and_baseline(profiles: Path) -> None:
    state = profiles / "state"
    args = ["--state-dir", str(state), "--simulate", "--json", "plan", "sim-kdtree.yaml"]
    r = CliRunner().invoke(app, [*args, "--set", "server.port=31000"])
    assert r.exit_code == 0, r.output
    result = json.loads(r.stdout)["result"]
    assert result["profile"]["overrides"] == ["server.port=31000"]
    assert "31000" in result["launch"]["argv"]
    text = CliRunner().invoke(
        app, [*args[:3], "plan", "sim-kdtree.yaml", "--set", "server.port=31000"]
    )
    assert "overrides (profile and baseline): --set server.port=31000" in text.stdout, text.output
