"""The ``simulated`` fleet driver: ``--simulate``'s stand-in for Docker Swarm, behind the
same :class:`~kctl.fleet.view.FleetDriver` seam as :class:`~kctl.fleet.swarm.SwarmDriver`
(chosen once, by the backend). A product feature of ``--simulate``, like the simulator
itself: it takes the very service specs :func:`kctl.fleet.service.service_spec` renders
and runs each replica as a local process (:class:`~kctl.runtime.local.LocalRuntime`) of the
spec's own start wrapper and launch argv (the simulator), on the slot's port.

What it models (see docs/fleet.md, "Under --simulate"): one node (this host), a service's
spec and previous spec, replicated tasks per slot, the health check (``GET /health``),
Swarm's rolling update (parallelism, stop-first, monitor window, failure action rollback),
its rollback to the previous spec, the restart policy, and task states Swarm's words name.
What it does not: placement constraints, GPUs (generic resources), more than one node or a
node going Down, a running task's repeated health checks (a task fails when its process
exits or never passes its first check), and a background manager (the reconciliation runs
inside each kctl command that looks at the fleet: :mod:`kctl.fleet.simorch`).
"""

from __future__ import annotations

import copy
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kctl.fleet import simstate
from kctl.fleet.service import LABEL_DEPLOYMENT, LABEL_PROFILE, LABEL_PROFILE_HASH, LABEL_ROLE
from kctl.fleet.simorch import Orchestrator, Service, Task, current, deployment_of, instance
from kctl.fleet.simorch import swap_to_previous as _swap
from kctl.fleet.view import Node, Replica, ServiceView
from kctl.runtime.local import LocalRuntime
from kctl.statedir import ensure_dir, write_new


class SimulatedFleet:
    """The fleet's services as local simulator processes; state in ``state_dir/orchestrator``."""

    name = "simulated"
    orchestrator = "the simulated orchestrator"

    def __init__(
        self,
        fleet_name: str,
        state_dir: Path,
        *,
        faults: simstate.Faults | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.fleet = fleet_name
        self.dir = Path(state_dir) / "orchestrator"
        self.faults = simstate.faults_from_env() if faults is None else faults
        self.clock = clock
        self.rt = LocalRuntime(self.dir)
        self.host = socket.gethostname()

    def close(self) -> None:
        pass

    def check_available(self) -> None:
        self.rt.check_available()

    def nodes(self) -> list[Node]:
        return [Node(hostname=self.host, state="ready", availability="active", addr="127.0.0.1")]

    # -- the manager ---------------------------------------------------------------------

    def _act(self, change: Callable[[dict[str, Any], Orchestrator], Any]) -> Any:
        """Under the state's lock: catch up (one tick), then ``change``, then tick again."""
        with simstate.locked(self.dir) as state:

            def persist() -> None:
                simstate.save(self.dir / "state.json", state)

            orch = Orchestrator(state, self.rt, self.clock(), persist, self.dir / "secrets")
            orch.tick()
            out = change(state, orch)
            orch.tick()
            return out

    def _faults_for(self, spec: dict[str, Any]) -> dict[str, str]:
        profile, role = spec["Labels"][LABEL_PROFILE], spec["Labels"][LABEL_ROLE]
        return {
            str(slot): ",".join(faults)
            for (p, r, slot), faults in self.faults.items()
            if p == profile and r == role
        }

    # -- the driver ----------------------------------------------------------------------

    def service(self, role: str) -> ServiceView | None:
        return self._act(lambda state, _o: _view(state, role, self.host))  # type: ignore[no-any-return]

    def apply(self, spec: dict[str, Any]) -> None:
        role = spec["Labels"][LABEL_ROLE]

        def change(state: dict[str, Any], orch: Orchestrator) -> None:
            svc = state["services"].get(role)
            faults = self._faults_for(spec)
            if svc is None:
                svc = {
                    "id": uuid.uuid4().hex[:12], "version": 1, "spec": copy.deepcopy(spec),
                    "previous": None, "faults": faults, "previous_faults": {},
                    "update": {"state": "", "message": "", "batch": [], "healthy_at": None},
                }  # fmt: skip
                state["services"][role] = svc
                for slot in range(1, spec["Mode"]["Replicated"]["Replicas"] + 1):
                    orch.start(role, svc, slot)
                return
            svc["previous"], svc["previous_faults"] = svc["spec"], svc["faults"]
            svc["spec"], svc["faults"] = copy.deepcopy(spec), faults
            svc["version"] += 1
            _begin(svc, "updating", "update in progress")

        self._act(change)

    def rollback(self, spec: dict[str, Any]) -> str:
        """Back to ``spec`` (matched by its deployment label): the orchestrator's rollback
        when the previous spec is it, else an update to it."""
        role, want = spec["Labels"][LABEL_ROLE], spec["Labels"][LABEL_DEPLOYMENT]

        def change(state: dict[str, Any], _orch: Orchestrator) -> str:
            svc = state["services"].get(role)
            if svc is None:
                return "create"
            if deployment_of(svc["spec"]) == want:
                return "already"
            if deployment_of(svc["previous"]) == want:
                _swap(svc)
                _begin(svc, "rollback_started", "manually requested rollback")
                return "rollback"
            return "update"

        how: str = self._act(change)
        if how in ("create", "update"):
            self.apply(spec)
        return "created" if how == "create" else how

    def put_secret(self, name: str, data: bytes, labels: dict[str, str]) -> str:
        """Swarm's secret store, simulated: ``orchestrator/secrets/<name>``, 0600 (Swarm
        keeps its secrets encrypted in its Raft log; here the state dir's modes guard it)."""
        path = ensure_dir(self.dir / "secrets") / name
        if not path.exists():  # names are content digests: one that exists holds ``data``
            write_new(path, data)
        return name

    def remove(self, role: str) -> bool:
        def change(state: dict[str, Any], orch: Orchestrator) -> bool:
            if state["services"].pop(role, None) is None:
                return False
            for t in [t for t in state["tasks"] if t["role"] == role]:
                orch.stop(t)
            state["tasks"] = [t for t in state["tasks"] if t["role"] != role]
            return True

        return bool(self._act(change))

    def logs(self, role: str, tail: int) -> str:
        with simstate.locked(self.dir) as state:
            tasks = sorted(
                (t for t in state["tasks"] if t["role"] == role and t["ref"]),
                key=lambda t: t["seq"],
            )
        return self.rt.logs(instance(tasks[-1]), tail) if tasks else ""

    def place_image(self, image: str, progress: Callable[[str], None]) -> list[str]:
        return []  # one node, and the simulated replicas run no image


def _begin(svc: Service, state: str, message: str) -> None:
    svc["update"] = {"state": state, "message": message, "batch": [], "healthy_at": None}


def _replica(t: Task, host: str) -> Replica:
    tags = t["labels"]
    return Replica(
        slot=t["slot"], task=t["id"], node=host, node_state="ready", state=t["state"],
        desired=t["desired"], deployment=tags.get(LABEL_DEPLOYMENT, ""),
        profile=tags.get(LABEL_PROFILE, ""), profile_hash=tags.get(LABEL_PROFILE_HASH, ""),
        image=t["image"], args=tuple(t["args"]), host="127.0.0.1", port=t["port"],
        error=t["error"],
    )  # fmt: skip


def _view(state: dict[str, Any], role: str, host: str) -> ServiceView | None:
    svc = state["services"].get(role)
    if svc is None:
        return None
    spec, tags = svc["spec"], svc["spec"]["Labels"]
    tasks = current(state, role)
    return ServiceView(
        name=spec["Name"], id=svc["id"], version=svc["version"],
        deployment=tags.get(LABEL_DEPLOYMENT, ""), profile=tags.get(LABEL_PROFILE, ""),
        profile_hash=tags.get(LABEL_PROFILE_HASH, ""),
        image=spec["TaskTemplate"]["ContainerSpec"]["Image"],
        desired_replicas=int(spec["Mode"]["Replicated"]["Replicas"]),
        previous_deployment=deployment_of(svc["previous"]),
        update_state=svc["update"]["state"], update_message=svc["update"]["message"],
        replicas=tuple(_replica(tasks[s], host) for s in sorted(tasks)),
    )  # fmt: skip
