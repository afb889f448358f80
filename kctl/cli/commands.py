"""The ``kctl`` commands: each parses its options, calls the controller and prints the
result through :func:`kctl.cli.app._emit`. Importing this module registers them on the app."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

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

if TYPE_CHECKING:
    from kctl.controller.plan import DriftCheckCost

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
    from kctl.render import deploy_text, dump

    ctx = _context(sets)
    ctx.rebuild = rebuild
    if fleet is not None:
        from kctl.fleet.rollout import deploy_fleet

        fleet_result = deploy_fleet(ctx, profile, fleet, force=force)
        _emit("deploy", fleet_result, deploy_text(dump(fleet_result)))
        return
    result = run(ctx, profile, force=force)
    _emit("deploy", result, deploy_text(dump(result)))


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
    from kctl.render import dump, status_text

    if fleet is not None:
        from kctl.fleet.status import status_fleet
        from kctl.fleet.status import status_text as fleet_text

        rep = status_fleet(_context(), fleet)
        _emit("status", rep, fleet_text(rep), exit_code=4 if rep.needs_attention else 0)
        return

    report = run(_context())
    code = 4 if report.needs_attention else 0
    _emit("status", report, status_text(dump(report)), exit_code=code)


@app.command(cls=_Command)
def history(
    limit: int = typer.Option(20, "--limit", "-n", min=1, help="At most N deployments."),
    fleet: str | None = FLEET_OPTION,
) -> None:
    """Past deployments, newest first (with --fleet: the fleet's rollouts)."""
    from kctl.controller.status import history as run
    from kctl.render import dump, history_text

    if fleet is not None:
        from kctl.fleet.status import history_fleet

        rows = history_fleet(_context(), fleet, limit)
    else:
        rows = run(_context(), limit)
    _emit("history", rows, history_text(dump(rows)))


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
    text = result.table or json.dumps(result.measurement.get("summary", {}), indent=2)
    _emit("bench", result, text)


@app.command(cls=_Command)
def plan(
    profile: str = typer.Argument(..., help="Profile YAML."),
    fleet: str | None = FLEET_OPTION,
    sets: list[str] = SET_OPTION,
) -> None:
    """Everything deploy would do (profile, argv/env, gate, image); changes nothing.

    With --fleet: the fleet rollout's steps, its revert and the Swarm service spec."""
    from kctl.controller.plan import plan as run
    from kctl.launch import describe_release

    if fleet is not None:
        from kctl.fleet.preview import plan_fleet, plan_fleet_text

        fleet_result = plan_fleet(_context(sets), profile, fleet)
        _emit("plan", fleet_result, plan_fleet_text(fleet_result))
        return

    result = run(_context(sets), profile)
    launch, gate = result.launch, result.gate
    lines = [
        f"profile {result.profile['name']} (hash {result.profile_hash[:12]})",
        *_overrides_line(result.profile["overrides"]),
        f"runtime: {result.runtime}" + (" (simulated)" if result.simulate else ""),
        f"baseline: {result.baseline or 'none (this profile is a baseline)'}",
        describe_release(result.sglang.model_dump()),
        *(f"  warning: {w}" for w in result.warnings),
        "launch: " + " ".join(launch.argv),
        "env: " + " ".join(f"{k}={v}" for k, v in launch.env.items()),
        *(
            [f"api key: {launch.api_key} (in a --config file, not the argv)"]
            if launch.api_key
            else []
        ),
        f"gate: {gate.requests} requests over contexts "
        f"{gate.contexts}, " + _duration(gate.estimated_duration_s),
        *_check_line(gate.baseline_check),
        "preconditions: " + ", ".join(result.preconditions),
        "steps:",
        *(f"  {i + 1}. {s}" for i, s in enumerate(result.steps)),
        "on failure after the host changed:",
        *(f"  {i + 1}. {s}" for i, s in enumerate(result.revert)),
    ]
    if result.image is not None:
        lines += [
            "",
            "Dockerfile:",
            result.image.get("dockerfile", ""),
            "run spec:",
            json.dumps(result.run_spec, indent=2, default=str),
        ]
    _emit("plan", result, "\n".join(lines))


def _check_line(check: DriftCheckCost | None) -> list[str]:
    """The drift check's cost in ``kctl plan``'s text, when the plan has one."""
    if check is None:
        return []
    about = "" if check.estimated_s is None else f"about {check.estimated_s:.0f} s, "
    return [
        f"baseline drift check: {check.requests} requests on the running baseline, "
        f"{about}at most {check.bound_s:g} s at real-time scale; if it drifted, the "
        f"baseline is measured again ({check.measure_requests} requests)"
    ]


def _overrides_line(overrides: list[str]) -> list[str]:
    """``kctl plan``'s line for the ``--set`` items in the profile it shows."""
    if not overrides:
        return []
    return ["overrides (profile and baseline): " + " ".join(f"--set {o}" for o in overrides)]


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
    from kctl.k8s.results import RenderResult

    if not k8s:
        raise UsageError(
            "kctl render needs a format", hint="kctl render --k8s PROFILE --fleet FLEET"
        )
    result, text = render_command(profile, fleet, out=out, with_argo=argo)
    _emit("render", RenderResult.model_validate(result), text)


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
    text = "\n".join(
        "\n".join(
            [f"ok {r.path} ({(r.hash or '')[:12]})", *(f"  warning: {w}" for w in r.warnings)]
        )
        if r.ok
        else "\n".join(r.problems)
        for r in results
    )
    _emit("validate", results, text, exit_code=2 if problems else 0)


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

    text = run(_context(), deployment, tail)
    _emit("logs", LogsResult(log=text), text)


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
    _emit(
        "gc",
        result,
        f"removed {len(result.removed)} container(s)" + "".join(f"\n  {n}" for n in result.removed),
    )


@app.command(cls=_Command)
def stop(
    yes: bool = flag("--yes", help="Confirm taking the service down."),
    fleet: str | None = FLEET_OPTION,
) -> None:
    """Stop what serves (`kctl rollback` brings the known-good back).

    With --fleet: every replica of the fleet (its services removed)."""
    from kctl.controller.maintenance import stop as run

    if fleet is not None:
        from kctl.fleet.stop import stop_fleet, stop_text

        fleet_result = stop_fleet(_context(), fleet, yes=yes)
        _emit("stop", fleet_result, stop_text(fleet_result, fleet))
        return
    result = run(_context(), yes=yes)
    _emit(
        "stop",
        result,
        f"stopped {len(result.stopped)} server(s)" + "".join(f"\n  {d}" for d in result.stopped),
    )


@lock_app.command("show", cls=_Command)
def lock_show() -> None:
    """Who holds the deploy lock, and whether it is stale."""
    from kctl.lock import DeployLock

    info = DeployLock(_context().state_dir).inspect()
    text = "lock is free" if info is None else "\n".join(f"{k}: {v}" for k, v in vars(info).items())
    _emit("lock show", info, text)


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
