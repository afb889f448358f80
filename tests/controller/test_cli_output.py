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


def test_piped_waits_are_plain_lines_throttled_with_the_last_always_shown(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rep = CliReporter(quiet=False, tty=False)
    for done in range(3):
        rep.task(
            "gate 5700", "gate 5700", completed=done, total=3, unit="requests", status="measure"
        )
    rep.task(
        "gate 5700", "gate 5700", completed=3, total=3, unit="requests", status="measure", done=True
    )
    rep.close()
    lines = capsys.readouterr().err.splitlines()
    # the first and the last; the two between came within the throttle interval
    assert lines == [
        "kctl: gate 5700: measure (0/3 requests)",
        "kctl: gate 5700: measure (3/3 requests)",
    ]


def test_terminal_waits_are_drawn_by_rich_and_end_before_the_result(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rep = CliReporter(quiet=False, tty=True)
    rep.task(
        "health d-1",
        "health d-1",
        completed=30,
        total=900,
        unit="s",
        status="port, server: loading weights",
    )
    assert rep._bars is not None  # drawing while the wait is under way
    rep.event("d-1 is healthy")  # the wait is not finished: it stays drawn, the line goes above
    assert rep._bars is not None
    rep.task(
        "health d-1", "health d-1", completed=330, total=900, unit="s", status="healthy", done=True
    )
    rep.event("measuring")  # every wait finished: drawing stops
    assert rep._bars is None
    err = capsys.readouterr().err
    assert "kctl: d-1 is healthy" in err and "kctl: measuring" in err
    assert "health d-1" in err and "330/900 s" in err and "healthy" in err


def _commands() -> list[list[str]]:
    """Every command's argv prefix, the lock group's subcommands included."""
    import typer.main

    group = typer.main.get_command(app)
    out: list[list[str]] = []
    for name, cmd in group.commands.items():  # type: ignore[attr-defined]
        subs = getattr(cmd, "commands", None)
        out += [[name, sub] for sub in subs] if subs else [[name]]
    return out


@pytest.mark.parametrize("args", _commands(), ids=" ".join)
def test_every_command_help_names_simulate_and_state_dir(args: list[str]) -> None:
    out = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "80"}).output
    text = " ".join(out.split())
    assert "--simulate" in text and "--state-dir" in text, out
    assert max(len(line) for line in out.splitlines()) <= 80, out
