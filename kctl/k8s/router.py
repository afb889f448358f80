"""The SGLang Model Gateway (``sglang-router``) in front of the fleet, as Kubernetes
objects. Pure functions.

* ``Deployment`` ``<fleet>-router``: ``python3 -m sglang_router.launch_router`` with
  Kubernetes service discovery (``--service-discovery --selector ...``): the router
  watches the serving pods through the API server and adds a pod as a worker when it
  is ready, removes it when it goes (the flags of sglang-router 0.3.x);
* ``Service`` ``<fleet>-router``: what clients send requests to;
* with ``server.api_key``, the router's ``--api-key`` (the key it sends the workers), read
  from the key's Secret inside the pod (:mod:`kctl.k8s.apikey`), never in the objects;
* ``ServiceAccount``, ``Role`` and ``RoleBinding`` ``<fleet>-router``: ``get``, ``list``
  and ``watch`` on pods in the fleet's namespace, nothing else (what the discovery needs);
* a ``PodDisruptionBudget`` when there is more than one router replica.

The pod template carries no profile label or annotation: a rollout of the serving pods
never restarts the router. Its image is ``k8s.router.image``, else the profile's
``image.base`` (SGLang's images install sglang-router; a kernel image built on it shares
its layers), then scheduled beside the serving pods, where those layers are.
"""

from __future__ import annotations

from typing import Any

from kctl.k8s import apikey
from kctl.k8s.pod import PORT_NAME, guaranteed, least_privilege, near, node_selector, selector
from kctl.k8s.target import Target, seconds
from kctl.k8s.workload import LWS_WORKER_INDEX_LABEL, metadata

#: the router's Prometheus port (its default), declared on the container
METRICS_PORT = 29000
#: seconds the router waits for in-flight requests on SIGTERM (its default, made explicit)
SHUTDOWN_GRACE_S = 180
#: sglang-router's health endpoints: ``/liveness`` always answers; ``/readiness`` answers
#: 200 only while a healthy worker is registered
LIVENESS = "/liveness"
READINESS = "/readiness"


def name(target: Target) -> str:
    return f"{target.fleet.name}-router"


def router_selector(target: Target) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "sglang-router",
        "app.kubernetes.io/instance": target.fleet.name,
    }


def discovery_selector(target: Target) -> dict[str, str]:
    """The serving pods the router adds as workers: the fleet's (a LeaderWorkerSet
    group's leader only: the workers serve no HTTP)."""
    chosen = selector(target)
    if target.multi_node:
        chosen[LWS_WORKER_INDEX_LABEL] = "0"
    return chosen


def args(target: Target) -> list[str]:
    """The router's arguments, as ``sglang_router.launch_router`` 0.3.x parses them."""
    r = target.fleet.k8s.router
    return [
        "--host", "0.0.0.0",
        "--port", str(r.port),
        "--policy", r.policy,
        "--service-discovery",
        "--selector", *(f"{k}={v}" for k, v in discovery_selector(target).items()),
        "--service-discovery-port", str(target.profile.server.port),
        "--service-discovery-namespace", target.fleet.k8s.namespace,
        # a discovered pod is a worker once it answers: allow the whole model load
        "--worker-startup-timeout-secs", str(seconds(target.profile.health.deadline_s)),
        "--shutdown-grace-period-secs", str(SHUTDOWN_GRACE_S),
        "--prometheus-port", str(METRICS_PORT),
    ]  # fmt: skip


def command(target: Target) -> list[str]:
    """``python3 -m sglang_router.launch_router``; with ``server.api_key``, a launch that
    reads the key from its Secret (the ``env`` :func:`kctl.k8s.apikey.env` renders) and
    adds ``--api-key`` in-process, so the router authenticates to the workers with it and
    the key is on no command line (:data:`kctl.k8s.apikey.ROUTER_LAUNCH`)."""
    if target.profile.server.api_key is None:
        return ["python3", "-m", "sglang_router.launch_router"]
    return ["python3", "-c", apikey.ROUTER_LAUNCH]


def _probe(path: str, period: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": PORT_NAME, "scheme": "HTTP"},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": 3,
    }


def image(target: Target) -> str:
    return target.fleet.k8s.router.image or target.profile.image.base


def deployment(target: Target) -> dict[str, Any]:
    r = target.fleet.k8s.router
    container = {
        "name": "router",
        "image": image(target),
        "imagePullPolicy": "IfNotPresent",
        "command": command(target),
        "args": args(target),
        "ports": [
            {"name": PORT_NAME, "containerPort": r.port, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "resources": guaranteed(r.cpu, r.memory),
        "securityContext": least_privilege(non_root=True),
        **({"env": key_env} if (key_env := apikey.env(target)) else {}),
        "readinessProbe": _probe(READINESS, 5),
        "livenessProbe": _probe(LIVENESS, 10),
    }
    spec: dict[str, Any] = {
        "serviceAccountName": name(target),
        "terminationGracePeriodSeconds": SHUTDOWN_GRACE_S + 10,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
    }
    if r.image is None:  # the serving image's base: beside the serving pods
        if pinned := node_selector(target):
            spec["nodeSelector"] = pinned
        spec["affinity"] = near(selector(target), required=False)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(target, name(target)),
        "spec": {
            "replicas": r.replicas,
            "selector": {"matchLabels": router_selector(target)},
            # a new router pod is ready before the old one stops: clients always have one
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
            },
            "template": {"metadata": {"labels": router_selector(target)}, "spec": spec},
        },
    }


def service(target: Target) -> dict[str, Any]:
    port = target.fleet.k8s.router.port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(target, name(target)),
        "spec": {
            "type": "ClusterIP",
            "selector": router_selector(target),
            "ports": [
                {"name": PORT_NAME, "port": port, "targetPort": PORT_NAME, "protocol": "TCP"}
            ],
        },
    }


def rbac(target: Target) -> list[dict[str, Any]]:
    """The router's identity and the one permission its discovery needs."""
    meta = metadata(target, name(target))
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": name(target),
            },
            "subjects": [
                {
                    "kind": "ServiceAccount",
                    "name": name(target),
                    "namespace": target.fleet.k8s.namespace,
                }
            ],
        },
    ]


def disruption_budget(target: Target) -> dict[str, Any]:
    """One router pod at a time may be evicted (rendered for 2 or more replicas)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(target, name(target)),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": router_selector(target)}},
    }


def objects(target: Target) -> list[dict[str, Any]]:
    out = [*rbac(target), deployment(target), service(target)]
    if target.fleet.k8s.router.replicas > 1:
        out.append(disruption_budget(target))
    return out
