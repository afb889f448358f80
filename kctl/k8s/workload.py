"""The fleet's workload and Service as Kubernetes objects (plain dicts). Pure functions.

One node per replica: an ``apps/v1`` Deployment. More than one: a LeaderWorkerSet
(``leaderworkerset.x-k8s.io/v1``), one group of ``nodes_per_replica`` pods per replica,
the leader serving HTTP and the workers joining it through SGLang's ``--dist-init-addr``.

Rollout block -> rolling update: ``min_healthy`` replicas serve throughout, so at most
``replicas - min_healthy`` are down at once (``maxUnavailable``); where that is 0, the
update surges ``parallelism`` extra replicas instead (spare GPU nodes needed).
``monitor_s`` -> ``minReadySeconds`` (a new replica counts as available only after
staying ready that long).
"""

from __future__ import annotations

from typing import Any

from kctl.k8s.pod import PORT_NAME, fingerprint_annotations, labels, pod_template, selector
from kctl.k8s.target import Target, seconds

#: what a model image pull may take before the load starts: the SGLang images are
#: 15-30 GB, and a Deployment whose pods are still pulling has made no progress
IMAGE_PULL_ALLOWANCE_S = 600
#: LWS's label on every pod of a group: 0 is the leader
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_API = "leaderworkerset.x-k8s.io/v1"


def metadata(target: Target, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": target.fleet.k8s.namespace,
        "labels": labels(target),
        "annotations": fingerprint_annotations(target),
    }


def rolling(target: Target) -> tuple[int, int]:
    """``(maxUnavailable, maxSurge)`` from the fleet's rollout block."""
    fleet = target.fleet
    unavailable = max(0, fleet.replicas - fleet.min_healthy)
    unavailable = min(unavailable, fleet.rollout.parallelism)
    surge = 0 if unavailable else fleet.rollout.parallelism
    return unavailable, surge


def progress_deadline(target: Target) -> int:
    """Seconds a rollout step may go without progress: the image pull, the model load
    (``health.deadline_s``) and the ``monitor_s`` window."""
    h = target.profile.health
    return seconds(IMAGE_PULL_ALLOWANCE_S + h.deadline_s + target.fleet.rollout.monitor_s)


def deployment(target: Target, *, replicas: int | None = None) -> dict[str, Any]:
    """The Deployment of a single-node fleet (``replicas`` overrides the fleet's: 0 when an
    Argo Rollout owns the pods)."""
    unavailable, surge = rolling(target)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(target, target.fleet.name),
        "spec": {
            "replicas": target.fleet.replicas if replicas is None else replicas,
            "selector": {"matchLabels": selector(target)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": unavailable, "maxSurge": surge},
            },
            "minReadySeconds": seconds(target.fleet.rollout.monitor_s),
            "progressDeadlineSeconds": progress_deadline(target),
            "revisionHistoryLimit": target.profile.runtime.retain,
            "template": pod_template(target, role="single"),
        },
    }


def leader_worker_set(target: Target) -> dict[str, Any]:
    """The LeaderWorkerSet of a multi-node fleet: ``replicas`` groups of
    ``nodes_per_replica`` pods. A failed pod recreates its whole group (a TP rank cannot
    rejoin a running NCCL group). Workers start once the leader pod exists
    (``LeaderCreated``): the leader is ready only after every worker joined."""
    unavailable, surge = rolling(target)
    return {
        "apiVersion": LWS_API,
        "kind": "LeaderWorkerSet",
        "metadata": metadata(target, target.fleet.name),
        "spec": {
            "replicas": target.fleet.replicas,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxUnavailable": unavailable, "maxSurge": surge},
            },
            "leaderWorkerTemplate": {
                "size": target.nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": pod_template(
                    target, role="leader", extra_labels={"kctl.role": "leader"}
                ),
                "workerTemplate": pod_template(
                    target, role="worker", extra_labels={"kctl.role": "worker"}
                ),
            },
        },
    }


def service(
    target: Target, *, name: str | None = None, extra_selector: dict[str, str] | None = None
) -> dict[str, Any]:
    """The fleet's Service: the serving port of every replica (of each group's leader in a
    LeaderWorkerSet)."""
    chosen = selector(target)
    if target.multi_node:
        chosen[LWS_WORKER_INDEX_LABEL] = "0"
    port = target.profile.server.port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(target, name or target.fleet.name),
        "spec": {
            "type": "ClusterIP",
            "selector": {**chosen, **(extra_selector or {})},
            "ports": [
                {"name": PORT_NAME, "port": port, "targetPort": PORT_NAME, "protocol": "TCP"}
            ],
        },
    }
