"""The ``kctl`` command line. Thin: parse options, call the controller, render the result.
One place (:func:`main`) turns errors into one stderr line and an exit code.

Exit codes: 0 ok/promoted · 2 invalid input · 3 candidate rejected, baseline restored ·
4 DEGRADED (revert or rollback failed) · 5 precondition failed, nothing changed ·
130 interrupted before any change · 1 internal error.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from kctl.errors import KctlError


class _FlagHelp:
    """``--help`` drawn as the flag it is (no value type after it)."""

    def get_help_option(self, ctx: Any) -> Any:
        opt = super().get_help_option(ctx)  # type: ignore[misc]
        if opt is not None:
            opt.metavar = ""
        return opt


class _Command(_FlagHelp, TyperCommand):
    pass


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


class CliReporter:
    """Progress on stderr: a live line on a terminal, throttled lines otherwise."""

    def __init__(self, quiet: bool, verbose: bool = False) -> None:
        self.quiet = quiet
        self.verbose = verbose
        self.tty = sys.stderr.isatty()
        self._last = 0.0
        self._live = False

    def _end_live(self) -> None:
        if self._live:
            sys.stderr.write("\n")
            self._live = False

    def event(self, message: str) -> None:
        self._end_live()
        print(f"kctl: {message}", file=sys.stderr, flush=True)

    def warn(self, message: str) -> None:
        self._end_live()
        print(f"kctl: warning: {message}", file=sys.stderr, flush=True)

    def progress(self, message: str, detail: str = "") -> None:
        if detail and (self.tty or self.verbose):
            message = f"{message}: {detail}"
        if self.verbose and not self.tty:
            print(f"kctl: {message}", file=sys.stderr, flush=True)
            return
        if self.tty:
            sys.stderr.write("\r\033[K" + message[:200])
            sys.stderr.flush()
            self._live = True
            return
        now = time.monotonic()
        if now - self._last >= 2.0:
            self._last = now
            print(f"kctl: {message}", file=sys.stderr, flush=True)


def _context() -> Any:
    from kctl.backend import make_backend
    from kctl.controller.context import Context, default_state_dir

    root = Path(OPTS.state_dir or default_state_dir()).expanduser().resolve()
    backend = make_backend(simulate=OPTS.simulate)  # the one place simulation is chosen
    return Context(
        state_dir=backend.state_dir(root),
        backend=backend,
        reporter=CliReporter(quiet=OPTS.json, verbose=OPTS.verbose),
    )


def _emit(command: str, result: Any, text: str, exit_code: int = 0) -> None:
    from kctl.render import envelope

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


FLEET_OPTION: Any = typer.Option(
    None,
    "--fleet",
    help="A fleet file (docs/fleet.md): act on every replica of that fleet (Docker Swarm) "
    "instead of this host.",
)

_DEPLOY_EXITS = (
    "Exit codes: 0 promoted (or the profile already serves); 2 invalid profile or "
    "arguments, nothing touched; 3 candidate rejected, the known-good baseline restored and "
    "verified (with --fleet: every replica back on it); 4 DEGRADED: restoring the baseline "
    "failed, run `kctl rollback`, or a fleet rollout paused for a node Down; 5 a "
    "precondition failed (lock held, port taken, image build failed, store unreadable), "
    "nothing changed; 130 interrupted before anything changed."
)


@app.command(cls=_Command, epilog=_DEPLOY_EXITS)
def deploy(
    profile: str = typer.Argument(..., help="Profile YAML to deploy."),
    rebuild: bool = flag("--rebuild", help="Rebuild the image even if unchanged."),
    force: bool = flag("--force", help="Deploy even if this profile already serves."),
    fleet: str | None = FLEET_OPTION,
) -> None:
    """Deploy PROFILE: health, throughput + correctness gate, promote or revert.

    On the host: builds the serving image (docker runtime) before anything stops; measures
    the known-good baseline (or reuses a fresh stored measurement of it); stops what serves
    on the profile's port; starts the candidate, waits for its health and gates it against
    the baseline. PASS: the candidate serves. Anything else (FAIL, unhealthy, an error,
    SIGINT/SIGTERM): the candidate is stopped and the known-good baseline started again and
    verified.

    State: the store (kctl.db), the deploy lock, server logs and image builds live in
    --state-dir (default $XDG_STATE_HOME/kctl; --simulate uses its simulate/ subdirectory).
    """
    from kctl.controller.deploy import deploy as run
    from kctl.render import deploy_text

    ctx = _context()
    ctx.rebuild = rebuild
    if fleet is not None:
        from kctl.fleet.rollout import deploy_fleet

        fleet_result = deploy_fleet(ctx, profile, fleet, force=force)
        _emit("deploy", fleet_result, deploy_text(fleet_result))
        return
    result = run(ctx, profile, force=force).to_dict()
    _emit("deploy", result, deploy_text(result))


@app.command(cls=_Command)
def rollback(
    to: str | None = typer.Option(None, "--to", help="Deployment id to restore."),
    fleet: str | None = FLEET_OPTION,
) -> None:
    """Restore the known-good baseline (or --to an earlier deployment), health-checked.
    With --fleet: every replica of the fleet back on its known-good, each verified."""
    from kctl.controller.rollback import rollback as run

    if fleet is not None:
        from kctl.fleet.rollout import rollback_fleet

        fleet_result = rollback_fleet(_context(), fleet)
        _emit("rollback", fleet_result, f"RESTORED: {fleet_result['reason']}")
        return

    result = run(_context(), to).to_dict()
    _emit("rollback", result, f"{result['outcome'].upper()}: {result['reason']}")


@app.command(cls=_Command)
def status(fleet: str | None = FLEET_OPTION) -> None:
    """What serves now (checked against reality), its health, and the last gate table.
    Exits 4 when the host needs attention (DEGRADED, an interrupted deploy, server down).
    With --fleet: each replica's node, port, profile, image, health and last gate."""
    from kctl.controller.status import status as run
    from kctl.render import status_text

    if fleet is not None:
        from kctl.fleet.status import status_fleet
        from kctl.fleet.status import status_text as fleet_text

        rep = status_fleet(_context(), fleet)
        _emit("status", rep, fleet_text(rep), exit_code=4 if rep["needs_attention"] else 0)
        return

    report = run(_context()).to_dict()
    code = 4 if report["needs_attention"] else 0
    _emit("status", report, status_text(report), exit_code=code)


@app.command(cls=_Command)
def history(
    limit: int = typer.Option(20, "--limit", "-n", min=1, help="At most N deployments."),
    fleet: str | None = FLEET_OPTION,
) -> None:
    """Past deployments, newest first (with --fleet: the fleet's rollouts)."""
    from kctl.controller.status import history as run
    from kctl.render import history_text

    if fleet is not None:
        from kctl.fleet.status import history_fleet

        rows = history_fleet(_context(), fleet, limit)
    else:
        rows = run(_context(), limit)
    _emit("history", rows, history_text(rows))


@app.command(cls=_Command)
def bench(
    profile: str | None = typer.Argument(None, help="Profile whose gate to run."),
    bench_serving: str | None = typer.Option(
        None,
        "--bench-serving",
        metavar="FILE",
        help="Also append the results to FILE as SGLang's bench_serving writes them "
        "(JSON lines, one per context).",
    ),
) -> None:
    """Run a gate workload against what serves now; stored, no deploy."""
    from kctl.controller.bench import bench as run

    result = run(_context(), profile, bench_serving=bench_serving).to_dict()
    text = result.get("table") or json.dumps(result["measurement"].get("summary", {}), indent=2)
    _emit("bench", result, text)


@app.command(cls=_Command)
def plan(profile: str = typer.Argument(..., help="Profile YAML.")) -> None:
    """Everything deploy would do (profile, argv/env, gate, image); changes nothing."""
    from kctl.controller.plan import plan as run
    from kctl.launch import describe_release

    result = run(_context(), profile)
    lines = [
        f"profile {result['profile']['name']} (hash {result['profile_hash'][:12]})",
        f"runtime: {result['runtime']}" + (" (simulated)" if result["simulate"] else ""),
        f"baseline: {result['baseline'] or 'none (this profile is a baseline)'}",
        describe_release(result["sglang"]),
        *(f"  warning: {w}" for w in result["warnings"]),
        "launch: " + " ".join(result["launch"]["argv"]),
        "env: " + " ".join(f"{k}={v}" for k, v in result["launch"]["env"].items()),
        f"gate: {result['gate']['requests']} requests over contexts "
        f"{result['gate']['contexts']}, " + _duration(result["gate"]["estimated_duration_s"]),
        "preconditions: " + ", ".join(result["preconditions"]),
        "steps:",
        *(f"  {i + 1}. {s}" for i, s in enumerate(result["steps"])),
        "on failure after the host changed:",
        *(f"  {i + 1}. {s}" for i, s in enumerate(result["revert"])),
    ]
    if "image" in result:
        lines += [
            "",
            "Dockerfile:",
            result["image"].get("dockerfile", ""),
            "run spec:",
            json.dumps(result["run_spec"], indent=2, default=str),
        ]
    _emit("plan", result, "\n".join(lines))


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "duration unknown until the baseline has been measured"
    return f"about {seconds:.0f} s (from the baseline's stored measurement)"


@app.command(cls=_Command)
def render(
    profile: str = typer.Argument(..., help="Profile YAML: what serves."),
    k8s: bool = flag("--k8s", help="Render Kubernetes objects (the only format so far)."),
    fleet: str = typer.Option(..., "--fleet", help="Fleet YAML: replicas, k8s settings."),
    out: Path | None = typer.Option(
        None, "--out", help="Write one YAML file per object here instead of stdout."
    ),
    argo: bool = flag(
        "--argo", help="Also render the canary as an Argo Rollout (single-node replicas)."
    ),
) -> None:
    """Render PROFILE on the fleet FLEET as Kubernetes objects: a Deployment (or a
    LeaderWorkerSet when a replica spans nodes), a Service, probes on SGLang's health
    endpoints, GPU limits. Rendered only: kctl applies nothing. docs/kubernetes.md."""
    from kctl.errors import UsageError
    from kctl.k8s.render import render_command

    if not k8s:
        raise UsageError(
            "kctl render needs a format", hint="kctl render --k8s PROFILE --fleet FLEET"
        )
    result, text = render_command(profile, fleet, out=out, with_argo=argo)
    _emit("render", result, text)


@app.command(cls=_Command)
def validate(profiles: list[str] = typer.Argument(..., help="Profile YAML files.")) -> None:
    """Validate profiles; every problem with its file, field and fix."""
    from kctl.errors import ProfileError
    from kctl.launch import argv_warnings
    from kctl.profile.loader import load_profile

    results: list[dict[str, Any]] = []
    problems: list[str] = []
    for path in profiles:
        try:
            p = load_profile(path)
            warnings = [f"{path}: {w}" for w in argv_warnings(p)]
            results.append({"path": path, "ok": True, "hash": p.content_hash, "warnings": warnings})
        except ProfileError as exc:
            problems += exc.problems
            results.append({"path": path, "ok": False, "problems": exc.problems})
    text = "\n".join(
        "\n".join(
            [f"ok {r['path']} ({r['hash'][:12]})", *(f"  warning: {w}" for w in r["warnings"])]
        )
        if r["ok"]
        else "\n".join(r["problems"])
        for r in results
    )
    _emit("validate", results, text, exit_code=2 if problems else 0)


@app.command(cls=_Command)
def schema() -> None:
    """Print the JSON Schema of a profile file, for editors (with --json: in the envelope)."""
    from kctl.profile.schema import profile_schema

    result = profile_schema()
    _emit("schema", result, json.dumps(result, indent=2))


@app.command(cls=_Command)
def logs(
    deployment: str | None = typer.Argument(
        None, help="Deployment id (default: the one that serves now)."
    ),
    tail: int | None = typer.Option(None, "--tail", "-n", min=1, help="Only the last N lines."),
) -> None:
    """The server log of a deployment."""
    from kctl.controller.status import logs as run

    text = run(_context(), deployment, tail)
    _emit("logs", {"log": text}, text)


@app.command(cls=_Command)
def build(
    profile: str = typer.Argument(..., help="Profile YAML whose serving image to build."),
    rebuild: bool = flag("--rebuild", help="Rebuild even if unchanged."),
) -> None:
    """Build the profile's serving image (content-addressed; skipped when unchanged)."""
    from kctl.controller.maintenance import build as run

    ctx = _context()
    ctx.rebuild = rebuild
    result = run(ctx, profile)
    _emit("build", result, f"image {result['image']}")


@app.command(cls=_Command)
def gc(
    retain: int | None = typer.Option(
        None, "--retain", min=0, help="Stopped containers to keep (default: 3)."
    ),
) -> None:
    """Remove old stopped kctl containers; never the serving or known-good one."""
    from kctl.controller.maintenance import gc as run

    result = run(_context(), retain)
    _emit(
        "gc",
        result,
        f"removed {len(result['removed'])} container(s)"
        + "".join(f"\n  {n}" for n in result["removed"]),
    )


@app.command(cls=_Command)
def stop(yes: bool = flag("--yes", help="Confirm taking the service down.")) -> None:
    """Stop what serves (`kctl rollback` brings the known-good back)."""
    from kctl.controller.maintenance import stop as run

    result = run(_context(), yes=yes)
    _emit(
        "stop",
        result,
        f"stopped {len(result['stopped'])} server(s)"
        + "".join(f"\n  {d}" for d in result["stopped"]),
    )


@lock_app.command("show", cls=_Command)
def lock_show() -> None:
    """Who holds the deploy lock, and whether it is stale."""
    from kctl.lock import DeployLock

    info = DeployLock(_context().state_dir).inspect()
    data = None if info is None else (info.to_dict() if hasattr(info, "to_dict") else vars(info))
    text = "lock is free" if data is None else "\n".join(f"{k}: {v}" for k, v in data.items())
    _emit("lock show", data, text)


@lock_app.command("release", cls=_Command)
def lock_release(
    force: bool = flag(
        "--force",
        help="Also release a lock held from another host, or a lock file that cannot be "
        "read. A kctl running on this host is never forced out.",
    ),
) -> None:
    """Release the deploy lock when its holder is gone (a stale lock of a kctl that died
    on this host). --force also releases another host's lock or an unreadable lock file;
    a kctl that runs on this host is never forced out: stop it first."""
    from kctl.lock import DeployLock

    released = DeployLock(_context().state_dir).release(force=force)
    if released is None:
        _emit("lock release", {"released": False}, "lock is free: nothing to release")
    else:
        _emit(
            "lock release",
            {"released": True, "lock": released.to_dict()},
            f"lock released (was {released.describe(time.time())})",
        )


_GLOBAL_FLAGS = ("--json", "--verbose", "-v", "--simulate")


def hoist_globals(args: list[str]) -> list[str]:
    """Global options are accepted anywhere (`kctl deploy x.yaml --simulate`): move them in
    front of the command, where the parser expects them. Stops at `--`."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            rest += args[i:]
            break
        if a in _GLOBAL_FLAGS or a.startswith("--state-dir="):
            front.append(a)
        elif a == "--state-dir" and i + 1 < len(args):
            front += [a, args[i + 1]]
            i += 1
        else:
            rest.append(a)
        i += 1
    return front + rest


_GROUPS = ("lock",)  # commands whose name in the JSON envelope includes the subcommand


def command_name(args: list[str]) -> str:
    """The command as the JSON envelope names it ("deploy", "lock show"): the first words
    after the global options (`--state-dir`'s value is not a word), "" when there is none."""
    words: list[str] = []
    i = 0
    while i < len(args) and len(words) < 2:
        a = args[i]
        if a == "--":
            break
        if a == "--state-dir":
            i += 1  # its value
        elif not a.startswith("-"):
            words.append(a)
            if words[0] not in _GROUPS:
                break
        elif words:  # an option of the command: no subcommand follows
            break
        i += 1
    return " ".join(words)


def _usage_envelope(command: str, path: str, message: str) -> str:
    from kctl.render import envelope

    error = {"type": "UsageError", "message": message, "hint": f"run `{path} --help`"}
    return envelope(command, ok=False, exit_code=2, result=None, error=error)


def _json_requested(args: list[str]) -> bool:
    globals_ = args[: args.index("--")] if "--" in args else args
    return "--json" in globals_


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the app and maps errors to one line and an exit code."""
    args = hoist_globals(sys.argv[1:] if argv is None else list(argv))
    command = command_name(args)
    words = command.split()
    if (
        _json_requested(args)
        and "--help" not in args
        and (not words or (words[0] in _GROUPS and len(words) == 1))
    ):
        # The parser would print the help on stdout, where --json promises only the envelope.
        path = " ".join(["kctl", *words])
        print(f"Usage: {path} COMMAND [ARGS]...\nTry '{path} --help' for help.", file=sys.stderr)
        print(_usage_envelope(command, path, f"`{path}` needs a command"))
        return 2
    try:
        # standalone_mode=False: click returns an Exit's code instead of raising it
        rv = app(args=args, standalone_mode=False, prog_name="kctl")
        return rv if isinstance(rv, int) else 0
    except typer.Exit as exc:
        return int(exc.exit_code or 0)
    except KctlError as exc:
        _report_error(command, exc)
        return exc.exit_code
    except KeyboardInterrupt:
        print("kctl: interrupted", file=sys.stderr)
        return 130
    except typer.Abort:
        print("kctl: aborted", file=sys.stderr)
        return 130
    except typer.TyperException as exc:  # a usage error from the option parser
        show = getattr(exc, "show", None)  # the parser's own usage text
        if callable(show):
            show()
        else:
            print(f"kctl: error: {exc.format_message()}", file=sys.stderr)
        if _json_requested(args):  # the parse may have failed before OPTS was set
            ctx = getattr(exc, "ctx", None)
            path = ctx.command_path if ctx is not None else "kctl"
            print(_usage_envelope(command, path, exc.format_message()))
        return 2
    except Exception as exc:  # a bug
        print(f"kctl: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        if OPTS.verbose:
            traceback.print_exc()
        else:
            print("  run with --verbose for the traceback, and please report it", file=sys.stderr)
        return 1


def _report_error(command: str, exc: KctlError) -> None:
    """One error, as the envelope under --json, else one stderr line (with the rejected
    deploy's result on stdout and the candidate's last log lines first)."""
    from kctl.errors import CandidateRejected
    from kctl.render import envelope

    result = exc.result if isinstance(exc, CandidateRejected) else None
    if OPTS.json:
        print(
            envelope(
                command,
                ok=False,
                exit_code=exc.exit_code,
                result=result,
                error={"type": type(exc).__name__, "message": exc.message, "hint": exc.hint},
            )
        )
    else:
        if result is not None:
            from kctl.render import deploy_text

            print(deploy_text(result, reason=False))  # the error line below says why
        if isinstance(exc, CandidateRejected) and exc.log_tail:
            print("last log lines:\n" + exc.log_tail, file=sys.stderr)
        print(f"kctl: error: {exc}", file=sys.stderr)
    if OPTS.verbose:
        traceback.print_exc()


if __name__ == "__main__":
    sys.exit(main())
