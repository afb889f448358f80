"""The measuring steps of a plan: measure a server under the gate workload (or take a stored
baseline measurement), and gate the candidate against the baseline's; the executor runs them
through :class:`GateSteps`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kctl.backend import noted
from kctl.controller import common
from kctl.controller.runstate import RunState
from kctl.controller.steps import Gate, Measure, Role
from kctl.errors import GateRejected

if TYPE_CHECKING:
    from kctl.controller.context import Context
    from kctl.profile.model import Profile
    from kctl.store import Store


class GateSteps:
    """``Measure`` and ``Gate``; ``profile`` resolves a role to its profile and ``alive``
    gives the check that the server of a role is still up (the executor's)."""

    def __init__(
        self,
        ctx: Context,
        store: Store,
        state: RunState,
        profile: Callable[[Role], Profile],
        alive: Callable[[Role, str], Callable[[], None]],
    ) -> None:
        self.ctx = ctx
        self.store = store
        self.state = state
        self.profile = profile
        self.alive = alive

    def measure(self, step: Measure) -> None:
        from kctl.gate import measure, plan_workload

        cand = self.profile("candidate")
        measured = self.profile(step.role)
        fp = common.fingerprint(self.ctx, cand, measured)
        if step.source == "stored":
            self.state.baseline_measurement = common.stored_measurement(
                self.ctx, self.store, measured, fp, cand
            )
            return
        if step.source == "checked" and self._steady(step, cand, measured, fp):
            return
        if step.role == "candidate":
            owner = self.state.txn_id
            what = f"the candidate {owner}"
        else:
            assert self.state.serving is not None, "the plan measures a baseline that serves"
            owner = self.state.serving[0].id
            started = "baseline" in self.state.instances
            what = (
                f"the baseline {owner}"
                if started
                else f"the running baseline {owner} before stopping it"
            )
        workload = plan_workload(cand.gate)
        self.ctx.reporter.event(f"measuring {what} at contexts {list(cand.gate.contexts)}")
        meas = measure(
            common.endpoint_of(measured),
            workload,
            fingerprint=fp,
            progress=self._progress,
            clock=self.ctx.gate_clock(cand),
            alive=self.alive(step.role, "measurement"),
        )
        self.store.save_measurement(
            deployment_id=owner, profile_hash=measured.content_hash, fingerprint=fp,
            data=meas.to_dict(),
        )  # fmt: skip
        if step.role == "baseline":
            self.store.update_deployment(self.state.txn_id, baseline_id=owner)
            self.state.baseline_measurement = meas
        else:
            self.state.measurement = meas

    def _steady(self, step: Measure, cand: Profile, measured: Profile, fp: str) -> bool:
        """The drift check (:mod:`kctl.gate.drift`) of the stored measurement against
        the running baseline; True (and the stored measurement taken) when it holds."""
        from kctl.gate import Measurement, plan_workload
        from kctl.gate.drift import run_drift_check

        max_age = cand.gate.policy.baseline_max_age_s
        hit = self.store.latest_measurement(
            measured.content_hash, fp, max_age, now=self.ctx.clock()
        )
        if hit is None:
            self.ctx.reporter.event(f"the stored measurement of {measured.name} is gone: measuring")
            return False
        stored = Measurement.from_dict(hit[0])
        age_min = (self.ctx.clock() - hit[1]) / 60
        self.ctx.reporter.event(
            f"checking the stored measurement of {measured.name} ({age_min:.0f} min old) "
            f"on the running baseline: {step.check_requests} requests, at most "
            f"{step.check_budget_s:g} s"
        )
        check = run_drift_check(
            common.endpoint_of(measured),
            plan_workload(cand.gate),
            stored,
            budget_s=step.check_budget_s,
            progress=self._progress,
            clock=self.ctx.gate_clock(cand),
            alive=self.alive(step.role, "drift check"),
        )
        self.state.drift = check
        if check.steady:
            self.ctx.reporter.event(
                f"baseline measurement reused ({age_min:.0f} min old): the drift check found "
                f"it {check.reason}"
            )
            self.state.baseline_measurement = stored
            return True
        self.ctx.reporter.event(
            f"the stored baseline measurement no longer holds ({check.reason}): measuring "
            "the running baseline again before stopping it"
        )
        return False

    def _progress(self, p: Any) -> None:
        common.show_gate(self.ctx, p)

    def gate(self, step: Gate) -> None:
        from kctl.gate import plan_workload, render_table, run_gate

        cand = self.profile("candidate")
        self.store.update_deployment(self.state.txn_id, status="gating")
        result = run_gate(
            common.endpoint_of(cand),
            plan_workload(cand.gate),
            self.state.baseline_measurement,
            cand.gate.policy,
            progress=self._progress,
            clock=self.ctx.gate_clock(cand),
            alive=self.alive("candidate", "gate"),
        )
        report = self.state.health.get("candidate")
        if report is not None:
            # the candidate's health phases belong in the verdict's timings line; the health
            # wait read the backend's clock, the same (real-time) scale as the gate's own
            health = report.timings()
            result = dataclasses.replace(result, verdict=result.verdict.with_timings(*health))
        st = self.state
        st.gate = result.to_dict()
        # the drift check that confirmed (or replaced) the baseline measurement it judged
        # against is kept with the result: the report shows it
        kept = st.gate if st.drift is None else {**st.gate, "baseline_check": st.drift.to_dict()}
        self.store.save_gate_result(st.txn_id, kept)
        st.table = noted(self.ctx.backend, cand, render_table(result.verdict))
        st.verdict, st.reason = result.verdict.verdict, result.verdict.reason
        promote = st.verdict == "PASS" or (
            st.verdict == "INCONCLUSIVE" and cand.gate.policy.on_inconclusive == "promote"
        )
        if not promote:
            raise GateRejected(st.verdict, st.reason, st.gate, st.table)
        if st.verdict == "INCONCLUSIVE":
            st.warnings.append(
                "verdict INCONCLUSIVE; promoted because policy.on_inconclusive=promote"
            )
