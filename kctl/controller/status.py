"""Read-only commands: ``status``, ``history``, ``logs``. They never create state and never
import docker, torch or jinja2 on the local runtime's path."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kctl.errors import KctlError, ServerBadStatus, ServerUnreachable, UsageError

if TYPE_CHECKING:
    from kctl.controller.context import Context
    from kctl.store import Store


@dataclass
class StatusReport:
    state_dir: str
    serving: dict[str, Any] | None = None
    health: str = "unknown"
    known_good: dict[str, Any] | None = None
    last_gate: dict[str, Any] | None = None
    last_gate_table: str | None = None
    interrupted: list[dict[str, Any]] = field(default_factory=list)
    in_progress: dict[str, Any] | None = None
    degraded: str | None = None
    lock: dict[str, Any] | None = None
    unmanaged: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def needs_attention(self) -> bool:
        """True when a human (or `kctl rollback`) must act: exit code 4 for scripts."""
        return bool(self.degraded or self.interrupted or self.health == "down")

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "needs_attention": self.needs_attention}


def _dep_summary(dep: Any) -> dict[str, Any]:
    return {
        "id": dep.id,
        "profile": dep.profile_name,
        "profile_hash": dep.profile_hash,
        "kind": dep.kind,
        "status": dep.status,
        "verdict": dep.verdict,
        "reason": dep.reason,
        "started_at": dep.started_at,
        "ended_at": dep.ended_at,
    }


def probe_health(host: str, port: int, timeout_s: float = 3.0) -> str:
    """One GET /health, for display: 'healthy', 'unhealthy (HTTP 503)' or 'unreachable (...)'."""
    from kctl.sglang.client import SGLangClient

    try:
        SGLangClient(host, port).health(timeout_s)
    except ServerBadStatus as exc:
        return f"unhealthy (HTTP {exc.status})"
    except ServerUnreachable as exc:
        return f"unreachable ({exc.cause.split(':')[0]})"
    return "healthy"


def status(ctx: Context) -> StatusReport:
    from kctl.lock import DeployLock

    report = StatusReport(state_dir=str(ctx.state_dir))
    lock = DeployLock(ctx.state_dir).inspect()
    if lock is not None:
        report.lock = lock.to_dict() if hasattr(lock, "to_dict") else dict(lock.__dict__)
    if not (ctx.state_dir / "kctl.db").exists():
        report.problems.append("nothing deployed yet (no state in this state dir)")
        return report
    store = ctx.open_store(read_only=True)
    try:
        _transactions(report, store)
        _serving(ctx, report, store)
        known = store.last_known_good()
        if known is not None:
            report.known_good = _dep_summary(known)
        _last_gate(ctx, report, store)
        # the newest transaction (deploy or rollback) says whether the host was left DEGRADED
        latest = store.list_deployments(limit=1, kinds=("deploy", "rollback"))
        if latest and latest[0].status in ("degraded", "aborted"):
            report.degraded = (
                f"DEGRADED: {latest[0].id} ended {latest[0].status}: {latest[0].reason}. "
                "Next: `kctl rollback`"
            )
    finally:
        store.close()
    return report


def _transactions(report: StatusReport, store: Store) -> None:
    """Open journal transactions: the one running now (its kctl holds the lock), or
    interrupted ones a killed kctl left."""
    running_now = report.lock is not None and not report.lock.get("stale")
    for txn in store.open_transactions():
        last = txn.last_step
        step = {"step": last.step, "state": last.state, "intent": last.intent} if last else None
        if running_now:
            report.in_progress = {"id": txn.txn, "last_step": step}
            continue
        report.interrupted.append({"id": txn.txn, "last_step": step})
        where = f" at step {step['step']!r}" if step else ""
        report.problems.append(
            f"deployment {txn.txn} was interrupted{where} and not resolved; "
            "run `kctl rollback` (or deploy again) to reconcile"
        )


def _serving(ctx: Context, report: StatusReport, store: Store) -> None:
    """What the store says serves, checked against its process, and its health."""
    dep = store.serving()
    if dep is None:
        report.health = "nothing serving"
        return
    summary = _dep_summary(dep)
    report.serving = summary
    inst = dep.instance_obj()
    if inst is None:
        return
    try:
        state = _state(ctx, inst)
    except KctlError as exc:
        report.health = "unknown"
        report.problems.append(f"cannot check {dep.id}: {exc}")
        return
    summary["process"] = state.detail
    if state.running:
        host = (dep.profile or {}).get("server", {}).get("host", "127.0.0.1")
        report.health = probe_health(host, inst.port)
    else:
        report.health = "down"
        report.problems.append(
            f"the store says {dep.id} serves, but it is {state.detail}; "
            "run `kctl rollback` to restore the known-good baseline"
        )


def _last_gate(ctx: Context, report: StatusReport, store: Store) -> None:
    last_gate = store.last_gate_result()
    if last_gate is None:
        return
    gate_dep, data = last_gate
    report.last_gate = {
        "deployment": gate_dep.id,
        "profile": gate_dep.profile_name,
        "verdict": gate_dep.verdict,
        "reason": gate_dep.reason,
        "timings": gate_dep.timings,
    }
    table = _table_from(data)
    note = ctx.backend.note(None)
    report.last_gate_table = f"{note}\n{table}" if table and note else table


def _state(ctx: Context, inst: Any) -> Any:
    """The instance's state; for docker read from the engine socket without the SDK."""
    if inst.runtime == "docker":
        from kctl.runtime.docker.lite import inspect_state

        light = inspect_state(inst.ref)
        if light is not None:
            return light
    return ctx.runtime(inst.runtime).state(inst)


def _table_from(data: dict[str, Any]) -> str | None:
    try:
        from kctl.gate import GateResult, render_table

        return render_table(GateResult.from_dict(data).verdict)
    except Exception:  # noqa: BLE001 - an old or partial record still shows the rest
        return None


def history(ctx: Context, limit: int = 20) -> list[dict[str, Any]]:
    if not (ctx.state_dir / "kctl.db").exists():
        return []
    store = ctx.open_store(read_only=True)
    try:
        return [_dep_summary(d) for d in store.list_deployments(limit=limit)]
    finally:
        store.close()


def logs(ctx: Context, deployment_id: str | None, tail: int | None) -> str:
    if not (ctx.state_dir / "kctl.db").exists():
        raise UsageError("nothing deployed yet: no logs to show")
    store = ctx.open_store(read_only=True)
    try:
        dep = store.get_deployment(deployment_id) if deployment_id else store.serving()
        if dep is None:
            raise UsageError("nothing serves now", hint="name a deployment: `kctl logs ID`")
        inst = dep.instance_obj()
        if inst is None:
            raise UsageError(f"{dep.id} never started a server, so it has no logs")
        return ctx.runtime(inst.runtime).logs(inst, tail=tail)
    finally:
        store.close()
