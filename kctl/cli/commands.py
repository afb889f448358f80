"""The ``kctl`` commands: each parses its options, calls the controller and prints the
result through :func:`kctl.cli.app._emit`. Importing this module registers them on the app."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from kctl.cli import text
from kctl.cli.app import (
    FLEET_OPTION,
    SET_OPTION,
    _Command,
    _context,
    _emit,
    app,
    flag,
    lock_app,
)
from kctl.cli.results import LockRelease, LogsResult, Validated

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
    sets: list[str] = SET_OPTION,
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

    ctx = _context(sets)
    ctx.rebuild = rebuild
    if fleet is not None:
        from kctl.fleet.rollout import deploy_fleet

        fleet_result = deploy_fleet(ctx, profile, fleet, force=force)
        _emit("deploy", fleet_result, text.deploy_text(fleet_result))
        return
    result = run(ctx, profile, force=force)
    _emit("deploy", result, text.deploy_text(result))


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
        _emit("rollback", fleet_result, f"RESTORED: {fleet_result.reason}")
        return

    result = run(_context(), to)
    _emit("rollback", result, f"{result.outcome.upper()}: {result.reason}")


@app.command(cls=_Command)
def status(fleet: str | None = FLEET_OPTION) -> None:
    """What serves now (checked against reality), its health, and the last gate table.
    Exits 4 when the host needs attention (DEGRADED, an interrupted deploy, server down).
    With --fleet: each replica's node, port, profile, image, health and last gate."""
    from kctl.controller.status import status as run

    if fleet is not None:
        from kctl.fleet.status import status_fleet

        rep = status_fleet(_context(), fleet)
        _emit("status", rep, text.fleet_status_text(rep), exit_code=4 if rep.needs_attention else 0)
        return

    report = run(_context())
    code = 4 if report.needs_attention else 0
    _emit("status", report, text.status_text(report), exit_code=code)


@app.command(cls=_Command)
def history(
    limit: int = typer.Option(20, "--limit", "-n", min=1, help="At most N deployments."),
    fleet: str | None = FLEET_OPTION,
) -> None:
    """Past deployments, newest first (with --fleet: the fleet's rollouts)."""
    from kctl.controller.status import history as run

    if fleet is not None:
        from kctl.fleet.status import history_fleet

        rows = history_fleet(_context(), fleet, limit)
    else:
        rows = run(_context(), limit)
    _emit("history", rows, text.history_text(rows))


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
    sets: list[str] = SET_OPTION,
) -> None:
    """Run a gate workload against what serves now; stored, no deploy."""
    from kctl.controller.bench import bench as run

    result = run(_context(sets), profile, bench_serving=bench_serving)
    out = result.table or json.dumps(result.measurement.get("summary", {}), indent=2)
    _emit("bench", result, out)


@app.command(cls=_Command)
def plan(
    profile: str = typer.Argument(..., help="Profile YAML."),
    fleet: str | None = FLEET_OPTION,
    sets: list[str] = SET_OPTION,
) -> None:
    """Everything deploy would do (profile, argv/env, gate, image); changes nothing.

    With --fleet: the fleet rollout's steps, its revert and the Swarm service spec."""
    from kctl.controller.plan import plan as run

    if fleet is not None:
        from kctl.fleet.preview import plan_fleet

        fleet_result = plan_fleet(_context(sets), profile, fleet)
        _emit("plan", fleet_result, text.plan_fleet_text(fleet_result))
        return

    result = run(_context(sets), profile)
    _emit("plan", result, text.plan_text(result))


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
    from kctl.k8s.results import RenderResult

    if not k8s:
        raise UsageError(
            "kctl render needs a format", hint="kctl render --k8s PROFILE --fleet FLEET"
        )
    result, page = render_command(profile, fleet, out=out, with_argo=argo)
    _emit("render", RenderResult.model_validate(result), page)


@app.command(cls=_Command)
def validate(
    profiles: list[str] = typer.Argument(..., help="Profile YAML files."),
    sets: list[str] = SET_OPTION,
) -> None:
    """Validate profiles; every problem with its file, field and fix. With --set: each
    profile as the field values given make it."""
    from kctl.errors import ProfileError
    from kctl.launch import argv_warnings
    from kctl.profile.loader import load_profile
    from kctl.profile.overrides import parse_overrides

    results: list[Validated] = []
    problems: list[str] = []
    overrides = parse_overrides(sets)
    for path in profiles:
        try:
            p = load_profile(path, overrides=overrides)
            warnings = [f"{path}: {w}" for w in argv_warnings(p)]
            results.append(Validated(path=path, ok=True, hash=p.content_hash, warnings=warnings))
        except ProfileError as exc:
            problems += exc.problems
            results.append(Validated(path=path, ok=False, problems=exc.problems))
    _emit("validate", results, text.validate_text(results), exit_code=2 if problems else 0)


@app.command(cls=_Command)
def schema(
    command: str | None = typer.Argument(
        None,
        help="A command whose --json result to describe (deploy, status, lock show ...), "
        "or envelope; default: the profile file.",
    ),
    fleet: bool = flag("--fleet", help="The result of the command's --fleet form."),
) -> None:
    """Print a JSON Schema: of a profile file, for editors; or, with COMMAND, of that
    command's --json result (docs/json-output.md is generated from these). With --json:
    in the envelope."""
    from kctl.cli.results import result_names, result_schema
    from kctl.errors import UsageError
    from kctl.profile.schema import profile_schema

    if command is None:
        if fleet:
            raise UsageError("--fleet needs a COMMAND", hint="e.g. kctl schema deploy --fleet")
        result = profile_schema()
    else:
        name = f"{command} --fleet" if fleet else command
        try:
            result = result_schema(name)
        except KeyError:
            known = ", ".join(n for n in result_names() if n != "schema")
            raise UsageError(
                f"kctl schema {name}: no such result", hint=f"name one of: {known}"
            ) from None
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

    log = run(_context(), deployment, tail)
    _emit("logs", LogsResult(log=log), log)


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
    _emit("build", result, f"image {result.image}")


@app.command(cls=_Command)
def gc(
    retain: int | None = typer.Option(
        None, "--retain", min=0, help="Stopped containers to keep (default: 3)."
    ),
) -> None:
    """Remove old stopped kctl containers; never the serving or known-good one."""
    from kctl.controller.maintenance import gc as run

    result = run(_context(), retain)
    _emit("gc", result, text.gc_text(result))


@app.command(cls=_Command)
def stop(
    yes: bool = flag("--yes", help="Confirm taking the service down."),
    fleet: str | None = FLEET_OPTION,
) -> None:
    """Stop what serves (`kctl rollback` brings the known-good back).

    With --fleet: every replica of the fleet (its services removed)."""
    from kctl.controller.maintenance import stop as run

    if fleet is not None:
        from kctl.fleet.stop import stop_fleet

        fleet_result = stop_fleet(_context(), fleet, yes=yes)
        _emit("stop", fleet_result, text.fleet_stop_text(fleet_result, fleet))
        return
    result = run(_context(), yes=yes)
    _emit("stop", result, text.stop_text(result))


@lock_app.command("show", cls=_Command)
def lock_show() -> None:
    """Who holds the deploy lock, and whether it is stale."""
    from kctl.lock import DeployLock

    info = DeployLock(_context().state_dir).inspect()
    _emit("lock show", info, text.lock_text(info))


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
        _emit("lock release", LockRelease(released=False), "lock is free: nothing to release")
    else:
        _emit(
            "lock release",
            LockRelease(released=True, lock=released),
            f"lock released (was {released.describe(time.time())})",
        )
