"""Runs a fleet plan (:mod:`kctl.fleet.plan`): each step journalled before it acts, the
only place a rollout changes the fleet (through its :class:`~kctl.fleet.view.FleetDriver`).

Roles resolve here: the candidate is this rollout's deployment; the baseline the fleet's
first known-good (a new record when it is created); the target what a revert or rollback
returns to, read from the fleet's store when it runs: the deployment that served when the
rollout began (``None``: nothing did, and the service is removed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kctl.backend import noted
from kctl.controller import common
from kctl.controller.runstate import Timer
from kctl.controller.signals import InterruptGuard
from kctl.errors import GateRejected, HealthFailed, KctlError
from kctl.fleet import canary as gates
from kctl.fleet import plan as p
from kctl.fleet.service import LABEL_FLEET, LABEL_OWNER, Placement, service_spec
from kctl.fleet.swarmsecrets import materialize
from kctl.fleet.watch import Waiter
from kctl.gate import Endpoint, render_table
from kctl.secrets import api_key, resolve_env, scrub

if TYPE_CHECKING:
    from kctl.controller.context import Context
    from kctl.controller.steps import Step
    from kctl.controller.transaction import Transaction
    from kctl.fleet.spec import FleetSpec
    from kctl.fleet.view import FleetDriver, Replica
    from kctl.profile.model import Profile
    from kctl.store import Store
    from kctl.store.records import Deployment


@dataclass
class FleetState:
    """What a running fleet plan knows (the executor's only mutable state)."""

    txn_id: str
    fleet: FleetSpec
    candidate: Profile | None = None
    baseline: Profile | None = None
    #: a rollback's fixed target; a deploy's is read from the store when the revert runs
    target: tuple[Deployment, Profile] | None = None
    images: dict[str, str | None] = field(default_factory=dict)
    #: images every node that may run a replica holds (copied there, or built there)
    placed: set[str] = field(default_factory=set)
    ids: dict[str, str] = field(default_factory=dict)
    changed: bool = False
    canary_probes: dict[int, tuple[int, ...]] = field(default_factory=dict)
    gate: dict[str, Any] | None = None
    table: str | None = None
    verdict: str | None = None
    reason: str = ""
    smoked: list[str] = field(default_factory=list)
    restored: str | None = None


def place_images(ctx: Context, driver: FleetDriver, images: list[str | None]) -> set[str]:
    """Every node that may run a replica holds each image (``driver.place_image``); the
    images placed. Runs before the rollout changes anything: a node kctl cannot reach is
    refused there, not found out by Swarm mid-wave."""
    placed = set()
    for image in dict.fromkeys(i for i in images if i):
        copied = driver.place_image(image, ctx.reporter.progress)
        if copied:
            ctx.reporter.event(f"copied {image} to node(s) {', '.join(copied)}")
        placed.add(image)
    return placed


class FleetExecutor:
    def __init__(
        self, ctx: Context, store: Store, driver: FleetDriver, txn: Transaction, state: FleetState
    ) -> None:
        self.ctx, self.store, self.driver, self.txn, self.state = ctx, store, driver, txn, state
        self.timer = Timer(ctx.monotonic)
        self.guard = InterruptGuard(on_deferred=self._deferred)
        self.wait = Waiter(driver, ctx.monotonic, ctx.sleep)
        self._handlers: dict[type[Step], Callable[[Any], None]] = {
            p.CreateService: self._create,
            p.WaitFleet: self._wait_fleet,
            p.VerifyFleet: self._verify,
            p.RecordServing: self._record_serving,
            p.StartCanary: self._start_canary,
            p.WaitCanary: self._wait_canary,
            p.CanaryGate: self._canary_gate,
            p.RollWaves: self._roll_waves,
            p.RemoveCanary: self._remove_canary,
            p.RollBack: self._roll_back,
        }

    def run_steps(self, steps: tuple[Step, ...]) -> None:
        for step in steps:
            self.guard.check()  # a signal whose exception a finalizer swallowed
            if step.changes_host:
                self.state.changed = True
            with self.txn.step(step), self.timer.phase(step.name):
                self._handlers[type(step)](step)

    def _deferred(self, signal_name: str) -> None:
        self.ctx.reporter.warn(
            f"{signal_name} received: finishing the rollback of the fleet first "
            "(a second signal aborts it)"
        )

    # -- roles ---------------------------------------------------------------------------

    def _profile(self, role: str) -> Profile:
        st = self.state
        if role == "candidate" and st.candidate is not None:
            return st.candidate
        if role == "baseline" and st.baseline is not None:
            return st.baseline
        if role == "target":
            target = self._target()
            if target is not None:
                return target[1]
        raise KctlError(f"internal: the fleet plan names a {role} this command does not have")

    def _target(self) -> tuple[Deployment, Profile] | None:
        st = self.state
        if st.target is None:
            serving = self.store.serving()
            if serving is not None and serving.id != st.txn_id:
                st.target = (serving, common.profile_of(serving))
        return st.target

    def _deployment(self, role: str) -> str:
        if role == "candidate":
            return self.state.txn_id
        if role == "baseline":
            return self.state.ids["baseline"]
        target = self._target()
        assert target is not None, "resolved before"
        return target[0].id

    def spec(self, role: str, *, canary: bool = False) -> dict[str, Any]:
        """The service spec that runs ``role``'s profile as its deployment."""
        profile = self._profile(role)
        if profile.content_hash not in self.state.images:
            self.state.images[profile.content_hash] = common.image_for(self.ctx, profile)
        image = self.state.images[profile.content_hash]
        if image is not None and image not in self.state.placed:
            self.state.placed |= place_images(self.ctx, self.driver, [image])
        launch = self.ctx.backend.launch_spec(profile, self._deployment(role), image)
        nodes = tuple(n.hostname for n in self.driver.nodes())
        spec = service_spec(
            self.state.fleet, profile, launch, role="canary" if canary else "main",
            owner=str(self.ctx.state_dir), placement=Placement.of(self.state.fleet, nodes),
        )  # fmt: skip
        # the profile's secrets as Docker secrets, their values read now
        owned = {LABEL_FLEET: self.state.fleet.name, LABEL_OWNER: str(self.ctx.state_dir)}
        return materialize(spec, profile, self.state.fleet.name, owned, self.driver.put_secret)

    # -- steps ---------------------------------------------------------------------------

    def _create(self, step: p.CreateService) -> None:
        if step.role == "baseline":
            base = self._profile("baseline")
            known = self.store.known_good(base.content_hash) or self.store.new_deployment(
                kind="baseline", profile=base, runtime=self.driver.name
            )
            self.state.ids["baseline"] = known.id
        self.ctx.reporter.event(f"creating the fleet's service: {step.replicas} x {step.profile}")
        self.driver.apply(self.spec(step.role))

    def _wait_fleet(self, step: p.WaitFleet) -> None:
        if step.role == "target" and self._target() is None:
            return  # nothing served before: the revert removed the service
        profile = self._profile(step.role)
        fleet = self.state.fleet
        deadline = step.deadline_s or fleet.replicas * (
            profile.health.deadline_s + fleet.rollout.monitor_s + profile.runtime.stop_timeout_s
        )
        self.wait.fleet(self._deployment(step.role), deadline, f"{step.profile} on every replica")

    def _verify(self, step: p.VerifyFleet) -> None:
        from kctl.fleet.verify import verify_replicas

        if step.role == "target" and self._target() is None:
            return
        spec = self.spec(step.role)
        view = self.wait.fleet(self._deployment(step.role), 30.0, f"verify {step.profile}")
        verify_replicas(self._profile(step.role), spec, view)
        self.ctx.reporter.event(
            f"verified {len(view.replicas)} replicas: {step.profile} (hash, image, flags), healthy"
        )

    def _record_serving(self, step: p.RecordServing) -> None:
        profile = self._profile(step.role)
        dep_id = self._deployment(step.role)
        st = self.state
        with self.store.transaction():
            if not step.promoted:  # a baseline: the known-good `kctl rollback` returns to
                self.store.set_known_good(profile.content_hash, dep_id)
            self.store.set_serving(dep_id)
            if dep_id == st.txn_id:
                st.verdict = st.verdict or "BASELINE"
                st.reason = st.reason or "every replica verified"
                self.store.update_deployment(
                    dep_id, status="promoted", verdict=st.verdict, reason=st.reason, exit_code=0,
                    timings=self.timer.total(),
                )  # fmt: skip
                self.txn.end("promoted")
            else:
                self.store.update_deployment(
                    dep_id, status="promoted", verdict="BASELINE", exit_code=0,
                    reason="the fleet's known-good baseline, every replica verified",
                )  # fmt: skip

    def _start_canary(self, step: p.StartCanary) -> None:
        self.store.update_deployment(self.state.txn_id, status="starting")
        self.ctx.reporter.event(f"starting the canary {step.profile} on port {step.port}")
        self.driver.apply(self.spec("candidate", canary=True))

    def _wait_canary(self, step: p.WaitCanary) -> None:
        try:
            replica = self.wait.canary(step.deadline_s)
        except HealthFailed as exc:
            # the replica's log is the orchestrator's, as SGLang wrote it: its server_args
            # line holds the API key
            cand = self._profile("candidate")
            values = [*resolve_env(cand.server.secrets).values(), api_key(cand) or ""]
            exc.log_tail = scrub(exc.log_tail, values)
            raise
        self.ctx.reporter.event(f"the canary is healthy on {replica.node}:{replica.port}")

    def _canary_gate(self, step: p.CanaryGate) -> None:
        st = self.state
        cand = self._profile("candidate")
        main = self.wait.fleet(self._target_id(), 0.0, "an incumbent to measure")
        canary_view = self.driver.service("canary")
        if canary_view is None or not canary_view.replicas:
            raise HealthFailed("the canary service is gone", phase="canary")
        incumbent, canary = main.on(self._target_id())[0], canary_view.replicas[0]
        self.ctx.reporter.event(
            f"gate: canary {canary.node}:{canary.port} and incumbent slot {incumbent.slot} "
            f"({incumbent.node}:{incumbent.port}), measured at the same time"
        )
        self.store.update_deployment(st.txn_id, status="gating")
        target = self._target()
        inc_key = api_key(target[1]) if target is not None else api_key(cand)
        result = gates.gate_canary(
            cand, Endpoint(canary.host, canary.port, api_key(cand)),
            Endpoint(incumbent.host, incumbent.port, inc_key),
            fingerprint=common.fingerprint(self.ctx, cand, cand),
            clock=self.ctx.gate_clock(cand), progress=lambda g: self.ctx.reporter.progress(f"gate: {g}"),
        )  # fmt: skip
        st.gate = result.to_dict()
        self.store.save_gate_result(st.txn_id, st.gate)
        st.table = noted(self.ctx.backend, cand, render_table(result.verdict))
        st.verdict, st.reason = result.verdict.verdict, result.verdict.reason
        st.canary_probes = {o.index: o.output_ids for o in result.canary.probes if o.error is None}
        if not gates.promotes(cand, result.verdict):
            raise GateRejected(st.verdict, st.reason, st.gate, st.table)

    def _target_id(self) -> str:
        target = self._target()
        if target is None:
            raise KctlError("internal: a canary needs an incumbent serving")
        return target[0].id

    def _roll_waves(self, step: p.RollWaves) -> None:
        cand = self._profile("candidate")
        self.store.update_deployment(self.state.txn_id, status="starting")
        self.ctx.reporter.event(
            f"rolling {step.replicas} replicas to {step.profile}, {step.parallelism} at a time"
        )
        self.driver.apply(self.spec("candidate"))
        budget = (-(-step.replicas // step.parallelism)) * (
            cand.health.deadline_s + 2 * step.monitor_s + cand.runtime.stop_timeout_s + 30
        )

        def moved(r: Replica) -> None:
            label = f"replica {r.slot} ({r.node}:{r.port})"
            gates.smoke(cand, Endpoint(r.host, r.port, api_key(cand)), self.state.canary_probes,
                        step.smoke_requests, label)  # fmt: skip
            self.state.smoked.append(label)
            self.ctx.reporter.event(f"{label} runs {step.profile}: healthy, smoke gate passed")

        self.wait.waves(self.state.txn_id, budget, moved)

    def _remove_canary(self, step: p.RemoveCanary) -> None:
        if self.driver.remove("canary"):
            self.ctx.reporter.event("removed the canary service")

    def _roll_back(self, step: p.RollBack) -> None:
        target = self._target()
        if target is None:
            if self.driver.remove("main"):
                self.ctx.reporter.event("removed the fleet's service (nothing served before)")
            return
        how = self.driver.rollback(self.spec("target"))
        self.state.restored = target[0].id
        self.ctx.reporter.event(f"rolling every replica back to {target[1].name} ({how})")
