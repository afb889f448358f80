"""What the CLI shows: flags drawn as flags, what `deploy --help` says, and health-poll
misses kept off piped output."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kctl.cli import CliReporter, app


@pytest.mark.parametrize("args", [["--help"], ["deploy", "--help"], ["lock", "release", "--help"]])
def test_boolean_options_are_plain_flags(args: list[str]) -> None:
    out = CliRunner().invoke(app, args, env={"COLUMNS": "120"}).output
    assert "<bool>" not in out, out


def test_deploy_help_says_what_it_does_exit_codes_and_state() -> None:
    out = " ".join(
        CliRunner().invoke(app, ["deploy", "--help"], env={"COLUMNS": "200"}).output.split()
    )
    assert "stops what serves" in out and "known-good baseline started again" in out
    assert "3 candidate rejected" in out and "4 DEGRADED" in out and "5 a precondition" in out
    assert "--state-dir" in out and "kctl.db" in out


def test_lock_release_help_says_force_never_forces_out_a_running_kctl() -> None:
    out = " ".join(
        CliRunner()
        .invoke(app, ["lock", "release", "--help"], env={"COLUMNS": "200"})
        .output.split()
    )
    assert "never forced out" in out


def test_json_is_a_flag_that_takes_no_value(tmp_path: object) -> None:
    r = CliRunner().invoke(app, ["--json", "true", "status"])
    assert r.exit_code != 0


@pytest.mark.parametrize(("tty", "verbose", "shown"), [(False, False, False), (False, True, True)])
def test_health_poll_misses_only_when_asked(
    capsys: pytest.CaptureFixture[str], tty: bool, verbose: bool, shown: bool
) -> None:
    rep = CliReporter(quiet=False, verbose=verbose)
    rep.tty = tty
    rep.progress("health d-1: port (3/600 simulated s, try 4)", "Connection refused")
    err = capsys.readouterr().err
    assert "health d-1: port" in err
    assert ("Connection refused" in err) is shown, err
