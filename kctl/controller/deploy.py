"""``kctl deploy``: the transaction at the heart of kctl.

    plan → lock → reconcile → preflight → build → (measure baseline) → stop current →
    start candidate → health → gate → promote | revert to the known-good baseline → verify

Every failure after the first host change ends in one of two states: the known-good
baseline serving again and verified (CandidateRejected, exit 3), or DEGRADED naming the
next command (Degraded, exit 4). Failures before any change raise PreconditionFailed
(exit 5) and leave the host as it was.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kctl.controller import common
from kctl.controller.maintenance import prune
from kctl.controller.recover import reconcile, serving_now
from kctl.controller.signals import InterruptGuard, RevertAborted
from kctl.controller.transaction import Transaction
from kctl.errors import (
    CandidateRejected,
    Degraded,
    GateError,
    HealthFailed,
    Interrupted,
    KctlError,
    PreconditionFailed,
    PreflightFailed,
)

if TYPE_CHECKING:
    from kctl.controller.context import Context
    from kctl.profile.model import Profile
    from kctl.runtime.base import Instance, Runtime
    from kctl.store import Store


@dataclass
class DeployResult:
    """What a deploy did; rendered by the CLI and returned under ``--json``."""

    deployment_id: str
    profile: str
    profile_hash: str
    outcome: str  # promoted | rejected | already-serving | established | degraded | failed
    reason: str
    serving: str | None
    baseline: str | None = None
    gate: dict[str, Any] | None = None
    table: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class _Timer:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.start = ctx.monotonic()
        self.marks: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Any:
        t0 = self.ctx.monotonic()
        try:
            yield
        finally:
            self.marks[name] = round(self.marks.get(name, 0.0) + self.ctx.monotonic() - t0, 3)

    def total(self) -> dict[str, float]:
        return {**self.marks, "total": round(self.ctx.monotonic() - self.start, 3)}


def deploy(ctx: Context, profile_path: str, *, force: bool = False) -> DeployResult:
    """Deploy a profile; see the module docstring for the guarantees."""
    from kctl.lock import DeployLock

    candidate, baseline = common.load_pair(profile_path)
    runtime = ctx.runtime(ctx.runtime_kind(candidate))
    store = ctx.open_store()
    with DeployLock(ctx.state_dir).acquire(f"kctl deploy {profile_path}") as held:
        if held.takeover_warning:
            ctx.reporter.warn(held.takeover_warning)
        return _Deploy(ctx, store, runtime, candidate, baseline, force, held).run()


class _Deploy:
    def __init__(
        self,
        ctx: Context,
        store: Store,
        runtime: Runtime,
        candidate: Profile,
        baseline: Profile | None,
        force: bool,
        held: Any = None,
    ) -> None:
        self.held = held
        self.ctx = ctx
        self.store = store
        self.runtime = runtime
        self.candidate = candidate
        self.baseline = baseline
        self.force = force
        self.timer = _Timer(ctx)
        self.changed = False  # has the host been touched yet?
        self.candidate_instance: Instance | None = None
        self.previous: tuple[Any, Instance] | None = None  # what serves before the next stop
        self.original: tuple[Any, Instance] | None = None  # what served when the deploy began
        self.health_report: Any = None
        self.stage = "candidate"  # whose failure a failure is: "baseline" or "candidate"
        self.images: dict[str, str | None] = {}
        self.warnings: list[str] = []

    # -- the transaction -------------------------------------------------------------------

    def run(self) -> DeployResult:
        ctx, cand = self.ctx, self.candidate
        notes = reconcile(ctx, self.store, self.runtime, resolver="deploy")
        for note in notes:
            ctx.reporter.warn(note)
            self.warnings.append(note)
        self.runtime.check_available()
        serving = serving_now(self.store, self.runtime)
        if serving and serving[0].profile_hash == cand.content_hash and not self.force:
            dep = serving[0]
            return DeployResult(
                deployment_id=dep.id,
                profile=cand.name,
                profile_hash=cand.content_hash,
                outcome="already-serving",
                reason=f"{dep.id} already serves this profile (hash {cand.content_hash[:12]}); "
                "use --force to deploy it again",
                serving=dep.id,
                warnings=self.warnings,
            )
        self.previous = serving
        self.original = serving
        self._preflight(serving)
        with self.timer.phase("build"):
            images = {cand.content_hash: common.image_for(ctx, cand)}
            if self.baseline is not None:
                images[self.baseline.content_hash] = common.image_for(ctx, self.baseline)
        self.images = images

        dep = self.store.new_deployment(
            kind="deploy",
            profile=cand,
            runtime=self.runtime.name,
            parent_id=serving[0].id if serving else None,
        )
        self.dep_id = dep.id
        if self.held is not None:
            self.held = self.held.set_deployment_id(dep.id)
        self.txn = Transaction(ctx, self.store, dep.id)
        ctx.reporter.event(f"deployment {dep.id}: {cand.name} ({cand.source})")
        guard = InterruptGuard()
        with guard:
            try:
                result = self._body()
            except BaseException as exc:  # noqa: BLE001 - every failure path must revert
                if isinstance(exc, SystemExit):
                    raise
                return self._fail(exc, guard)
        return result

    def _body(self) -> DeployResult:
        if self.baseline is None:
            return self._establish()
        from kctl.gate import run_gate

        base_meas = self._baseline_measurement()
        if self.previous is not None:
            self.changed = True
            self.txn.stop(
                self.runtime,
                self.previous[1],
                self.candidate.runtime.stop_timeout_s,
                why="replaced by the candidate",
            )
            self.store.set_serving(None)
        self.changed = True
        self.store.update_deployment(self.dep_id, status="starting")
        with self.timer.phase("candidate_health"):
            self.candidate_instance, self.health_report = common.bring_up(
                self.txn,
                self.runtime,
                self.candidate,
                self.dep_id,
                self.images[self.candidate.content_hash],
                why="candidate",
            )
        self.store.update_deployment(self.dep_id, status="gating")
        workload = self._workload()
        with (
            self.timer.phase("gate"),
            self.txn.step("gate", contexts=list(self.candidate.gate.contexts)),
        ):
            result = run_gate(
                common.endpoint_of(self.candidate),
                workload,
                base_meas,
                self.candidate.gate.policy,
                progress=self._gate_progress,
                clock=self.ctx.gate_clock(self.candidate),
            )
        if self.health_report is not None:
            # the candidate's health phases belong in the verdict's timings line, on the
            # same (real-time) scale as the gate's own timings
            scale = self.candidate.simulator.speedup if self.ctx.simulate else 1.0
            health = tuple((k, v * scale) for k, v in self.health_report.timings())
            result = dataclasses.replace(result, verdict=result.verdict.with_timings(*health))
        gate_dict = result.to_dict()
        self.store.save_gate_result(self.dep_id, gate_dict)
        from kctl.gate import render_table

        table = _with_note(self.ctx, self.candidate, render_table(result.verdict))
        verdict = result.verdict.verdict
        reason = result.verdict.reason
        promote = verdict == "PASS" or (
            verdict == "INCONCLUSIVE" and self.candidate.gate.policy.on_inconclusive == "promote"
        )
        if not promote:
            raise _GateRejected(verdict, reason, gate_dict, table)
        if verdict == "INCONCLUSIVE":
            self.warnings.append(
                "verdict INCONCLUSIVE; promoted because policy.on_inconclusive=promote"
            )
        timings = self.timer.total()
        with self.store.transaction():  # promote is one atomic change of the store
            self.store.set_serving(self.dep_id)
            self.store.update_deployment(
                self.dep_id,
                status="promoted",
                verdict=verdict,
                reason=reason,
                exit_code=0,
                timings=timings,
            )
            self.store.end_transaction(self.dep_id, "promoted")
        self.ctx.reporter.event(f"promoted {self.dep_id}")
        prune(self.ctx, self.store, self.runtime, self.candidate.runtime.retain)
        return DeployResult(
            deployment_id=self.dep_id,
            profile=self.candidate.name,
            profile_hash=self.candidate.content_hash,
            outcome="promoted",
            reason=reason,
            serving=self.dep_id,
            baseline=self.baseline.name if self.baseline else None,
            gate=gate_dict,
            table=table,
            timings=timings,
            warnings=self.warnings,
        )

    # -- baseline ----------------------------------------------------------------------------

    def _workload(self) -> Any:
        from kctl.gate import plan_workload

        return plan_workload(self.candidate.gate)

    def _gate_progress(self, p: Any) -> None:
        self.ctx.reporter.progress(f"gate: {p}")

    def _baseline_measurement(self) -> Any:
        """The stored measurement of the baseline under this gate, or a fresh one: measured
        on the running baseline before it is stopped, else on a baseline started for it."""
        from kctl.gate import Measurement, measure

        assert self.baseline is not None
        base = self.baseline
        fp = common.fingerprint(self.ctx, self.candidate, base)
        stored = self.store.latest_measurement(
            base.content_hash,
            fp,
            max_age_s=self.candidate.gate.policy.baseline_max_age_s,
            now=self.ctx.clock(),
        )
        if stored is not None:
            data, created_ts = stored
            age_min = (self.ctx.clock() - created_ts) / 60
            self.ctx.reporter.event(f"baseline measurement reused ({age_min:.0f} min old)")
            return Measurement.from_dict(data)
        workload = self._workload()
        if self.previous is not None and self.previous[0].profile_hash == base.content_hash:
            owner = self.previous[0].id
            self.ctx.reporter.event(f"measuring the running baseline {owner} before stopping it")
        else:
            # nothing known-good serves: bring the baseline up first (it is also the revert target)
            base_id = self._start_baseline(why="baseline for the gate")
            owner = base_id
        with self.timer.phase("baseline_measure"):
            meas = measure(
                common.endpoint_of(base),
                workload,
                fingerprint=fp,
                progress=self._gate_progress,
                clock=self.ctx.gate_clock(self.candidate),
            )
        self.store.save_measurement(
            deployment_id=owner, profile_hash=base.content_hash, fingerprint=fp, data=meas.to_dict()
        )
        self.store.update_deployment(self.dep_id, baseline_id=owner)
        return meas

    def _start_baseline(self, why: str) -> str:
        """Stop what serves, start the known-good baseline, verify it, mark it serving."""
        assert self.baseline is not None
        base = self.baseline
        if self.previous is not None:
            self.changed = True
            self.txn.stop(self.runtime, self.previous[1], base.runtime.stop_timeout_s, why=why)
            self.store.set_serving(None)
            self.previous = None
        self.stage = "baseline"
        known = self.store.known_good(base.content_hash)
        if known is None:
            known = self.store.new_deployment(
                kind="baseline", profile=base, runtime=self.runtime.name
            )
        self.changed = True
        with self.timer.phase("baseline_health"):
            instance, _ = common.bring_up(
                self.txn,
                self.runtime,
                base,
                known.id,
                self.images[base.content_hash],
                why=why,
            )
        self.store.update_deployment(
            known.id,
            status="promoted",
            verdict="BASELINE",
            reason="known-good baseline, health verified",
            exit_code=0,
        )
        self.store.set_known_good(base.content_hash, known.id)
        self.store.set_serving(known.id)
        self.stage = "candidate"
        self.previous = (self.store.get_deployment(known.id), instance)
        return known.id

    def _establish(self) -> DeployResult:
        """Deploy a baseline profile itself: no gate to pass, but it is measured and becomes
        the known-good that candidates naming it are gated against and revert to."""
        from kctl.gate import measure

        cand = self.candidate
        if self.previous is not None:
            self.changed = True
            self.txn.stop(
                self.runtime, self.previous[1], cand.runtime.stop_timeout_s, why="replaced"
            )
            self.store.set_serving(None)
        self.changed = True
        with self.timer.phase("health"):
            self.candidate_instance, _ = common.bring_up(
                self.txn,
                self.runtime,
                cand,
                self.dep_id,
                self.images[cand.content_hash],
                why="known-good baseline",
            )
        fp = common.fingerprint(self.ctx, cand, cand)
        with self.timer.phase("measure"), self.txn.step("measure"):
            meas = measure(
                common.endpoint_of(cand),
                self._workload(),
                fingerprint=fp,
                progress=self._gate_progress,
                clock=self.ctx.gate_clock(self.candidate),
            )
        self.store.save_measurement(
            deployment_id=self.dep_id,
            profile_hash=cand.content_hash,
            fingerprint=fp,
            data=meas.to_dict(),
        )
        self.store.set_known_good(cand.content_hash, self.dep_id)
        self.store.set_serving(self.dep_id)
        timings = self.timer.total()
        reason = "known-good baseline serving, health verified and measured"
        self.store.update_deployment(
            self.dep_id,
            status="promoted",
            verdict="BASELINE",
            reason=reason,
            exit_code=0,
            timings=timings,
        )
        self.store.end_transaction(self.dep_id, "promoted")
        return DeployResult(
            deployment_id=self.dep_id,
            profile=cand.name,
            profile_hash=cand.content_hash,
            outcome="established",
            reason=reason,
            serving=self.dep_id,
            timings=timings,
            warnings=self.warnings,
            gate={"measurement": meas.to_dict()},
        )

    # -- failure paths -------------------------------------------------------------------------

    def _preflight(self, serving: tuple[Any, Instance] | None) -> None:
        port = self.candidate.server.port
        holder = self.runtime.port_holder(port)
        if holder is not None and (serving is None or serving[1].port not in (port, 0)):
            raise PreflightFailed(
                f"port {port} is taken by {holder}, which kctl does not own",
                hint="stop that process, or set server.port in the profile to a free port",
            )
        if self.ctx.runtime_kind(self.candidate) == "docker":
            from kctl.preflight import docker_preflight

            docker_preflight(self.candidate, serving=serving)

    def _fail(self, exc: BaseException, guard: InterruptGuard) -> DeployResult:
        reason, gate, table = _describe(exc)
        if self.stage == "baseline" and self.baseline is not None:
            reason = (
                f"baseline {self.baseline.name} could not be brought up to measure it: {reason}"
            )
        if not self.changed:
            self.store.update_deployment(
                self.dep_id,
                status="failed",
                reason=reason,
                exit_code=5,
                timings=self.timer.total(),
            )
            self.store.end_transaction(self.dep_id, "failed before any change")
            if isinstance(exc, Interrupted):
                raise exc
            if isinstance(exc, KctlError) and not isinstance(exc, (HealthFailed, GateError)):
                raise exc
            raise PreconditionFailed(f"{reason} (nothing was changed)") from exc
        self.ctx.reporter.warn(f"{reason}; reverting")
        guard.reverting = True
        try:
            restored = self._revert()
        except RevertAborted as abort:
            self._record_degraded(f"{reason}; then {abort}", status="aborted")
            raise Degraded(
                f"revert aborted by a second {abort.signal_name}: the known-good baseline is "
                "NOT verified serving (DEGRADED)",
                hint="run `kctl rollback` to restore the known-good baseline",
            ) from exc
        except Exception as revert_exc:  # noqa: BLE001
            self._record_degraded(f"{reason}; revert failed: {revert_exc}", status="degraded")
            raise Degraded(
                f"DEGRADED: the candidate failed ({reason}) and restoring the known-good "
                f"baseline failed too: {revert_exc}",
                hint="inspect `kctl logs`, fix the host, then run `kctl rollback`",
            ) from exc
        timings = self.timer.total()
        self.store.update_deployment(
            self.dep_id,
            status="rejected",
            verdict=_verdict_of(exc),
            reason=reason,
            exit_code=3,
            timings=timings,
        )
        self.store.end_transaction(self.dep_id, "reverted")
        prune(self.ctx, self.store, self.runtime, self.candidate.runtime.retain, self.dep_id)
        result = DeployResult(
            deployment_id=self.dep_id,
            profile=self.candidate.name,
            profile_hash=self.candidate.content_hash,
            outcome="rejected",
            reason=reason,
            serving=restored,
            baseline=self.baseline.name if self.baseline else None,
            gate=gate,
            table=table,
            timings=timings,
            warnings=self.warnings,
        )
        err = CandidateRejected(
            f"candidate {self.candidate.name} rejected: {reason}; "
            + (
                f"known-good {restored} restored and verified"
                if restored
                else "nothing served before this deploy, so nothing was restored"
            ),
        )
        err.result = result  # type: ignore[attr-defined]
        if isinstance(exc, HealthFailed) and exc.log_tail:
            err.log_tail = exc.log_tail  # type: ignore[attr-defined]
        raise err from exc

    def _revert(self) -> str | None:
        """Stop whatever this deploy started that is not verified known-good, then bring
        back the restore target (see :meth:`_restore_target`), verified by health."""
        target = self._restore_target()
        timeout = self.candidate.runtime.stop_timeout_s
        inst = self.candidate_instance
        if inst is None:
            # the start may have happened without its result reaching us (interrupted mid-start)
            inst = self.store.get_deployment(self.dep_id).instance_obj()
        if inst is not None:
            self.txn.stop(self.runtime, inst, timeout, why="revert")
        target_id = target[0].id if target else None
        for other in self.runtime.running():  # anything else of ours still up holds the port
            if other.deployment_id != target_id:
                self.txn.stop(self.runtime, other, timeout, why="revert")
        if target is None:
            self.store.set_serving(None)
            return None
        dep, profile = target
        live = serving_now(self.store, self.runtime)
        if live is not None and live[0].id == dep.id:
            common.wait_healthy(self.ctx, self.runtime, live[1], profile)
        else:
            common.bring_up(
                self.txn,
                self.runtime,
                profile,
                dep.id,
                self.images.get(profile.content_hash) or common.image_for(self.ctx, profile),
                why="revert",
            )
        self.store.set_serving(dep.id)
        return str(dep.id)

    def _restore_target(self) -> tuple[Any, Profile] | None:
        """What a failed deploy goes back to: the verified known-good deployment of the
        candidate's baseline; for a baseline deploy (or when that baseline was never
        verified) whatever served before this deploy; else nothing."""
        if self.baseline is not None:
            known = self.store.known_good(self.baseline.content_hash)
            if known is not None:
                return known, common.profile_of(known)
        if self.original is not None:
            dep = self.original[0]
            return dep, common.profile_of(dep)
        return None

    def _record_degraded(self, reason: str, status: str) -> None:
        with contextlib.suppress(Exception):
            self.store.set_serving(None)
            self.store.update_deployment(
                self.dep_id,
                status=status,
                reason=reason,
                exit_code=4,
                timings=self.timer.total(),
            )
        # the journal stays open on purpose: `kctl status` reports it, `kctl rollback` resolves it


def _with_note(ctx: Context, profile: Profile, table: str) -> str:
    if not ctx.simulate:
        return table
    note = (
        f"SIMULATED (kctl.sim, time compressed {profile.simulator.speedup:g}x; "
        "rates and timings shown at real-time scale)"
    )
    return f"{note}\n{table}"


class _GateRejected(Exception):
    def __init__(self, verdict: str, reason: str, gate: dict[str, Any], table: str) -> None:
        super().__init__(f"gate {verdict}: {reason}")
        self.verdict = verdict
        self.reason = reason
        self.gate = gate
        self.table = table


def _describe(exc: BaseException) -> tuple[str, dict[str, Any] | None, str | None]:
    if isinstance(exc, _GateRejected):
        return f"gate {exc.verdict}: {exc.reason}", exc.gate, exc.table
    if isinstance(exc, HealthFailed):
        matched = (exc.matched_line or "").strip()
        line = f" (log: {matched})" if matched and matched not in exc.message else ""
        return f"health failed in phase {exc.phase}: {exc.message}{line}", None, None
    if isinstance(exc, Interrupted):
        return f"interrupted by {exc.signal_name}", None, None
    if isinstance(exc, KctlError):
        return exc.message, None, None
    return f"unexpected error: {type(exc).__name__}: {exc}", None, None


def _verdict_of(exc: BaseException) -> str:
    if isinstance(exc, _GateRejected):
        return exc.verdict
    if isinstance(exc, HealthFailed):
        return "UNHEALTHY"
    if isinstance(exc, Interrupted):
        return "INTERRUPTED"
    return "ERROR"
