"""The ``kctl`` Typer app, its global options and what every command shares: the context
(state dir, backend, reporter) and the one way a result is printed (:func:`_emit`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from kctl.cli.progress import CliReporter


class _FlagHelp:
    """``--help`` drawn as the flag it is (no value type after it)."""

    def get_help_option(self, ctx: Any) -> Any:
        opt = super().get_help_option(ctx)  # type: ignore[misc]
        if opt is not None:
            opt.metavar = ""
        return opt


#: every command's help names the global options, which go before the command's name
GLOBALS_EPILOG = (
    "Global options, given before the command: --state-dir DIR (where the store, lock "
    "and logs live), --simulate (the SGLang simulator on this machine; never touches a "
    "real deployment), --json, --verbose. E.g. `kctl --state-dir .kctl-state --simulate "
    "{name} ...`; `kctl --help` describes them."
)


class _Command(_FlagHelp, TyperCommand):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        note = GLOBALS_EPILOG.format(name=self.name)
        self.epilog = f"{self.epilog}\n\n{note}" if self.epilog else note


class _Group(_FlagHelp, TyperGroup):
    pass


def flag(*decls: str, help: str) -> Any:  # noqa: A002 - typer's own name for it
    """A boolean option given as a plain flag (``--json``), drawn without a value type."""
    return typer.Option(False, *decls, help=help, metavar="")


app = typer.Typer(
    name="kctl",
    cls=_Group,
    help="Deploy custom GPU kernels into SGLang serving: build, health, throughput gate, "
    "promote or automatically revert.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    epilog="Exit codes: 0 ok or promoted; 2 invalid input; 3 candidate rejected, baseline "
    "restored and verified; 4 DEGRADED or needs attention (run `kctl rollback`); 5 a "
    "precondition failed, nothing changed; 130 interrupted before anything changed; 1 "
    "internal error.",
)
lock_app = typer.Typer(cls=_Group, help="Inspect or release the deploy lock.", no_args_is_help=True)
app.add_typer(lock_app, name="lock")


@dataclass
class Options:
    state_dir: Path | None = None
    json: bool = False
    verbose: bool = False
    simulate: bool = False
    command: str = ""


OPTS = Options()


#: the reporter of this command (one per process), closed before the result is printed
_REPORTER: list[CliReporter] = []


def _context(overrides: list[str] | None = None) -> Any:
    """The command's context; ``overrides``: its ``--set FIELD=VALUE`` items."""
    from kctl.backend import make_backend
    from kctl.controller.context import Context, default_state_dir

    root = Path(OPTS.state_dir or default_state_dir()).expanduser().resolve()
    backend = make_backend(simulate=OPTS.simulate)  # the one place simulation is chosen
    reporter = CliReporter(quiet=OPTS.json, verbose=OPTS.verbose)
    _REPORTER[:] = [reporter]
    return Context(
        state_dir=backend.state_dir(root),
        backend=backend,
        reporter=reporter,
        overrides=tuple(overrides or ()),
    )


def _emit(command: str, result: Any, text: str, exit_code: int = 0) -> None:
    from kctl.render import envelope

    for reporter in _REPORTER:
        reporter.close()  # the last bars stay above the result
    if OPTS.json:
        print(envelope(command, ok=exit_code == 0, exit_code=exit_code, result=result))
    else:
        print(text)
    if exit_code:
        raise typer.Exit(exit_code)


@app.callback()
def _globals(
    state_dir: Path | None = typer.Option(
        None,
        "--state-dir",
        envvar="KCTL_STATE_DIR",
        help="Where kctl keeps its store, lock and logs (default: $XDG_STATE_HOME/kctl).",
    ),
    json_out: bool = flag("--json", help="Print one versioned JSON envelope on stdout."),
    verbose: bool = flag(
        "--verbose", "-v", help="Tracebacks on errors, and every health-poll miss."
    ),
    simulate: bool = flag(
        "--simulate",
        help="Run on the local runtime with the SGLang simulator, in the state dir's "
        "simulate/ namespace; never touches a real deployment.",
    ),
) -> None:
    OPTS.state_dir, OPTS.json, OPTS.verbose, OPTS.simulate = state_dir, json_out, verbose, simulate


SET_OPTION: Any = typer.Option(
    [],
    "--set",
    metavar="FIELD=VALUE",
    help="Set a profile field over the files, for the profile and its baseline alike; "
    "repeatable. The value is typed by the field (--set server.port=31000, --set "
    "'gate.contexts=[5700, 23000]', --set server.env.HF_HOME=/data/hf). Recorded with "
    "the deployment; `kctl schema` lists the fields.",
)
FLEET_OPTION: Any = typer.Option(
    None,
    "--fleet",
    help="A fleet file (docs/fleet.md): act on every replica of that fleet (Docker Swarm) "
    "instead of this host.",
)
