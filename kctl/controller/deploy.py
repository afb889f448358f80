"""``kctl deploy``: the transaction at the heart of kctl.

    lock → reconcile → preflight → build → plan → execute the plan's steps:
    (measure baseline) → stop current → start candidate → health → gate → promote,
    or, on a failure after the host changed, the plan's revert → verify

The plan is built by :func:`kctl.controller.planner.plan_deploy` (what ``kctl plan``
prints) and run by :class:`kctl.controller.executor.Executor`, which journals each step.
Every failure after the first host change ends in one of two states: the known-good
baseline serving again and verified (CandidateRejected, exit 3), or DEGRADED naming the
next command (Degraded, exit 4). Failures before any change raise PreconditionFailed
(exit 5) and leave the host as it was.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from pydantic import BaseModel, Field

from kctl import secrets
from kctl.controller import common
from kctl.controller.executor import Executor, RevertFailed
from kctl.controller.host import HostChange, changing_host
from kctl.controller.maintenance import prune
from kctl.controller.planner import Observed, Serving, plan_deploy
from kctl.controller.recover import revert_target, serving_now
from kctl.controller.report import deploy_report
from kctl.controller.runstate import RunState
from kctl.errors import (
    CandidateRejected,
    Degraded,
    GateError,
    GateRejected,
    HealthFailed,
    Interrupted,
    KctlError,
    PreconditionFailed,
    PreflightFailed,
    RevertAborted,
    ServerExited,
)
from kctl.profile.compare import gate_mismatches

if TYPE_CHECKING:
    from kctl.controller.context import Context
    from kctl.controller.steps import Plan
    from kctl.gate.drift import DriftCheck
    from kctl.profile.model import Profile
    from kctl.runtime.base import Instance, Runtime
    from kctl.store import Store
    from kctl.store.records import Deployment


class DriftRowResult(BaseModel):
    """One context of the drift check."""

    context: int
    stored: float = Field(description="the stored median decode tok/s")
    now: float | None = Field(
        description="the check's median decode tok/s; null when none completed"
    )
    ratio: float | None = Field(description="now / stored")
    lo: float | None
    hi: float | None = Field(description="lo, hi: the ratio's 90% bootstrap interval")
    completed: int
    sent: int = Field(description="the check's requests planned at this context")


class BaselineCheckResult(BaseModel):
    """The drift check of the stored baseline measurement against the running baseline
    (docs/profiles.md, "How the gate judges"). steady: the stored measurement was reused;
    else the baseline was measured again before it stopped."""

    rows: list[DriftRowResult]
    steady: bool
    reason: str = Field(
        description="steady / drifted beyond the noise / requests failed / out of time, with "
        "each context's figures"
    )
    elapsed_s: float = Field(description="seconds at real-time scale")


class DeployResult(BaseModel):
    """The result of ``deploy``, also on exit 3 (rejected: the known-good baseline restored)."""

    deployment_id: str
    profile: str
    profile_hash: str
    outcome: Literal["promoted", "established", "rejected", "already-serving"] = Field(
        description="established: a baseline profile deployed and verified"
    )
    reason: str
    serving: str | None = Field(description="the deployment serving afterwards")
    baseline: str | None = Field(default=None, description="the baseline profile gated against")
    gate: dict[str, Any] | None = Field(
        default=None, description="the stored gate result: candidate measurement and verdict"
    )
    table: str | None = Field(default=None, description="the gate table as text, for humans")
    timings: dict[str, float] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    report: str | None = Field(
        default=None,
        description="the HTML report written next to the state "
        "(`<state>/reports/<id>.html`); null when it could not be written",
    )
    baseline_check: BaselineCheckResult | None = Field(
        default=None,
        description="the drift check of the stored baseline measurement; null when none ran",
    )


def _checked(drift: DriftCheck | None) -> BaselineCheckResult | None:
    return None if drift is None else BaselineCheckResult.model_validate(drift.to_dict())


def observe(
    ctx: Context, store: Store, runtime: Runtime, candidate: Profile, baseline: Profile | None
) -> tuple[Observed, tuple[Deployment, Instance] | None]:
    """What the plan of a deploy depends on: what serves (checked against the runtime),
    whether the baseline has a known-good record and a fresh stored measurement."""
    serving = serving_now(store, runtime)
    view = None
    if serving is not None:
        dep = serving[0]
        view = Serving(deployment=dep.id, profile=dep.profile_name, profile_hash=dep.profile_hash)
    known = measured = False
    if baseline is not None:
        known = store.known_good(baseline.content_hash) is not None
        fp = common.fingerprint(ctx, candidate, baseline)
        max_age = candidate.gate.policy.baseline_max_age_s
        hit = store.latest_measurement(baseline.content_hash, fp, max_age, now=ctx.clock())
        measured = hit is not None
    return Observed(view, known, measured), serving


def deploy(ctx: Context, profile_path: str, *, force: bool = False) -> DeployResult:
    """Deploy a profile; see the module docstring for the guarantees."""
    candidate, baseline = common.load_pair(profile_path, ctx.overrides)
    runtime = ctx.runtime(ctx.runtime_kind(candidate))
    with changing_host(ctx, f"kctl deploy {profile_path}") as host:
        host.reconcile(runtime, resolver="deploy")
        runtime.check_available()
        seen, serving = observe(ctx, host.store, runtime, candidate, baseline)
        if serving and serving[0].profile_hash == candidate.content_hash and not force:
            dep = serving[0]
            # ALREADY-SERVING means healthy: checked now, not taken from the record
            common.wait_healthy(ctx, runtime, serving[1], candidate)
            return DeployResult(
                deployment_id=dep.id,
                profile=candidate.name,
                profile_hash=candidate.content_hash,
                outcome="already-serving",
                reason=f"{dep.id} already serves this profile (hash {candidate.content_hash[:12]}), "
                "health verified; use --force to deploy it again",
                serving=dep.id,
                warnings=host.warnings,
            )
        if baseline is not None:
            for line in gate_mismatches(candidate, baseline, "its baseline"):
                host.warn(line)
        try:
            target = revert_target(host.store, baseline, serving)
            if target is not None:
                common.check_startable(
                    *target,
                    why="a failed deploy reverts to it",
                    hint="deploy a baseline that starts on its SGLang release first, or "
                    "`kctl rollback --to ID` to an earlier one that does (`kctl history`)",
                )
            _preflight(runtime, candidate, serving)
            # every secret a start may need is read now, before anything stops
            for needed in (candidate, baseline, target[1] if target else None):
                if needed is not None:
                    secrets.check_available(needed)
        except PreflightFailed as exc:
            _record_refusal(host.store, runtime, candidate, serving, exc)
            raise
        return _Deploy(host, runtime, candidate, baseline).run(
            plan_deploy(candidate, baseline, seen), serving
        )


def _record_refusal(
    store: Store,
    runtime: Runtime,
    candidate: Profile,
    serving: tuple[Deployment, Instance] | None,
    exc: PreflightFailed,
) -> None:
    """A deploy refused before any change is kept in the history (status failed), so
    ``kctl status`` knows the port it was refused on and ``history`` says why."""
    dep = store.new_deployment(
        kind="deploy",
        profile=candidate,
        runtime=runtime.name,
        parent_id=serving[0].id if serving else None,
    )
    store.update_deployment(dep.id, status="failed", reason=exc.message, exit_code=5)


def _preflight(
    runtime: Runtime, candidate: Profile, serving: tuple[Deployment, Instance] | None
) -> None:
    port = candidate.server.port
    holder = runtime.port_holder(port)
    if holder is not None and (serving is None or serving[1].port not in (port, 0)):
        raise PreflightFailed(
            f"port {port} is taken by {holder}, which kctl does not own",
            hint="stop that process, or serve on a free port: add --set server.port=PORT "
            "(it applies to the baseline too), or set server.port in the profiles",
        )
    runtime.preflight(candidate, serving[1] if serving is not None else None)


class _Deploy:
    """One deploy's execution: the record, the executor, and what a failure becomes."""

    def __init__(
        self, host: HostChange, runtime: Runtime, candidate: Profile, baseline: Profile | None
    ) -> None:
        self.host = host
        self.ctx = host.ctx
        self.store = host.store
        self.runtime = runtime
        self.candidate = candidate
        self.baseline = baseline

    def run(self, plan: Plan, serving: tuple[Deployment, Instance] | None) -> DeployResult:
        ctx, cand = self.ctx, self.candidate
        images: dict[str, str | None] = {}
        build_s = ctx.monotonic()
        images[cand.content_hash] = common.image_for(ctx, cand)
        if self.baseline is not None:
            images[self.baseline.content_hash] = common.image_for(ctx, self.baseline)
        build_s = round(ctx.monotonic() - build_s, 3)
        # each image's own SGLang parses the argv it will run, before anything is stopped
        common.check_image(ctx, cand, images[cand.content_hash])
        if self.baseline is not None:
            common.check_image(ctx, self.baseline, images[self.baseline.content_hash])
        dep = self.store.new_deployment(
            kind="deploy",
            profile=cand,
            runtime=self.runtime.name,
            parent_id=serving[0].id if serving else None,
        )
        txn = self.host.transaction(dep.id)
        state = RunState(
            txn_id=dep.id,
            candidate=cand,
            baseline=self.baseline,
            original=serving,
            serving=serving,
            images=images,
            warnings=list(self.host.warnings),
        )
        self.ex = Executor(ctx, self.store, self.runtime, txn, state)
        self.ex.timer.marks["build"] = build_s
        ctx.reporter.event(f"deployment {dep.id}: {cand.name} ({cand.source})")
        with self.ex.guard:
            try:
                self.ex.run_steps(plan.steps)
            except BaseException as exc:  # noqa: BLE001 - every failure path must revert
                if isinstance(exc, SystemExit):
                    raise
                return self._fail(plan, exc)
        return self._result()

    def _result(self) -> DeployResult:
        st, cand = self.ex.state, self.candidate
        timings = self.ex.timer.total()
        prune(self.ctx, self.store, self.runtime, cand.runtime.retain)
        if self.baseline is None:
            return DeployResult(
                deployment_id=st.txn_id,
                profile=cand.name,
                profile_hash=cand.content_hash,
                outcome="established",
                reason=st.reason,
                serving=st.txn_id,
                timings=timings,
                warnings=st.warnings,
                gate={"measurement": st.measurement.to_dict()},
                report=deploy_report(self.ctx, self.store, st.txn_id),
            )
        return DeployResult(
            deployment_id=st.txn_id,
            profile=cand.name,
            profile_hash=cand.content_hash,
            outcome="promoted",
            reason=st.reason,
            serving=st.txn_id,
            baseline=self.baseline.name,
            gate=st.gate,
            table=st.table,
            timings=timings,
            warnings=st.warnings,
            report=deploy_report(self.ctx, self.store, st.txn_id),
            baseline_check=_checked(st.drift),
        )

    # -- failure paths -------------------------------------------------------------------

    def _fail(self, plan: Plan, exc: BaseException) -> NoReturn:
        st = self.ex.state
        if st.changed:
            # from here on a signal is a signal during the revert (tolerated once when a
            # failure started it), also while the failure is still being described
            self.ex.begin_revert(exc)
        reason, gate, table = _describe(exc)
        if st.failed_step is not None and st.failed_step.about_baseline and self.baseline:
            reason = (
                f"baseline {self.baseline.name} could not be brought up to measure it: {reason}"
            )
        if not st.changed:
            self._failed_unchanged(exc, reason)
        # the reason in full is the final error line; here only what happened
        self.ctx.reporter.warn(f"{reason.partition(': ')[0]}; reverting")
        try:
            self.ex.revert(plan, exc)
        except RevertAborted as abort:
            self._record_degraded(f"{reason}; then {abort}", status="aborted")
            raise Degraded(
                f"{reason}; revert aborted by a second {abort.signal_name}: the "
                "known-good baseline is NOT verified serving (DEGRADED)",
                hint="run `kctl rollback` to restore the known-good baseline",
            ) from exc
        except RevertFailed as failed:
            self._record_degraded(f"{reason}; revert failed: {failed.cause}", status="degraded")
            raise Degraded(
                f"DEGRADED: the candidate failed ({reason}) and restoring the known-good "
                f"baseline failed too: {failed.cause}",
                hint="inspect `kctl logs`, fix the host, then run `kctl rollback`",
            ) from exc
        self._rejected(exc, reason, gate, table)

    def _failed_unchanged(self, exc: BaseException, reason: str) -> NoReturn:
        st = self.ex.state
        self.store.update_deployment(
            st.txn_id, status="failed", reason=reason, exit_code=5, timings=self.ex.timer.total()
        )
        self.store.end_transaction(st.txn_id, "failed before any change")
        if isinstance(exc, Interrupted):
            raise exc
        if isinstance(exc, KctlError) and not isinstance(exc, (HealthFailed, GateError)):
            raise exc
        raise PreconditionFailed(f"{reason} (nothing was changed)") from exc

    def _rejected(
        self, exc: BaseException, reason: str, gate: dict[str, Any] | None, table: str | None
    ) -> NoReturn:
        st = self.ex.state
        restored = st.target[0].id if st.target is not None else None
        timings = self.ex.timer.total()
        self.store.update_deployment(
            st.txn_id,
            status="rejected",
            verdict=_verdict_of(exc),
            reason=reason,
            exit_code=3,
            timings=timings,
        )
        self.store.end_transaction(st.txn_id, "reverted")
        prune(self.ctx, self.store, self.runtime, self.candidate.runtime.retain, st.txn_id)
        result = DeployResult(
            deployment_id=st.txn_id,
            profile=self.candidate.name,
            profile_hash=self.candidate.content_hash,
            outcome="rejected",
            reason=reason,
            serving=restored,
            baseline=self.baseline.name if self.baseline else None,
            gate=gate,
            table=table,
            timings=timings,
            warnings=st.warnings,
            report=deploy_report(self.ctx, self.store, st.txn_id),
            baseline_check=_checked(st.drift),
        )
        raise CandidateRejected(
            f"candidate {self.candidate.name} rejected: {reason}; "
            + (
                f"known-good {restored} restored and verified"
                if restored
                else "nothing served before this deploy, so nothing was restored"
            ),
            result=result,
            log_tail=exc.log_tail if isinstance(exc, HealthFailed) else "",
        ) from exc

    def _record_degraded(self, reason: str, status: str) -> None:
        st = self.ex.state
        with contextlib.suppress(Exception):
            self.store.set_serving(None)
            self.store.update_deployment(
                st.txn_id, status=status, reason=reason, exit_code=4, timings=self.ex.timer.total()
            )
        path = deploy_report(self.ctx, self.store, st.txn_id)
        if path is not None:
            self.ctx.reporter.event(f"report: {path}")
        # the journal stays open on purpose: `kctl status` reports it, `kctl rollback` resolves it


def _describe(exc: BaseException) -> tuple[str, dict[str, Any] | None, str | None]:
    if isinstance(exc, GateRejected):
        return f"gate {exc.verdict}: {exc.reason}", exc.gate, exc.table
    if isinstance(exc, ServerExited):
        return exc.message, None, None
    if isinstance(exc, HealthFailed):
        matched = (exc.matched_line or "").strip()
        if matched:
            # a log line ended the wait: it says what happened, whatever kctl was probing
            line = f" (log: {matched})" if matched not in exc.message else ""
            return f"health failed: {exc.message}{line}", None, None
        return f"health failed in phase {exc.phase}: {exc.message}", None, None
    if isinstance(exc, Interrupted):
        return f"interrupted by {exc.signal_name}", None, None
    if isinstance(exc, KctlError):
        return exc.message, None, None
    return f"unexpected error: {type(exc).__name__}: {exc}", None, None


def _verdict_of(exc: BaseException) -> str:
    if isinstance(exc, GateRejected):
        return exc.verdict
    if isinstance(exc, HealthFailed):
        return "UNHEALTHY"
    if isinstance(exc, Interrupted):
        return "INTERRUPTED"
    return "ERROR"
