"""``kctl plan PROFILE --fleet FLEET``: the rollout a deploy would run on the fleet, as data.
Changes nothing and asks no orchestrator: what serves is read from the fleet's store (what
kctl recorded), the steps are :func:`kctl.fleet.plan.plan_fleet_deploy`'s and the service spec
is :func:`kctl.fleet.service.service_spec`'s, with the image tag a build would give."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from kctl.controller import common
from kctl.controller.plan import ReleaseInfo
from kctl.fleet.loader import load_fleet
from kctl.fleet.plan import Observed, plan_fleet_deploy
from kctl.fleet.service import Placement, service_spec
from kctl.launch import argv_warnings, release_info
from kctl.profile.compare import gate_mismatches
from kctl.runtime import kind_of
from kctl.secrets import exposure_warnings

if TYPE_CHECKING:
    from kctl.controller.context import Context


class FleetPlan(BaseModel):
    """The result of ``plan PROFILE --fleet FLEET``: the rollout a deploy would run on the
    fleet. Reads the fleet's store only (no orchestrator is asked); changes nothing."""

    fleet: str
    source: str = Field(description="the fleet file")
    orchestrator: Literal["Swarm", "the simulated orchestrator"]
    manager: str | None = Field(description="swarm.manager; null: DOCKER_HOST")
    replicas: int
    min_healthy: int = Field(description="replicas serving at every step")
    node_engines: dict[str, str] = Field(
        description="swarm.engines: where kctl copies the serving images"
    )
    profile: dict[str, Any] = Field(description="the resolved profile")
    profile_hash: str
    baseline: str | None
    serving: str | None = Field(description="the deployment the fleet's store says serves")
    serving_profile: str | None
    already_serving: bool = Field(description="a deploy does nothing without --force")
    sglang: ReleaseInfo
    warnings: list[str]
    image: str | None = Field(description="the tag a build gives; null under --simulate")
    preconditions: list[str]
    steps: list[str]
    revert: list[str]
    plan: dict[str, Any] = Field(description="the steps as data, as the journal records them")
    placement_note: str | None
    service_spec: dict[str, Any] = Field(
        description="the Engine API ServiceSpec of the fleet's service"
    )


def plan_fleet(ctx: Context, profile_path: str, fleet_path: str) -> FleetPlan:
    from kctl.image import plan_image
    from kctl.profile import profile_to_dict

    candidate, baseline = common.load_pair(profile_path, ctx.overrides)
    fleet = load_fleet(fleet_path)
    state = ctx.state_dir / "fleets" / fleet.name
    seen, serving_id, mismatches = Observed(None), None, []
    if (state / "kctl.db").is_file():
        store = dataclasses.replace(ctx, state_dir=state, _runtimes={}).open_store(read_only=True)
        try:
            serving = store.serving()
        finally:
            store.close()
        if serving is not None:
            seen = Observed(serving.profile_name, serving.profile_hash)
            serving_id = serving.id
            incumbent = common.profile_of(serving)
            mismatches = gate_mismatches(candidate, incumbent, "the incumbent")
    steps = plan_fleet_deploy(fleet, candidate, baseline, seen)
    # under --simulate the replicas run the simulator locally: no image is built
    built = kind_of(ctx.runtime_kind(candidate)).builds_images
    image = str(plan_image(candidate, repo_root=ctx.repo_root)["tag"]) if built else None
    launch = common.launch_spec_for(ctx, candidate, "<new>", image)
    placement = Placement.of(fleet)  # no Swarm asked: a list of nodes is applied at deploy
    return FleetPlan.model_validate(
        {
            "fleet": fleet.name,
            "source": fleet.source,
            "orchestrator": "the simulated orchestrator" if ctx.backend.simulated else "Swarm",
            "manager": fleet.swarm.manager,
            "replicas": fleet.replicas,
            "min_healthy": fleet.min_healthy,
            "node_engines": dict(fleet.swarm.engines),
            "profile": profile_to_dict(candidate),
            "profile_hash": candidate.content_hash,
            "baseline": baseline.source if baseline else None,
            "serving": serving_id,
            "serving_profile": seen.serving,
            #: a deploy of the profile that serves does nothing without --force
            "already_serving": seen.serving_hash == candidate.content_hash,
            "sglang": release_info(candidate),
            "warnings": [
                *argv_warnings(candidate),
                *mismatches,
                *exposure_warnings(candidate, bind=fleet.bind, where=fleet.source),
            ],
            "image": image,
            "preconditions": [
                "the fleet's lock",
                "reconcile interrupted rollouts",
                "the Swarm manager reachable",
                "build images (content-addressed; skipped when unchanged)",
                "the images on every node that may run a replica (copied through swarm.engines)",
            ],
            "steps": [s.describe() for s in steps.steps],
            "revert": [s.describe() for s in steps.revert],
            "plan": steps.to_dict(),
            "placement_note": (
                f"swarm.nodes {list(fleet.swarm.nodes)}: a deploy adds one node.hostname!= "
                "constraint for each other node of the Swarm (Swarm cannot say 'one of')"
                if len(fleet.swarm.nodes) > 1
                else None
            ),
            "service_spec": service_spec(
                fleet, candidate, launch, owner=str(state), placement=placement
            ),  # fmt: skip
        }
    )
