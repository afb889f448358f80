"""What a fleet driver reports: the service and its replicas, as plain values. Both
drivers (:mod:`kctl.fleet.swarm`, :mod:`kctl.fleet.simfleet`) answer with these, and the
rollout, ``status`` and the tests read only these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

#: Swarm's update states that mean the service's spec went (or goes) back to the previous one
ROLLED_BACK = ("rollback_started", "rollback_completed", "rollback_paused")
#: Swarm's update states while it is still replacing tasks (an update or a rollback)
IN_PROGRESS = ("updating", "rollback_started")


@dataclass(frozen=True)
class Replica:
    """One replica slot as the orchestrator sees it now (its current task)."""

    slot: int
    task: str
    node: str
    #: the node's state: ready, down, unknown, disconnected
    node_state: str
    #: the task's state (Swarm: new ... starting, running, failed, shutdown); Swarm calls a
    #: task with a health check running only once the check passed
    state: str
    desired: str
    deployment: str
    profile: str
    profile_hash: str
    image: str
    args: tuple[str, ...]
    host: str
    port: int
    error: str = ""

    @property
    def healthy(self) -> bool:
        return self.state == "running" and self.desired == "running"


@dataclass(frozen=True)
class ServiceView:
    """A fleet service (the main one or the canary) and its replicas."""

    name: str
    id: str
    version: int
    #: what the service's spec runs now
    deployment: str
    profile: str
    profile_hash: str
    image: str
    desired_replicas: int
    #: what the spec before it ran ("" when none): Swarm's rollback goes there
    previous_deployment: str = ""
    #: Swarm's UpdateStatus (state, message), "" when no update ever ran
    update_state: str = ""
    update_message: str = ""
    replicas: tuple[Replica, ...] = field(default_factory=tuple)

    def on(self, deployment: str) -> list[Replica]:
        """The replicas that run ``deployment`` and are healthy."""
        return [r for r in self.replicas if r.deployment == deployment and r.healthy]

    def settled_on(self, deployment: str) -> bool:
        """Every desired replica runs ``deployment``, healthy, the spec says so, and the
        orchestrator is done with it: no update or rollback still replacing tasks (one that
        has not yet touched a slot, or is in its last monitor window, may still)."""
        return (
            self.deployment == deployment
            and len(self.on(deployment)) >= self.desired_replicas
            and self.update_state not in IN_PROGRESS
        )


@dataclass(frozen=True)
class Node:
    hostname: str
    state: str
    availability: str
    addr: str
    #: the orchestrator's node id ("" where it has none)
    id: str = ""
    #: the node's labels, sorted (``key=value`` placement constraints match them)
    labels: tuple[tuple[str, str], ...] = ()


class FleetDriver(Protocol):
    """What the rollout needs from an orchestrator. Every method raises
    :class:`~kctl.errors.KctlError` subclasses only."""

    name: str
    #: how messages name it: "Swarm", "the simulated orchestrator"
    orchestrator: str

    def check_available(self) -> None:
        """RuntimeUnavailable (exit 5, with the remedy) when the orchestrator cannot be used."""

    def nodes(self) -> list[Node]: ...

    def service(self, role: str) -> ServiceView | None:
        """The fleet's main service or its canary (``role``), None when absent."""

    def apply(self, spec: dict[str, Any]) -> None:
        """Create the service of ``spec``, or start its rolling update to ``spec``."""

    def rollback(self, spec: dict[str, Any]) -> str:
        """Move the service back to ``spec``: Swarm's rollback when the previous spec is
        it, else an update to it; nothing when it already runs it. Says which."""

    def remove(self, role: str) -> bool:
        """Remove the service of ``role``; False when there was none."""

    def put_secret(self, name: str, data: bytes, labels: dict[str, str]) -> str:
        """The id of the orchestrator's secret ``name`` holding ``data``, created with
        ``labels`` when absent (names are content digests: one that exists holds it)."""

    def logs(self, role: str, tail: int) -> str: ...

    def place_image(self, image: str, progress: Callable[[str], None]) -> list[str]:
        """Make every node that may run a replica hold ``image`` before it is rolled out
        (UsageError, exit 2, for a node kctl cannot reach); returns the nodes copied to."""
