"""``kctl stop --fleet FLEET --yes``: take every replica of the fleet down.

    lock (the fleet's) → reconcile interrupted rollouts → orchestrator reachable → every
    service found is one this state dir rolled out (else refused, nothing removed) →
    remove the canary service, then the main service (each step journalled before it
    acts) → nothing recorded serving

As on one host, the known-good record stays: ``kctl rollback --fleet FLEET`` creates the
service again on it, every replica verified, and ``kctl deploy`` starts from scratch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from kctl.controller.host import changing_host, new_txn_id
from kctl.controller.steps import Step
from kctl.errors import KctlError, PreconditionFailed, UsageError
from kctl.fleet.loader import load_fleet
from kctl.fleet.rollout import driver_for, fleet_context, reconcile

if TYPE_CHECKING:
    from kctl.controller.context import Context
    from kctl.store import Store


@dataclass(frozen=True)
class RemoveService(Step):
    """Remove the fleet's service of ``role``: the orchestrator stops its replicas."""

    name: ClassVar[str] = "remove-service"
    changes_host: ClassVar[bool] = True
    role: Literal["main", "canary"]

    def describe(self) -> str:
        return f"remove the fleet's {self.role} service (if any)"


#: the canary first: it is the replica a rollout would still gate against the main service
STEPS = (RemoveService("canary"), RemoveService("main"))


class StoppedReplica(BaseModel):
    """A replica that was running when its service was removed."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["main", "canary"]
    slot: int
    node: str
    port: int
    profile: str
    deployment: str


class FleetStopResult(BaseModel):
    """The result of ``stop --fleet FLEET --yes``: the fleet's services removed, every
    replica stopped; the known-good record kept (``kctl rollback --fleet FLEET`` brings it
    back)."""

    model_config = ConfigDict(extra="forbid")

    fleet: str
    driver: str = Field(description="swarm, or simulated under --simulate")
    removed: list[str] = Field(
        description="the services removed (the canary first); empty: nothing ran"
    )
    stopped: list[StoppedReplica]
    known_good: str | None = Field(
        description="the deployment `kctl rollback --fleet` would restore"
    )
    warnings: list[str]


def stop_fleet(ctx: Context, fleet_path: str, *, yes: bool) -> FleetStopResult:
    """Remove the fleet's services; ``stopped``: one row per replica that was running."""
    if not yes:
        raise UsageError(
            "kctl stop --fleet takes every replica of the fleet down",
            hint="pass --yes to confirm",
        )
    fleet = load_fleet(fleet_path)
    fctx = fleet_context(ctx, fleet)
    driver = driver_for(fctx, fleet)
    with changing_host(fctx, f"kctl stop --fleet {fleet_path}") as host:
        driver.check_available()
        reconcile(host, driver, resolver="stop")
        views = {step.role: driver.service(step.role) for step in STEPS}
        for view in views.values():
            if view is not None and not _recorded(host.store, view.deployment):
                raise PreconditionFailed(
                    f"service {view.name} runs {view.deployment or 'a spec kctl did not label'}, "
                    f"which this state dir ({fctx.state_dir}) never recorded: nothing was stopped",
                    hint="use the --state-dir that rolled it out, or remove it yourself "
                    f"(`docker service rm {view.name}`)",
                )
        txn = host.transaction(new_txn_id("s"))
        stopped: list[StoppedReplica] = []
        removed: list[str] = []
        for step in STEPS:
            view = views[step.role]
            with txn.step(step):
                if driver.remove(step.role):
                    removed.append(view.name if view else step.role)
                    stopped += [
                        StoppedReplica(
                            role=step.role,
                            slot=r.slot,
                            node=r.node,
                            port=r.port,
                            profile=r.profile,
                            deployment=r.deployment,
                        )  # fmt: skip
                        for r in (view.replicas if view else ())
                    ]
                    fctx.reporter.event(f"removed the {step.role} service {removed[-1]}")
        host.store.set_serving(None)
        txn.end("stopped")
        known_good = host.store.last_known_good()
    return FleetStopResult(
        fleet=fleet.name,
        driver=driver.name,
        removed=removed,
        stopped=stopped,
        known_good=known_good.id if known_good else None,
        warnings=host.warnings,
    )


def _recorded(store: Store, deployment: str) -> bool:
    """Whether the fleet's store holds the deployment a service runs."""
    if not deployment:
        return False
    try:
        return store.get_deployment(deployment).id == deployment
    except KctlError:
        return False
