"""Is every replica what the known spec says it is? Identity from the orchestrator (the
profile hash and deployment labels, the image, the launch flags) and from the server
itself (``/health`` 200, ``/server_info`` names the replica's port and the model)."""

from __future__ import annotations

from typing import Any

from kctl.errors import HealthFailed, ServerError
from kctl.fleet.service import LABEL_DEPLOYMENT
from kctl.fleet.view import ServiceView
from kctl.gate import Endpoint
from kctl.profile.model import Profile
from kctl.secrets import api_key


def replica_problems(profile: Profile, spec: dict[str, Any], view: ServiceView) -> list[str]:
    """What differs between the replicas and the spec (pure, on the orchestrator's view)."""
    container = spec["TaskTemplate"]["ContainerSpec"]
    want_dep = spec["Labels"][LABEL_DEPLOYMENT]
    out = []
    if len(view.replicas) != view.desired_replicas:
        out.append(f"{len(view.replicas)} replicas, {view.desired_replicas} desired")
    for r in view.replicas:
        who = f"replica {r.slot} on {r.node}"
        if r.deployment != want_dep or r.profile_hash != profile.content_hash:
            out.append(f"{who} runs {r.profile} ({r.deployment}), not {profile.name} ({want_dep})")
        if r.image != container["Image"]:
            out.append(f"{who} runs image {r.image}, not {container['Image']}")
        if list(r.args) != container["Args"]:
            out.append(f"{who} runs other flags: {' '.join(r.args)}")
        if not r.healthy:
            out.append(f"{who} is {r.state} (desired {r.desired})")
    return out


def verify_replicas(profile: Profile, spec: dict[str, Any], view: ServiceView) -> None:
    """HealthFailed naming every replica that is not ``profile`` as ``spec`` runs it."""
    problems = replica_problems(profile, spec, view)
    key = api_key(profile)
    for r in view.replicas:
        client = Endpoint(r.host, r.port, key).client()
        try:
            client.health(profile.health.request_timeout_s)
            info = client.get_json("/server_info", profile.health.request_timeout_s)
        except ServerError as exc:
            problems.append(f"replica {r.slot} ({r.host}:{r.port}) does not answer: {exc.message}")
            continue
        if info.get("port") != r.port or info.get("model_path") != profile.server.model_path:
            problems.append(
                f"replica {r.slot}: the server on {r.host}:{r.port} says port "
                f"{info.get('port')}, model {info.get('model_path')}"
            )
    if problems:
        raise HealthFailed("; ".join(problems), phase="verify")
