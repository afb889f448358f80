"""The text of every command's result, for humans: pure, a typed result in, a string out
(``--json`` prints the same result's dump instead). Tables are :func:`kctl.render.table`'s,
in plain ASCII through :func:`kctl.render.to_text`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kctl.render import cell, table, to_text, verdict_cell

if TYPE_CHECKING:
    from rich.table import Table

    from kctl.cli.results import Validated
    from kctl.controller.deploy import DeployResult
    from kctl.controller.maintenance import GcResult, StopResult
    from kctl.controller.plan import DriftCheckCost, PlanResult
    from kctl.controller.report import ReportResult
    from kctl.controller.status import Record, StatusReport
    from kctl.fleet.preview import FleetPlan
    from kctl.fleet.results import FleetDeployResult
    from kctl.fleet.status import FleetStatus
    from kctl.fleet.stop import FleetStopResult
    from kctl.lock.holder import LockInfo


def _timings(timings: dict[str, float]) -> str:
    return "  timings (wall clock): " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items())


def deploy_text(result: DeployResult | FleetDeployResult, *, reason: bool = True) -> str:
    """A deploy's result (on a host or a fleet); ``reason=False`` when the error line
    says it."""
    lines = []
    if result.table:
        lines += [result.table, ""]
    lines.append(f"{result.outcome.upper()}: {result.profile} ({result.deployment_id})")
    if reason:
        lines.append(f"  reason: {result.reason}")
    if result.serving:
        lines.append(f"  serving: {result.serving}")
    if result.timings:
        lines.append(_timings(result.timings))
    report = getattr(result, "report", None)  # a fleet's rollout writes none
    if report:
        lines.append(f"  report: {report}")
    lines += [f"  warning: {w}" for w in result.warnings]
    return "\n".join(lines)


def _serving_line(report: StatusReport) -> str:
    """What serves, first: the store's serving deployment, or else what really answers on
    a port (a server an interrupted command left, or a process kctl does not own)."""
    serving = report.serving
    if serving:
        return (
            f"serving: {serving.id}  profile {serving.profile} "
            f"(hash {serving.profile_hash[:12]})  {serving.process or ''}"
        ).rstrip()
    ours = [u for u in report.unmanaged if u.deployment]
    if ours:
        u = ours[0]
        return (
            f"serving: {u.deployment}  profile {u.profile or '?'} on port "
            f"{u.port} ({u.health or 'health unknown'}), NOT verified: the store "
            "does not record it serving; run `kctl rollback`"
        )
    if report.unmanaged:
        return (
            f"serving: nothing of kctl's; something else listens on port {report.unmanaged[0].port}"
        )
    return "serving: nothing"


def _lock_line(lock: LockInfo | None) -> list[str]:
    if lock is None:
        return []
    if lock.stale:
        return [
            f"lock: free; kctl pid {lock.pid} died holding it (`{lock.command}` "
            f"since {lock.started_at}), so that run did not finish"
        ]
    return [f"lock: held by pid {lock.pid} on {lock.host} for `{lock.command}`"]


def status_text(report: StatusReport) -> str:
    """``kctl status``: what serves and its health, the lock, the last gate, problems."""
    lines = [_serving_line(report)]
    if report.degraded:
        lines.append(report.degraded)
    if report.serving and report.serving.sglang_version:
        lines.append(f"sglang: {report.serving.sglang_version} (as the server reported it)")
    lines.append(f"health: {report.health}")
    lines.append(f"state: {report.state_dir}")
    known = report.known_good
    lines.append(
        f"known-good: {known.id}  profile {known.profile}" if known else "known-good: none"
    )
    lines += _lock_line(report.lock)
    gate = report.last_gate
    if gate:
        why = f": {gate.reason}" if gate.reason else ""
        lines += ["", f"last gate: {gate.deployment} ({gate.profile}): {gate.verdict or '-'}{why}"]
        if gate.timings:
            lines.append(_timings(gate.timings))
        if report.last_gate_table:
            lines.append(report.last_gate_table)
    if report.report:
        lines += ["", f"report: {report.report.path} (deployment {report.report.deployment})"]
    lines += [f"! {server.note}" for server in report.unmanaged]
    lines += [f"! {problem}" for problem in report.problems]
    return "\n".join(lines)


#: what a record of each kind is, for the notes column of ``kctl history``
_KIND_NOTES = {"rollback": "rollback to {parent}", "baseline": "known-good baseline"}
#: how a deploy ended, where its status alone does not say what serves after it
_STATUS_NOTES = {
    "rejected": "candidate rejected, baseline restored",
    "reverted": "reverted to the baseline",
    "degraded": "revert failed: DEGRADED",
    "aborted": "revert aborted: DEGRADED",
    "interrupted": "kctl interrupted",
}
_NOTE_REASON_CHARS = 80


def _history_notes(row: Record) -> str:
    notes = []
    if row.serving:
        notes.append("SERVING NOW")
    kind_note = _KIND_NOTES.get(row.kind)
    if kind_note:
        notes.append(kind_note.format(parent=row.parent_id or "?"))
    elif row.status in _STATUS_NOTES:
        notes.append(_STATUS_NOTES[row.status])
    if row.overrides:
        notes.append(" ".join(f"--set {o}" for o in row.overrides))
    reason = " ".join((row.reason or "").split())
    if reason:
        cut = len(reason) > _NOTE_REASON_CHARS
        notes.append(reason[: _NOTE_REASON_CHARS - 3] + "..." if cut else reason)
    return "; ".join(notes)


def history_text(rows: Sequence[Record]) -> str:
    """``kctl history`` as plain text; see :func:`history_table`."""
    return to_text(history_table(rows)) if rows else "no deployments yet"


def history_table(rows: Sequence[Record]) -> Table:
    """One line per record, newest first. The notes say what each record is (a rollback
    and its target, the known-good baseline), how a deploy ended, why, and which record
    serves now."""
    t = table(
        ("id", "left"),
        ("kind", "left"),
        ("profile", "left"),
        ("status", "left"),
        ("verdict", "left"),
        ("sglang", "left"),
        ("started", "left"),
        ("notes", "left"),
    )
    for r in rows:
        t.add_row(
            cell(r.id, "bold" if r.serving else ""),
            cell(r.kind),
            cell(r.profile),
            cell(r.status),
            verdict_cell(r.verdict),
            cell(r.sglang_version or "-"),
            cell(r.started_at),
            cell(_history_notes(r)),
        )
    return t


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "duration unknown until the baseline has been measured"
    return f"about {seconds:.0f} s (from the baseline's stored measurement)"


def _check_line(check: DriftCheckCost | None) -> list[str]:
    """The drift check's cost, when the plan has one."""
    if check is None:
        return []
    about = "" if check.estimated_s is None else f"about {check.estimated_s:.0f} s, "
    return [
        f"baseline drift check: {check.requests} requests on the running baseline, "
        f"{about}at most {check.bound_s:g} s at real-time scale; if it drifted, the "
        f"baseline is measured again ({check.measure_requests} requests)"
    ]


def _overrides_line(overrides: list[str]) -> list[str]:
    """The ``--set`` items in the profile a plan shows."""
    if not overrides:
        return []
    return ["overrides (profile and baseline): " + " ".join(f"--set {o}" for o in overrides)]


def _steps(plan: PlanResult | FleetPlan, changed: str) -> list[str]:
    return [
        "preconditions: " + ", ".join(plan.preconditions),
        "steps:",
        *(f"  {i + 1}. {s}" for i, s in enumerate(plan.steps)),
        f"on failure after the {changed} changed:",
        *(f"  {i + 1}. {s}" for i, s in enumerate(plan.revert)),
    ]


def plan_text(plan: PlanResult) -> str:
    """``kctl plan PROFILE``: everything a deploy on this host would do."""
    from kctl.launch import describe_release

    launch, gate = plan.launch, plan.gate
    lines = [
        f"profile {plan.profile['name']} (hash {plan.profile_hash[:12]})",
        *_overrides_line(plan.profile["overrides"]),
        f"runtime: {plan.runtime}" + (" (simulated)" if plan.simulate else ""),
        f"baseline: {plan.baseline or 'none (this profile is a baseline)'}",
        describe_release(plan.sglang.model_dump()),
        *(f"  warning: {w}" for w in plan.warnings),
        "launch: " + " ".join(launch.argv),
        "env: " + " ".join(f"{k}={v}" for k, v in launch.env.items()),
        *(
            [f"api key: {launch.api_key} (in a --config file, not the argv)"]
            if launch.api_key
            else []
        ),
        f"gate: {gate.requests} requests over contexts {gate.contexts}, "
        + _duration(gate.estimated_duration_s),
        *_check_line(gate.baseline_check),
        *_steps(plan, "host"),
    ]
    if plan.image is not None:
        lines += [
            "",
            "Dockerfile:",
            plan.image.get("dockerfile", ""),
            "run spec:",
            json.dumps(plan.run_spec, indent=2, default=str),
        ]
    return "\n".join(lines)


def plan_fleet_text(plan: FleetPlan) -> str:
    """``kctl plan PROFILE --fleet FLEET``: the rollout a deploy would run on the fleet."""
    from kctl.launch import describe_release

    lines = [
        f"fleet {plan.fleet} ({plan.source}): {plan.replicas} replicas on "
        f"{plan.orchestrator}, at least {plan.min_healthy} serving at every step",
        f"profile {plan.profile['name']} (hash {plan.profile_hash[:12]}), "
        f"image {plan.image or 'none (simulated replicas run locally)'}",
        f"serving: {plan.serving_profile} ({plan.serving})" if plan.serving else "serving: nothing",
        *(
            ["  it serves this very profile: `kctl deploy` does nothing without --force"]
            if plan.already_serving
            else []
        ),
        describe_release(plan.sglang.model_dump()),
        *(f"  warning: {w}" for w in plan.warnings),
        *_steps(plan, "fleet"),
        *([f"placement: {plan.placement_note}"] if plan.placement_note else []),
        "",
        "service spec:",
        json.dumps(plan.service_spec, indent=2, default=str),
    ]
    return "\n".join(lines)


def fleet_status_text(report: FleetStatus) -> str:
    """``kctl status --fleet``: each replica's node, port, profile, image, health, gate."""
    serving = report.serving
    lines = [
        f"fleet {report.fleet} ({report.driver}): "
        + (
            f"serving {serving['profile_name']} ({serving['id']})"
            if serving
            else "nothing recorded serving"
        )
    ]
    t = table(("slot", "left"), ("node", "left"), ("port", "right"), ("profile", "left"),
              ("image", "left"), ("health", "left"), ("last gate", "left"))  # fmt: skip
    for r in report.replicas:
        health = "healthy" if r.healthy else r.state + (f" ({r.error})" if r.error else "")
        node = r.node + ("" if r.node_state == "ready" else f" [{r.node_state}]")
        t.add_row(str(r.slot), node, str(r.port), f"{r.profile} {r.deployment}",
                  r.image, health, r.last_gate)  # fmt: skip
    lines.append(to_text(t).rstrip())
    if len(report.nodes) > 1 or any(n.state != "ready" for n in report.nodes):
        lines.append("nodes: " + ", ".join(
            f"{n.hostname} ({n.state}" + ("" if n.availability == "active" else f", {n.availability}")
            + (f", engine {n.engine})" if n.engine else ")")
            for n in report.nodes
        ))  # fmt: skip
    if report.canary:
        lines.append(f"canary: {report.canary.profile} ({report.canary.deployment})")
    if report.rollout_running:
        lines.append("a rollout is running now")
    lines += [f"attention: {p}" for p in report.problems]
    if report.hint:
        lines.append(f"  next: {report.hint}")
    return "\n".join(lines)


def fleet_stop_text(result: FleetStopResult, fleet_path: str) -> str:
    """``kctl stop --fleet``: the services removed, each replica stopped."""
    if not result.removed:
        return f"fleet {result.fleet}: nothing ran; nothing to stop"
    lines = [
        f"fleet {result.fleet}: stopped {len(result.stopped)} replica(s) "
        f"({', '.join(result.removed)} removed)"
    ]
    lines += [
        f"  {r.role} slot {r.slot} on {r.node}:{r.port} ({r.profile} {r.deployment})"
        for r in result.stopped
    ]
    if result.known_good:
        lines.append(
            f"the known-good {result.known_good} is kept: "
            f"`kctl rollback --fleet {fleet_path}` brings every replica back on it"
        )
    return "\n".join(lines)


def stop_text(result: StopResult) -> str:
    return f"stopped {len(result.stopped)} server(s)" + "".join(f"\n  {d}" for d in result.stopped)


def gc_text(result: GcResult) -> str:
    return f"removed {len(result.removed)} container(s)" + "".join(
        f"\n  {n}" for n in result.removed
    )


def report_text(result: ReportResult) -> str:
    """``kctl report``: the page written, and what it says is missing."""
    lines = [
        f"report: {result.path}",
        f"  deployment: {result.deployment_id} ({result.profile}, {result.status})",
    ]
    lines += [f"  missing: {m}" for m in result.missing]
    return "\n".join(lines)


def validate_text(results: Sequence[Validated]) -> str:
    """``kctl validate``: each valid file with its hash and warnings, each problem."""
    return "\n".join(
        "\n".join(
            [f"ok {r.path} ({(r.hash or '')[:12]})", *(f"  warning: {w}" for w in r.warnings)]
        )
        if r.ok
        else "\n".join(r.problems)
        for r in results
    )


def lock_text(info: LockInfo | None) -> str:
    """``kctl lock show``: the holder's record, field by field."""
    if info is None:
        return "lock is free"
    return "\n".join(f"{k}: {v}" for k, v in vars(info).items())
