"""What a cluster operator asks of the serving pods beyond the workload: how many a drain
may take (``PodDisruptionBudget``) and who may reach them (``NetworkPolicy``). Pure.

Disruption budget: the rollout block's floor holds for voluntary disruptions too (a node
drain, an upgrade): at most ``replicas - min_healthy`` serving pods may be evicted at
once. Counted in pods: in a LeaderWorkerSet one evicted pod stops its whole group, so no
more pods than replicas may go either. From Kubernetes 1.27 (beta there, on by default)
``unhealthyPodEvictionPolicy: AlwaysAllow`` lets a drain evict a pod that never became
ready (a model that fails to load) instead of being blocked by it.

Network policy: ingress to the serving pods on the server port from the fleet's router,
the Argo smoke Job (with ``--argo``) and the clients ``k8s.allowed_clients`` names; in a
multi-node replica, the fleet's pods from each other on every port (NCCL and
``--dist-init-addr`` use ports SGLang picks). Egress is not restricted.
"""

from __future__ import annotations

from typing import Any

from kctl.k8s.pod import selector
from kctl.k8s.router import router_selector
from kctl.k8s.target import Target
from kctl.k8s.workload import metadata

#: the first minor where PodDisruptionBudget's unhealthyPodEvictionPolicy is on by default
UNHEALTHY_EVICTION_FROM = (1, 27)
#: the label the API server sets on every namespace (1.22 on): its name
NAMESPACE_LABEL = "kubernetes.io/metadata.name"


def max_unavailable(target: Target) -> int:
    """Serving pods a voluntary disruption may take at once."""
    return max(0, target.fleet.replicas - target.fleet.min_healthy)


def disruption_budget(target: Target) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "maxUnavailable": max_unavailable(target),
        "selector": {"matchLabels": selector(target)},
    }
    major, minor = (int(x) for x in target.fleet.k8s.version.split("."))
    if (major, minor) >= UNHEALTHY_EVICTION_FROM:
        spec["unhealthyPodEvictionPolicy"] = "AlwaysAllow"
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(target, target.fleet.name),
        "spec": spec,
    }


def smoke_selector(target: Target) -> dict[str, str]:
    """The Argo analysis Job's pods (:mod:`kctl.k8s.argo`)."""
    return {"app.kubernetes.io/name": "kctl-smoke", "app.kubernetes.io/instance": target.fleet.name}


def network_policy(target: Target, *, with_smoke: bool) -> dict[str, Any]:
    peers: list[dict[str, Any]] = [{"podSelector": {"matchLabels": router_selector(target)}}]
    if with_smoke:
        peers.append({"podSelector": {"matchLabels": smoke_selector(target)}})
    for client in target.fleet.k8s.allowed_clients:
        if client.namespace is not None:
            peers.append(
                {"namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: client.namespace}}}
            )
        else:
            peers.append({"ipBlock": {"cidr": client.cidr}})
    port = {"protocol": "TCP", "port": target.profile.server.port}
    ingress: list[dict[str, Any]] = [{"from": peers, "ports": [port]}]
    if target.multi_node:  # a replica's pods talk to each other on ports SGLang picks
        ingress.append({"from": [{"podSelector": {"matchLabels": selector(target)}}]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(target, target.fleet.name),
        "spec": {
            "podSelector": {"matchLabels": selector(target)},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }
