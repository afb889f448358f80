"""Read-only commands: ``status``, ``history``, ``logs``. They never create state and never
import docker, torch or jinja2 on the local runtime's path."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, computed_field

from kctl.backend import noted
from kctl.errors import KctlError, ServerBadStatus, ServerUnreachable, UsageError
from kctl.lock.holder import LockInfo
from kctl.store.records import DeploymentKind, DeploymentStatus

if TYPE_CHECKING:
    from kctl.controller.context import Context
    from kctl.profile.model import Profile
    from kctl.store import Store


class Record(BaseModel):
    """A deployment record, as ``history`` lists them."""

    id: str
    profile: str
    profile_hash: str
    kind: DeploymentKind
    status: DeploymentStatus
    verdict: str | None = Field(
        description="PASS, FAIL, INCONCLUSIVE, UNHEALTHY, INTERRUPTED, ERROR, BASELINE"
    )
    reason: str | None
    started_at: str
    ended_at: str | None
    parent_id: str | None = Field(
        description="the deployment a deploy replaced, or the one a rollback restored"
    )
    serving: bool = Field(description="this record serves now")
    sglang_version: str | None = Field(
        description="the SGLang version the server reported in /server_info after health; "
        "null: never read"
    )
    overrides: list[str] = Field(
        description="the --set FIELD=VALUE items the record's profile was loaded with, as "
        "given; [] when none"
    )


class ServingRecord(Record):
    """The serving record in ``status``: a record, with what serves it."""

    server: dict[str, Any] | None = Field(
        default=None,
        description="the serving record's /server_info as recorded after health (effective "
        "server arguments, scheduler figures, version)",
    )
    process: str | None = Field(
        default=None, description="what the runtime says of its process; null: not checked"
    )
    ref: str | None = Field(default=None, description="the runtime's reference of its process")


class LastGate(BaseModel):
    """The last gate kctl ran: its deployment, verdict and timings."""

    deployment: str
    profile: str
    verdict: str | None
    reason: str | None
    timings: dict[str, float] = Field(description="the deploy's wall-clock timings")


class Figure(BaseModel):
    """One of SGLang's figures for the baseline and the candidate (null: not measured)."""

    baseline: float | None
    candidate: float | None


class GateRow(BaseModel):
    """One bucket of the gate table."""

    context: int = Field(description="prompt tokens")
    concurrency: int
    baseline: float | None = Field(description="median decode tok/s")
    candidate: float | None = Field(description="median decode tok/s; null when skipped")
    ratio: float | None
    interval: tuple[float | None, float | None] | None = Field(description="[lo, hi] of the ratio")
    threshold: float | None
    verdict: Literal["PASS", "FAIL", "UNCLEAR", "INFO", "SKIPPED"]
    completed: int
    planned: int
    ttft_s: Figure | None = Field(default=None, description="median time to first token")
    itl_p50_s: Figure | None = None
    itl_p99_s: Figure | None = None
    accept_length: Figure | None = Field(
        default=None, description="mean speculative acceptance length"
    )


class OpenTransaction(BaseModel):
    """A journal transaction still open, and its last step."""

    id: str
    last_step: dict[str, Any] | None = Field(description="step, state and intent; null: none")


class Unmanaged(BaseModel):
    """A server on the host that the store does not say serves."""

    deployment: str | None = Field(
        description="kctl's deployment id; null: a server kctl did not start"
    )
    profile: str | None = Field(default=None, description="the profile of kctl's deployment")
    port: int
    process: str | None
    health: str | None = Field(default=None, description="kctl's server only: its /health")
    note: str


class ReportPage(BaseModel):
    """The newest deploy's HTML report."""

    deployment: str
    path: str


class StatusReport(BaseModel):
    """The result of ``status``: exit 4 (and ``needs_attention``) when the host needs a
    human or ``kctl rollback``."""

    state_dir: str
    serving: ServingRecord | None = None
    health: str = Field(
        default="unknown",
        description="healthy, unhealthy (HTTP n), unreachable (...), down, nothing serving, "
        "unknown",
    )
    known_good: Record | None = None
    last_gate: LastGate | None = None
    last_gate_table: str | None = Field(default=None, description="the table as text, for humans")
    interrupted: list[OpenTransaction] = Field(
        default_factory=list, description="transactions a killed kctl left open"
    )
    in_progress: OpenTransaction | None = Field(
        default=None, description="the transaction the lock holder runs now"
    )
    degraded: str | None = None
    lock: LockInfo | None = Field(
        default=None,
        description="the deploy lock's holder (pid, host, command, started_at, stale ...)",
    )
    unmanaged: list[Unmanaged] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    last_gate_rows: list[GateRow] | None = Field(
        default=None, description="the last gate table as data, one row per bucket, in table order"
    )
    report: ReportPage | None = Field(
        default=None, description="the newest deploy's HTML report, when the file is there"
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def needs_attention(self) -> bool:
        """True when a human (or `kctl rollback`) must act: exit code 4 for scripts. A
        serving process that runs but does not answer (hung, or not listening) counts,
        unless a command running now is bringing it up."""
        silent = self.health.startswith("unreachable") and self.in_progress is None
        return bool(self.degraded or self.interrupted or self.health == "down" or silent)


def _dep_summary(dep: Any, serving_id: str | None = None) -> dict[str, Any]:
    """A record for ``status`` and ``history``. ``parent_id``: the deployment a deploy
    replaced, or the one a rollback restored; ``serving``: whether it serves now (the
    store's pointer)."""
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
        "parent_id": dep.parent_id,
        "serving": serving_id is not None and dep.id == serving_id,
        "sglang_version": dep.sglang_version,
        #: the ``--set FIELD=VALUE`` items the deployment's profile was loaded with
        "overrides": list((dep.profile or {}).get("overrides") or []),
    }


def record(dep: Any, serving_id: str | None = None) -> Record:
    """The record of ``dep`` for ``history`` (see :func:`_dep_summary`)."""
    return Record.model_validate(_dep_summary(dep, serving_id))


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
        report.lock = lock
    if not (ctx.state_dir / "kctl.db").exists():
        report.problems.append("nothing deployed yet (no state in this state dir)")
        return report
    store = ctx.open_store(read_only=True)
    try:
        _transactions(report, store)
        _serving(ctx, report, store)
        known = store.last_known_good()
        if known is not None:
            report.known_good = record(known, report.serving.id if report.serving else None)
        _last_gate(ctx, report, store)
        report.report = _last_report(ctx, store)
        _host(ctx, report, store)
        ours = [u for u in report.unmanaged if u.deployment]
        if report.serving is None and ours:
            # the store names nothing, but a server of kctl's answers: say so, not "nothing"
            report.health = f"{ours[0].health} ({ours[0].deployment}, not verified)"
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
    running_now = report.lock is not None and not report.lock.stale
    for txn in store.open_transactions():
        last = txn.last_step
        step = {"step": last.step, "state": last.state, "intent": last.intent} if last else None
        if running_now:
            report.in_progress = OpenTransaction(id=txn.txn, last_step=step)
            continue
        report.interrupted.append(OpenTransaction(id=txn.txn, last_step=step))
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
    summary = ServingRecord.model_validate({**_dep_summary(dep, dep.id), "server": dep.server})
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
    summary.process = state.detail
    summary.ref = inst.ref
    if state.running:
        host = (dep.profile or {}).get("server", {}).get("host", "127.0.0.1")
        report.health = probe_health(host, inst.port)
        if report.health.startswith("unreachable") and report.in_progress is None:
            report.problems.append(
                f"{dep.id}'s server ({state.detail}) runs but does not answer /health on "
                f"port {inst.port}: it is hung (stopped or stuck) or not listening; "
                "`kctl rollback` restarts the known-good baseline and verifies it"
            )
    else:
        report.health = "down"
        report.problems.append(
            f"the store says {dep.id} serves, but it is {state.detail}; "
            "run `kctl rollback` to restore the known-good baseline"
        )


#: how many recent records say which runtimes and ports to look at
_HOST_LOOKBACK = 20


def _host(ctx: Context, report: StatusReport, store: Store) -> None:
    """What really runs, against what the store says: every server kctl's runtimes own
    that is not the serving one, and anything else that listens on a profile's port."""
    from kctl.runtime.base import port_listening

    recent = store.list_deployments(limit=_HOST_LOOKBACK)
    serving_ref = report.serving.ref if report.serving else None
    open_ids = {t.id for t in report.interrupted}
    owned_ports: set[int] = set()
    for inst in _owned(ctx, recent, report):
        owned_ports.add(inst.port)
        # a command running now (it holds the lock) starts and stops servers of its own
        if inst.ref == serving_ref or report.in_progress is not None:
            continue
        why = (
            "its transaction was interrupted"
            if inst.deployment_id in open_ids
            else "the store does not record it serving"
        )
        health = probe_health(_host_of(recent, inst.deployment_id), inst.port)
        report.unmanaged.append(
            Unmanaged(
                deployment=inst.deployment_id,
                profile=_profile_name(recent, inst.deployment_id),
                port=inst.port,
                process=inst.ref,
                health=health,
                note=f"kctl's server of {inst.deployment_id} runs on port {inst.port} "
                f"({health}), but {why}; `kctl rollback` reconciles it",
            )
        )
    for host, port in _ports(recent):
        if port in owned_ports or not port_listening(port, host):
            continue
        owned_ports.add(port)
        report.unmanaged.append(
            Unmanaged(
                deployment=None,
                port=port,
                process=None,
                note=f"something kctl does not own listens on {host}:{port}; "
                "stop it before deploying there",
            )
        )


def _host_of(recent: list[Any], deployment_id: str) -> str:
    """The host to probe a recent deployment's server on (127.0.0.1 for one not recent)."""
    from kctl.launch import connect_host

    for dep in recent:
        if dep.id == deployment_id:
            server = (dep.profile or {}).get("server") or {}
            return connect_host(str(server.get("host") or "127.0.0.1"))
    return "127.0.0.1"


def _profile_name(recent: list[Any], deployment_id: str) -> str | None:
    return next((str(d.profile_name) for d in recent if d.id == deployment_id), None)


def _owned(ctx: Context, recent: list[Any], report: StatusReport) -> list[Any]:
    """The running servers of this state dir on every runtime the recent records used."""
    kinds = sorted({ctx.backend.runtime_kind(_kind_of(d)) for d in recent})
    found: list[Any] = []
    for kind in kinds:
        try:
            found += _running(ctx, kind)
        except Exception as exc:  # noqa: BLE001 - status shows what it can
            report.problems.append(f"cannot list the {kind} runtime's servers: {exc}")
    return found


def _running(ctx: Context, kind: str) -> list[Any]:
    """A runtime's running servers."""
    return ctx.runtime(kind).running()


def _kind_of(dep: Any) -> str:
    kind = dep.runtime or ((dep.profile or {}).get("runtime") or {}).get("kind")
    return str(kind or "local")


def _ports(recent: list[Any]) -> list[tuple[str, int]]:
    """(probe host, port) of the recent records' profiles, newest first, each port once."""
    from kctl.launch import connect_host

    seen: dict[int, str] = {}
    for dep in recent:
        server = (dep.profile or {}).get("server") or {}
        port = server.get("port")
        if isinstance(port, int) and port not in seen:
            seen[port] = connect_host(str(server.get("host") or "127.0.0.1"))
    return [(host, port) for port, host in seen.items()]


def _last_gate(ctx: Context, report: StatusReport, store: Store) -> None:
    last_gate = store.last_gate_result()
    if last_gate is None:
        return
    gate_dep, data = last_gate
    report.last_gate = LastGate(
        deployment=gate_dep.id,
        profile=gate_dep.profile_name,
        verdict=gate_dep.verdict,
        reason=gate_dep.reason,
        timings=gate_dep.timings or {},
    )
    table, rows = _table_from(data)
    if table is not None:
        report.last_gate_table = noted(ctx.backend, _profile_or_none(gate_dep), table)
    report.last_gate_rows = None if rows is None else [GateRow.model_validate(r) for r in rows]


def _last_report(ctx: Context, store: Store) -> ReportPage | None:
    """The report ``kctl deploy`` wrote for the newest deploy, when the file is there."""
    from kctl.report import report_path

    latest = store.list_deployments(limit=1, kinds=("deploy",))
    if not latest:
        return None
    path = report_path(ctx.state_dir, latest[0].id)
    return ReportPage(deployment=latest[0].id, path=str(path)) if path.is_file() else None


def _profile_or_none(deployment: Any) -> Profile | None:
    """The profile a deployment ran, None when its stored record cannot be read back (the
    table is then shown without what the profile would add to its note)."""
    from kctl.controller.common import profile_of

    try:
        return profile_of(deployment)
    except (KctlError, KeyError, TypeError, ValueError):
        return None


def _state(ctx: Context, inst: Any) -> Any:
    """The instance's state, as its runtime reads it."""
    return ctx.runtime(inst.runtime).state(inst)


def _table_from(data: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]] | None]:
    """The stored gate result's table, as text and as rows of data."""
    try:
        from kctl.gate import GateResult, render_table
        from kctl.gate.report import gate_rows

        verdict = GateResult.from_dict(data).verdict
        return render_table(verdict), gate_rows(verdict)
    except Exception:  # noqa: BLE001 - an old or partial record still shows the rest
        return None, None


def history(ctx: Context, limit: int = 20) -> list[Record]:
    if not (ctx.state_dir / "kctl.db").exists():
        return []
    store = ctx.open_store(read_only=True)
    try:
        serving = store.serving()
        serving_id = serving.id if serving is not None else None
        return [record(d, serving_id) for d in store.list_deployments(limit=limit)]
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
