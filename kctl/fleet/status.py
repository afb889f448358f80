"""``kctl status --fleet`` and ``kctl history --fleet``: the fleet's store and journal
read next to what the orchestrator says runs (each replica's node, image, profile,
health, and the last gate of the deployment it runs). Changes nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from kctl.controller.status import Record
from kctl.fleet.loader import load_fleet
from kctl.fleet.rollout import driver_for, fleet_context
from kctl.lock import DeployLock

if TYPE_CHECKING:
    from kctl.controller.context import Context
    from kctl.fleet.view import Replica, ServiceView
    from kctl.store import Store


class ReplicaState(BaseModel):
    """One replica slot as the orchestrator sees it now (its current task)."""

    slot: int = Field(ge=1)
    task: str
    node: str
    node_state: str = Field(description="ready, down, unknown, disconnected")
    state: str = Field(
        description="the task's state: new ... starting, running, failed, shutdown, complete"
    )
    desired: str
    deployment: str
    profile: str
    profile_hash: str
    image: str
    args: list[str]
    host: str
    port: int
    error: str
    healthy: bool = Field(description="running, desired running, health check passed")


class ServedReplica(ReplicaState):
    """A replica of the main service, with the last gate of what it runs."""

    last_gate: str = Field(
        description="the verdict (or status) of the record of the deployment it runs"
    )


class ServiceState(BaseModel):
    """A fleet service as the orchestrator reports it, without its replicas."""

    name: str
    id: str
    version: int
    deployment: str = Field(description="what the service's spec runs")
    profile: str
    profile_hash: str
    image: str = Field(description="empty under --simulate (local processes)")
    desired_replicas: int
    previous_deployment: str = Field(
        description="what the previous spec ran ('' when none): a rollback goes there"
    )
    update_state: str = Field(
        description="'' (never updated), updating, completed, paused, rollback_started, "
        "rollback_completed, rollback_paused"
    )
    update_message: str


class CanaryState(ServiceState):
    """The canary service, with its replica."""

    replicas: list[ReplicaState]


class NodeState(BaseModel):
    """One node of the orchestrator."""

    model_config = {"extra": "forbid"}

    hostname: str
    state: str = Field(description="ready, down, unknown, disconnected")
    availability: str = Field(description="active, pause, drain")
    addr: str
    engine: str | None = Field(
        description="its swarm.engines entry: where kctl copies images; null: none"
    )


class FleetStatus(BaseModel):
    """The result of ``status --fleet``: exit 4 (and ``needs_attention``) when the fleet
    needs a human or ``kctl rollback --fleet``."""

    model_config = {"extra": "forbid"}

    fleet: str
    driver: str = Field(description="swarm, or simulated under --simulate")
    serving: dict[str, Any] | None = Field(
        description="the fleet's serving deployment, the full stored record (profile "
        "resolved, timings); null: none"
    )
    service: ServiceState | None = Field(
        description="the main service as the orchestrator reports it, without its replicas"
    )
    replicas: list[ServedReplica]
    nodes: list[NodeState] = Field(
        description="the orchestrator's nodes (one, this host, under --simulate)"
    )
    canary: CanaryState | None = Field(
        description="the canary service with its replica, while one exists"
    )
    rollout_running: bool = Field(description="a kctl holds the fleet's lock and a rollout is open")
    interrupted: list[str] = Field(description="rollouts a killed kctl left open")
    problems: list[str]
    needs_attention: bool
    hint: str | None = Field(description="the next command, e.g. kctl rollback --fleet FLEET")


def _last_gates(store: Store | None, view: ServiceView | None) -> dict[str, str]:
    """Per deployment a replica runs: the verdict its record ended with."""
    out: dict[str, str] = {}
    if store is None or view is None:
        return out
    for r in view.replicas:
        if r.deployment and r.deployment not in out:
            try:
                dep = store.get_deployment(r.deployment)
                out[r.deployment] = dep.verdict or dep.status
            except Exception:  # noqa: BLE001 - a replica of a record this store lacks
                out[r.deployment] = "unknown to this state dir"
    return out


def status_fleet(ctx: Context, fleet_path: str) -> FleetStatus:
    fleet = load_fleet(fleet_path)
    fctx = fleet_context(ctx, fleet)
    driver = driver_for(fctx, fleet)
    driver.check_available()
    view, canary = driver.service("main"), driver.service("canary")
    store = fctx.open_store(read_only=True) if (fctx.state_dir / "kctl.db").is_file() else None
    try:
        serving = store.serving() if store else None
        open_txns = store.open_transactions() if store else []
        gates = _last_gates(store, view)
        lock = DeployLock(fctx.state_dir).inspect()
    finally:
        if store is not None:
            store.close()
    running = lock is not None and not lock.stale
    problems = []
    if open_txns and not running:
        runs = f"{view.profile} ({view.deployment})" if view else "no service"
        problems += [f"rollout {t.txn} was interrupted; the service runs {runs}" for t in open_txns]
    if serving is not None and (view is None or not view.settled_on(serving.id)):
        on = len(view.on(serving.id)) if view else 0
        want = view.desired_replicas if view else fleet.replicas
        problems.append(f"{on}/{want} replicas run the known-good {serving.id}, healthy")
    if canary is not None and not running:
        problems.append(f"a canary service ({canary.name}) is left over")
    replicas = [
        ServedReplica.model_validate(
            {**_replica(r).model_dump(), "last_gate": gates.get(r.deployment, "")}
        )
        for r in (view.replicas if view else ())
    ]
    return FleetStatus(
        fleet=fleet.name,
        driver=driver.name,
        serving=serving.to_dict() if serving else None,
        service=None if view is None else ServiceState.model_validate(view, from_attributes=True),
        replicas=replicas,
        nodes=[
            NodeState(
                hostname=n.hostname,
                state=n.state,
                availability=n.availability,
                addr=n.addr,
                engine=fleet.swarm.engines.get(n.hostname),
            )
            for n in driver.nodes()
        ],  # fmt: skip
        canary=None
        if canary is None
        else CanaryState(
            **ServiceState.model_validate(canary, from_attributes=True).model_dump(),
            replicas=[_replica(r) for r in canary.replicas],
        ),
        rollout_running=running and bool(open_txns),
        interrupted=[t.txn for t in open_txns] if not running else [],
        problems=problems,
        needs_attention=bool(problems),
        hint=f"kctl rollback --fleet {fleet_path}" if problems else None,
    )


def _replica(r: Replica) -> ReplicaState:
    return ReplicaState.model_validate(r, from_attributes=True)


def history_fleet(ctx: Context, fleet_path: str, limit: int) -> list[Record]:
    """The fleet's rollouts and rollbacks, newest first, as ``kctl history`` lists a host's."""
    from kctl.controller.status import history

    fleet = load_fleet(fleet_path)
    return history(fleet_context(ctx, fleet), limit)
