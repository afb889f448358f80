"""Waiting on a fleet: every replica on a spec, the canary healthy, a rolling update
batch by batch. Reads the driver only; what to do about what it sees is the caller's.
Each wait is a :func:`~kctl.poll.poll_until`; clocks and sleeps are injected."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from kctl.errors import FleetPaused, HealthFailed, KctlError
from kctl.fleet.view import ROLLED_BACK, FleetDriver, Replica, ServiceView
from kctl.poll import poll_until

T = TypeVar("T")

#: seconds between two looks at the orchestrator
POLL_S = 0.5
#: task states after which a canary (never restarted) will not serve
DEAD_STATES = ("failed", "rejected", "shutdown", "complete", "orphaned", "remove")
#: node states of a node the manager lost (Swarm: heartbeats stopped, or its session closed)
LOST_STATES = ("down", "disconnected")


class RolloutFailed(HealthFailed):
    """The orchestrator rolled the update back (a moved replica failed its health check or
    died in its monitor window), or a wave did not settle in time."""


@dataclass
class Waiter:
    driver: FleetDriver
    monotonic: Callable[[], float]
    sleep: Callable[[float], None]
    #: every node seen running one of the fleet's replicas while this command watched
    seen: set[str] = field(default_factory=set)

    def _main(self) -> ServiceView:
        view = self.driver.service("main")
        if view is None:
            raise KctlError(
                "the fleet's service is gone (removed behind kctl's back?)",
                hint="`kctl status --fleet FLEET` shows what runs; `kctl rollback --fleet FLEET` recreates it",
            )
        self.seen.update(r.node for r in view.replicas if r.node)
        return view

    def check_nodes(self, view: ServiceView) -> None:
        """A node that went Down pauses the rollout: not the candidate's failure. Counted:
        the nodes of the replicas now, and every node that ran one while kctl watched
        (recorded by each look at the service; the orchestrator may already have moved that
        node's replicas off it, or be trying to)."""
        lost = {r.node for r in view.replicas if r.node and r.node_state in LOST_STATES}
        lost.update(n.hostname for n in self.driver.nodes()
                    if n.hostname in self.seen and n.state in LOST_STATES)  # fmt: skip
        down = sorted(lost)
        if down:
            raise FleetPaused(
                f"rollout paused: node(s) {', '.join(down)} went Down; the replicas there are "
                "not the candidate's failure, so nothing was rolled back",
                hint="bring the node back (or drain it), then `kctl status --fleet FLEET`; "
                "`kctl rollback --fleet FLEET` returns every replica to the known-good",
            )

    def _poll(
        self,
        look: Callable[[], T],
        done: Callable[[T], bool],
        deadline_s: float,
        timed_out: Callable[[T], BaseException],
    ) -> T:
        return poll_until(
            look, done, deadline_s=deadline_s, interval_s=POLL_S, clock=self.monotonic,
            sleep=self.sleep, timed_out=timed_out,
        )  # fmt: skip

    def fleet(self, deployment: str, deadline_s: float, what: str) -> ServiceView:
        """Every desired replica runs ``deployment``, healthy."""

        def settled(view: ServiceView) -> bool:
            if view.settled_on(deployment):
                return True
            self.check_nodes(view)
            unplaced = [r for r in view.replicas if "no suitable node" in r.error]
            if unplaced and len(unplaced) == len(view.replicas) - len(view.on(deployment)):
                raise HealthFailed(
                    f"{what}: Swarm finds no node for {len(unplaced)} replica(s): {unplaced[0].error}",
                    phase="fleet",
                    hint="check the fleet's swarm.node_label / nodes and gpus_per_replica "
                    "against the nodes (`docker node ls`, their generic resources)",
                )
            return False

        def late(view: ServiceView) -> HealthFailed:
            return HealthFailed(
                f"{what}: {len(view.on(deployment))}/{view.desired_replicas} replicas "
                f"healthy after {deadline_s:g} s ({_states(view)})",
                phase="fleet",
            )

        return self._poll(self._main, settled, deadline_s, late)

    def canary(self, deadline_s: float) -> Replica:
        def look() -> Replica | None:
            view = self.driver.service("canary")
            return view.replicas[0] if view and view.replicas else None

        def healthy(replica: Replica | None) -> bool:
            if replica is not None and replica.healthy:
                return True
            if replica is not None and replica.state in DEAD_STATES:
                tail = self.driver.logs("canary", 20)
                raise HealthFailed(
                    f"the canary {replica.state}: {replica.error or 'no error given'}",
                    phase="canary", log_tail=tail,
                )  # fmt: skip
            return False

        def late(replica: Replica | None) -> HealthFailed:
            state = replica.state if replica else "no task yet"
            return HealthFailed(
                f"the canary was not healthy within {deadline_s:g} s (task {state})",
                phase="canary", log_tail=self.driver.logs("canary", 20),
            )  # fmt: skip

        replica = self._poll(look, healthy, deadline_s, late)
        assert replica is not None  # healthy() says yes to a replica only
        return replica

    def waves(
        self, deployment: str, deadline_s: float, on_moved: Callable[[Replica], None]
    ) -> ServiceView:
        """Watch the rolling update to ``deployment``: ``on_moved`` once per replica that
        runs it healthy (it raises to abort); done when every replica does. Raises
        :class:`RolloutFailed` when Swarm rolls the update back."""
        seen: set[tuple[int, str]] = set()

        def look() -> ServiceView:
            view = self._main()
            if view.deployment != deployment or view.update_state in ROLLED_BACK:
                raise RolloutFailed(
                    f"{self.driver.orchestrator} rolled the update back: "
                    f"{view.update_message or view.update_state}",
                    phase="waves",
                )
            for r in view.on(deployment):
                if (r.slot, r.task) not in seen:
                    seen.add((r.slot, r.task))
                    on_moved(r)
            return view

        def settled(view: ServiceView) -> bool:
            if view.settled_on(deployment):
                return True
            self.check_nodes(view)
            return False

        def late(view: ServiceView) -> RolloutFailed:
            return RolloutFailed(
                f"the waves did not finish within {deadline_s:g} s ({_states(view)})",
                phase="waves",
            )

        return self._poll(look, settled, deadline_s, late)


def _states(view: ServiceView) -> str:
    return ", ".join(
        f"slot {r.slot}: {r.profile or '?'} {r.state}" + (f" ({r.error})" if r.error else "")
        for r in view.replicas
    )
