"""The executor: runs a :class:`~kctl.controller.steps.Plan`, one step at a time, each
journalled before it acts (:class:`~kctl.controller.transaction.Transaction`).

When a step fails after the host changed, it runs the plan's own ``revert`` steps (a plan
without any, a rollback, ends DEGRADED). SIGINT/SIGTERM are failures like any other
(:class:`~kctl.controller.signals.InterruptGuard`); a revert that a signal started is
aborted by the next one, a revert that a failure started finishes on the first signal and
is aborted only by a second.

What a step acts on is resolved here from its role: the candidate is this deployment; the
baseline the known-good deployment of the candidate's baseline profile (a new record when
there is none); the target the deployment a revert or rollback restores.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kctl.controller import common
from kctl.controller.gating import GateSteps
from kctl.controller.recover import revert_target, serving_now
from kctl.controller.runstate import RunState, Timer
from kctl.controller.signals import InterruptGuard
from kctl.controller.steps import (
    ClearServing,
    Gate,
    Measure,
    Promote,
    RecordBaseline,
    Restore,
    Role,
    StartServer,
    Step,
    StopOthers,
    StopServing,
    WaitHealthy,
)
from kctl.errors import Interrupted, KctlError

if TYPE_CHECKING:
    from kctl.controller.context import Context
    from kctl.controller.steps import Plan
    from kctl.controller.transaction import Transaction
    from kctl.profile.model import Profile
    from kctl.runtime.base import Instance, Runtime
    from kctl.store import Store
    from kctl.store.records import Deployment


#: how long a server that no record describes gets to stop before it is killed
DEFAULT_STOP_TIMEOUT_S = 60.0


class RevertFailed(KctlError):
    """Internal: the revert of a failed plan failed too (``cause`` is why); the deploy
    turns it into :class:`~kctl.errors.Degraded`."""

    exit_code = 4

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class Executor:
    def __init__(
        self, ctx: Context, store: Store, runtime: Runtime, txn: Transaction, state: RunState
    ) -> None:
        self.ctx = ctx
        self.store = store
        self.runtime = runtime
        self.txn = txn
        self.state = state
        self.timer = Timer(ctx.monotonic)
        self.guard = InterruptGuard(on_deferred=self._deferred)
        self.gating = GateSteps(ctx, store, state, self._profile, self._alive_check)
        self._handlers: dict[type[Step], Callable[[Any], None]] = {
            StopServing: self._stop_serving,
            StopOthers: self._stop_others,
            StartServer: self._start,
            WaitHealthy: self._wait_healthy,
            RecordBaseline: self._record_baseline,
            Measure: self.gating.measure,
            Gate: self.gating.gate,
            Promote: self._promote,
            Restore: self._restore,
            ClearServing: self._clear_serving,
        }

    # -- running -----------------------------------------------------------------------

    def run_steps(self, steps: tuple[Step, ...]) -> None:
        for step in steps:
            self.guard.check()  # a signal whose exception a finalizer swallowed
            if step.changes_host:
                self.state.changed = True
            self.state.failed_step = step
            with self.txn.step(step), self.timer.phase(self._phase(step)):
                self._handlers[type(step)](step)
        self.state.failed_step = None

    def revert(self, plan: Plan, cause: BaseException) -> None:
        """Run ``plan.revert``; a signal while it runs is deferred once unless a signal
        caused it. Raises RevertAborted (the second signal) or :class:`RevertFailed`."""
        from kctl.errors import RevertAborted

        if not self.guard.reverting:
            self.begin_revert(cause)
        try:
            self.run_steps(plan.revert)
        except RevertAborted:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of the revert is DEGRADED
            raise RevertFailed(exc) from exc

    def begin_revert(self, cause: BaseException) -> None:
        """Signals count as signals during the revert from now on: a revert a signal
        started is aborted by the next one, one a failure started only by a second."""
        self.guard.begin_revert(tolerate=0 if isinstance(cause, Interrupted) else 1)

    def _deferred(self, signal_name: str) -> None:
        self.ctx.reporter.warn(
            f"{signal_name} received: finishing the revert to the known-good baseline first "
            "(a second signal aborts it)"
        )

    def _phase(self, step: Step) -> str | None:
        """The timings name a step's seconds count under."""
        role = getattr(step, "role", None)
        if isinstance(step, (StartServer, WaitHealthy)):
            if role == "candidate":
                return "candidate_health" if self.state.baseline is not None else "health"
            return "baseline_health" if role == "baseline" else None
        if isinstance(step, Measure) and step.source in ("live", "checked"):
            return "baseline_measure" if role == "baseline" else "measure"
        return "gate" if isinstance(step, Gate) else None

    # -- resolving roles -----------------------------------------------------------------

    def _profile(self, role: Role) -> Profile:
        st = self.state
        if role == "candidate" and st.candidate is not None:
            return st.candidate
        if role == "baseline" and st.baseline is not None:
            return st.baseline
        if role == "target" and st.target is not None:
            return st.target[1]
        if role == "serving" and st.serving is not None:
            return common.profile_of(st.serving[0])
        raise KctlError(f"internal: the plan names a {role} this command does not have")

    def _image(self, profile: Profile) -> str | None:
        if profile.content_hash not in self.state.images:
            self.state.images[profile.content_hash] = common.image_for(self.ctx, profile)
        return self.state.images[profile.content_hash]

    def _stop_timeout(self, instance: Instance) -> float:
        """The stop timeout of the profile the instance runs (60 s for one never recorded)."""
        from kctl.errors import DeploymentNotFound

        try:
            dep = self.store.get_deployment(instance.deployment_id)
        except DeploymentNotFound:
            return DEFAULT_STOP_TIMEOUT_S
        return common.profile_of(dep).runtime.stop_timeout_s

    def _stop(self, instance: Instance, why: str) -> None:
        self.ctx.reporter.event(f"stopping {instance.deployment_id} ({why})")
        # recorded before the stop: a stop that a signal cut short has still told the
        # server to exit, and a revert must not wait for the health of a server that exits
        if instance.deployment_id not in self.state.stopped:
            self.state.stopped.append(instance.deployment_id)
        self.runtime.stop(instance, self._stop_timeout(instance))

    # -- the steps -----------------------------------------------------------------------

    def _stop_serving(self, step: StopServing) -> None:
        if self.state.serving is not None:
            self._stop(self.state.serving[1], step.why)
            self.store.set_serving(None)
            self.state.serving = None

    def _stop_others(self, step: StopOthers) -> None:
        keep = self._keep_id(step.keep)
        mine = self.state.instances.get("candidate")
        if mine is None and self.state.candidate is not None:
            # the start may have happened without its result reaching us (interrupted mid-start)
            with contextlib.suppress(Exception):
                mine = self.store.get_deployment(self.state.txn_id).instance_obj()
        if mine is not None and mine.deployment_id != keep:
            self._stop(mine, step.why)
        for other in self.runtime.running():  # anything else of ours still up holds the port
            if other.deployment_id != keep:
                self._stop(other, step.why)

    def _keep_id(self, keep: Role | None) -> str | None:
        if keep != "target":
            return None
        target = self._resolve_target()
        return target[0].id if target else None

    def _start(self, step: StartServer) -> None:
        profile = self._profile(step.role)
        dep_id = self._record_id(step.role, profile)
        spec = common.launch_spec_for(self.ctx, profile, dep_id, self._image(profile))
        self.ctx.reporter.event(f"starting {dep_id} [{profile.name}] ({step.why})")
        if step.role == "candidate":
            self.store.update_deployment(dep_id, status="starting")
        instance = self.runtime.start(spec)
        self.store.update_deployment(dep_id, instance=instance)
        self.state.instances[step.role] = instance

    def _record_id(self, role: Role, profile: Profile) -> str:
        st = self.state
        if role == "candidate":
            return st.txn_id
        if role == "baseline":
            known = self.store.known_good(profile.content_hash)
            if known is None:
                known = self.store.new_deployment(
                    kind="baseline", profile=profile, runtime=self.runtime.name
                )
            st.ids["baseline"] = known.id
            return known.id
        target = self._resolve_target()
        if target is None:
            raise KctlError("internal: the plan restores a deployment, but there is none")
        return target[0].id

    def _wait_healthy(self, step: WaitHealthy) -> None:
        profile = self._profile(step.role)
        if step.role == "serving" and self.state.serving is not None:
            # what already serves: checked, not started here
            common.wait_healthy(self.ctx, self.runtime, self.state.serving[1], profile)
            self.ctx.reporter.event(f"health of {self.state.serving[0].id} verified")
            return
        instance = self.state.instances[step.role]
        report = common.wait_healthy(
            self.ctx, self.runtime, instance, profile, revert=step.role == "target"
        )
        self.state.health[step.role] = report
        self.ctx.reporter.event(f"{instance.deployment_id} is healthy")
        info, warning = common.read_server_info(profile)
        if info is not None:
            self.store.update_deployment(instance.deployment_id, server=info)
        if warning is not None:
            self.ctx.reporter.warn(warning)
            self.state.warnings.append(warning)

    def _record_baseline(self, step: RecordBaseline) -> None:
        base = self._profile("baseline")
        known_id = self.state.ids["baseline"]
        self.store.update_deployment(
            known_id,
            status="promoted",
            verdict="BASELINE",
            reason="known-good baseline, health verified",
            exit_code=0,
        )
        self.store.set_known_good(base.content_hash, known_id)
        self.store.set_serving(known_id)
        self.state.serving = (self.store.get_deployment(known_id), self.state.instances["baseline"])

    def _alive_check(self, role: Role, phase: str) -> Callable[[], None]:
        """Checks nothing for a server this plan did not start (:func:`common.alive_check`)."""
        instance = self.state.instances.get(role)
        return (
            (lambda: None)
            if instance is None
            else common.alive_check(self.runtime, instance, phase)
        )

    def _promote(self, step: Promote) -> None:
        st = self.state
        cand = self._profile("candidate")
        timings = self.timer.total()
        if step.establish:
            st.verdict = "BASELINE"
            st.reason = "known-good baseline serving, health verified and measured"
        with self.store.transaction():  # promote is one atomic change of the store
            if step.establish:
                self.store.set_known_good(cand.content_hash, st.txn_id)
            self.store.set_serving(st.txn_id)
            self.store.update_deployment(
                st.txn_id,
                status="promoted",
                verdict=st.verdict,
                reason=st.reason,
                exit_code=0,
                timings=timings,
            )
            self.txn.end("promoted")
        if not step.establish:
            self.ctx.reporter.event(f"promoted {st.txn_id}")

    def _resolve_target(self) -> tuple[Deployment, Profile] | None:
        """What a failed deploy goes back to (:func:`revert_target`); a rollback's is fixed."""
        st = self.state
        if st.target is not None:
            return st.target
        return revert_target(self.store, st.baseline, st.original)

    def _restore(self, step: Restore) -> None:
        target = self._resolve_target()
        if target is None:
            self.store.set_serving(None)
            return
        dep, profile = target
        self.state.target = target
        live = serving_now(self.store, self.runtime)
        if live is not None and live[0].id == dep.id and dep.id not in self.state.stopped:
            common.wait_healthy(self.ctx, self.runtime, live[1], profile, revert=True)
        else:
            if live is not None and live[0].id == dep.id:
                self._stop(live[1], "its stop was interrupted; restarting it")
            self.store.set_serving(None)
            self._start(StartServer(role="target", profile=profile.name, why=self.txn_kind))
            self._wait_healthy(WaitHealthy(role="target", profile=profile.name, deadline_s=0))
        self.store.set_serving(dep.id)

    @property
    def txn_kind(self) -> str:
        return "revert" if self.state.candidate is not None else "rollback"

    def _clear_serving(self, step: ClearServing) -> None:
        self.store.set_serving(None)
