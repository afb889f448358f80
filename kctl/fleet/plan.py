"""A fleet rollout as data: the steps (values, journalled before each acts) and the pure
planner that picks them from what the store and the orchestrator say.

    (no service yet)  create the service on the baseline → wait every replica → verify
    canary            start the canary service → wait it healthy → gate it against one live
                      incumbent replica, both measured at the same time, same workload
    waves             Swarm's rolling update to the candidate, ``parallelism`` replicas a
                      batch; each moved batch health-checked (Swarm) and smoke-gated (kctl)
    promote           remove the canary, verify every replica, record the candidate serving
    abort (revert)    remove the canary, roll the service back to what served (Swarm's
                      rollback), verify every replica's identity and health
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from kctl.controller.steps import Plan, Step
from kctl.fleet.spec import FleetSpec
from kctl.profile.model import Profile

#: whose spec a step acts on: the profile being rolled out, its baseline (created when no
#: service runs yet), or the deployment a revert or rollback returns to
FleetRole = Literal["candidate", "baseline", "target"]


@dataclass(frozen=True)
class CreateService(Step):
    name: ClassVar[str] = "create-service"
    changes_host: ClassVar[bool] = True
    role: FleetRole
    profile: str
    replicas: int

    def describe(self) -> str:
        return f"create the fleet's service: {self.replicas} replicas of the {self.role} {self.profile}"


@dataclass(frozen=True)
class WaitFleet(Step):
    """Every replica runs the role's spec, healthy (Swarm's health check), within the deadline."""

    name: ClassVar[str] = "wait-fleet"
    role: FleetRole
    profile: str
    deadline_s: float

    def describe(self) -> str:
        return f"wait until every replica runs the {self.role} {self.profile}, healthy"


@dataclass(frozen=True)
class VerifyFleet(Step):
    """Each replica's identity (profile hash, image, flags) and its health, over HTTP."""

    name: ClassVar[str] = "verify-fleet"
    role: FleetRole
    profile: str

    def describe(self) -> str:
        return f"verify each replica: the {self.role} {self.profile} (hash, image, flags), healthy"


@dataclass(frozen=True)
class RecordServing(Step):
    """The verified role's deployment becomes the fleet's known-good, serving."""

    name: ClassVar[str] = "record-serving"
    role: FleetRole
    profile: str
    promoted: bool = False

    def describe(self) -> str:
        return f"record the {self.role} {self.profile} as the fleet's known-good, serving"


@dataclass(frozen=True)
class StartCanary(Step):
    name: ClassVar[str] = "start-canary"
    changes_host: ClassVar[bool] = True
    profile: str
    port: int

    def describe(self) -> str:
        return f"start the canary {self.profile} (one replica, port {self.port})"


@dataclass(frozen=True)
class WaitCanary(Step):
    name: ClassVar[str] = "wait-canary"
    profile: str
    deadline_s: float

    def describe(self) -> str:
        return f"wait until the canary is healthy (deadline {self.deadline_s:g} s)"


@dataclass(frozen=True)
class CanaryGate(Step):
    name: ClassVar[str] = "canary-gate"
    profile: str
    contexts: tuple[int, ...]

    def describe(self) -> str:
        return (
            f"gate the canary {self.profile} against a live incumbent replica, both measured "
            "at the same time with the same workload (throughput + correctness)"
        )


@dataclass(frozen=True)
class RollWaves(Step):
    """Start Swarm's rolling update to the candidate, then watch it batch by batch."""

    name: ClassVar[str] = "roll-waves"
    changes_host: ClassVar[bool] = True
    profile: str
    replicas: int
    parallelism: int
    monitor_s: float
    smoke_requests: int

    def describe(self) -> str:
        waves = -(-self.replicas // self.parallelism)
        return (
            f"move {self.replicas} replicas to {self.profile} in {waves} wave(s) of "
            f"{self.parallelism} (Swarm rolling update, stop-first); each wave healthy for "
            f"{self.monitor_s:g} s and smoke-gated ({self.smoke_requests} greedy requests a replica)"
        )


@dataclass(frozen=True)
class RemoveCanary(Step):
    name: ClassVar[str] = "remove-canary"
    changes_host: ClassVar[bool] = True

    def describe(self) -> str:
        return "remove the canary service (if any)"


@dataclass(frozen=True)
class RollBack(Step):
    """Swarm's rollback of the service to the target's spec (or an update to it)."""

    name: ClassVar[str] = "roll-back"
    changes_host: ClassVar[bool] = True
    profile: str | None

    def describe(self) -> str:
        if self.profile is None:
            return "remove the fleet's service (nothing served before)"
        return f"roll every replica back to {self.profile} (Swarm's rollback of the service)"


@dataclass(frozen=True)
class Observed:
    """What the fleet's store and orchestrator say, as far as a plan depends on it."""

    #: the profile name the fleet's service runs (store and service agree), None: no service
    serving: str | None
    serving_hash: str | None = None


def _revert(target: str | None) -> tuple[Step, ...]:
    if target is None:
        return (RemoveCanary(), RollBack(profile=None))
    return (
        RemoveCanary(),
        RollBack(profile=target),
        WaitFleet(role="target", profile=target, deadline_s=0),
        VerifyFleet(role="target", profile=target),
    )


def _waves(fleet: FleetSpec, candidate: Profile) -> tuple[Step, ...]:
    r = fleet.rollout
    return (
        RollWaves(
            profile=candidate.name,
            replicas=fleet.replicas,
            parallelism=r.parallelism,
            monitor_s=r.monitor_s,
            smoke_requests=r.smoke_requests,
        ),  # fmt: skip
        RemoveCanary(),
        VerifyFleet(role="candidate", profile=candidate.name),
    )


def plan_fleet_deploy(
    fleet: FleetSpec, candidate: Profile, baseline: Profile | None, seen: Observed
) -> Plan:
    """The rollout of ``candidate`` on ``fleet``: gated against a live incumbent when one
    serves; a baseline profile (``baseline`` None) is rolled out without a canary and
    recorded as the known-good once every replica is verified."""
    deadline = candidate.health.deadline_s
    steps: tuple[Step, ...] = ()
    target = seen.serving
    if seen.serving is None:
        first = candidate if baseline is None else baseline
        role: FleetRole = "candidate" if baseline is None else "baseline"
        steps += (
            CreateService(role=role, profile=first.name, replicas=fleet.replicas),
            WaitFleet(role=role, profile=first.name, deadline_s=first.health.deadline_s),
            VerifyFleet(role=role, profile=first.name),
            RecordServing(role=role, profile=first.name),
        )
        if baseline is None:
            return Plan("deploy", steps, _revert(None))
        target = baseline.name
    elif baseline is None:
        steps += _waves(fleet, candidate)
        steps += (RecordServing(role="candidate", profile=candidate.name, promoted=True),)
        return Plan("deploy", steps, _revert(target))
    steps += (
        StartCanary(profile=candidate.name, port=fleet.port(0, spare=True)),
        WaitCanary(profile=candidate.name, deadline_s=deadline),
        CanaryGate(profile=candidate.name, contexts=tuple(candidate.gate.contexts)),
    )
    steps += _waves(fleet, candidate)
    steps += (RecordServing(role="candidate", profile=candidate.name, promoted=True),)
    return Plan("deploy", steps, _revert(target))


def plan_fleet_rollback(target: str) -> Plan:
    """Every replica back to ``target``, verified; no revert (a failure is DEGRADED)."""
    return Plan("rollback", _revert(target))
