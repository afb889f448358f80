"""``kctl plan PROFILE --fleet FLEET``: the rollout a deploy would run on the fleet, as data.
Changes nothing and asks no orchestrator: what serves is read from the fleet's store (what
kctl recorded), the steps are :func:`kctl.fleet.plan.plan_fleet_deploy`'s and the service spec
is :func:`kctl.fleet.service.service_spec`'s, with the image tag a build would give."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from kctl.controller import common
from kctl.fleet.loader import load_fleet
from kctl.fleet.plan import Observed, plan_fleet_deploy
from kctl.fleet.service import Placement, service_spec
from kctl.launch import argv_warnings, release_info
from kctl.profile.compare import gate_mismatches
from kctl.runtime import kind_of
from kctl.secrets import exposure_warnings

if TYPE_CHECKING:
    from kctl.controller.context import Context


def plan_fleet(ctx: Context, profile_path: str, fleet_path: str) -> dict[str, Any]:
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
    return {
        "fleet": fleet.name,
        "source": fleet.source,
        "orchestrator": "the simulated orchestrator"
        if ctx.backend.describe()["simulate"]
        else "Swarm",
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


def plan_fleet_text(result: dict[str, Any]) -> str:
    import json

    from kctl.launch import describe_release

    serving = result["serving"]
    lines = [
        f"fleet {result['fleet']} ({result['source']}): {result['replicas']} replicas on "
        f"{result['orchestrator']}, at least {result['min_healthy']} serving at every step",
        f"profile {result['profile']['name']} (hash {result['profile_hash'][:12]}), "
        f"image {result['image'] or 'none (simulated replicas run locally)'}",
        f"serving: {result['serving_profile']} ({serving})" if serving else "serving: nothing",
        *(
            ["  it serves this very profile: `kctl deploy` does nothing without --force"]
            if result["already_serving"]
            else []
        ),  # fmt: skip
        describe_release(result["sglang"]),
        *(f"  warning: {w}" for w in result["warnings"]),
        "preconditions: " + ", ".join(result["preconditions"]),
        "steps:",
        *(f"  {i + 1}. {s}" for i, s in enumerate(result["steps"])),
        "on failure after the fleet changed:",
        *(f"  {i + 1}. {s}" for i, s in enumerate(result["revert"])),
        *([f"placement: {result['placement_note']}"] if result["placement_note"] else []),
        "",
        "service spec:",
        json.dumps(result["service_spec"], indent=2, default=str),
    ]
    return "\n".join(lines)
