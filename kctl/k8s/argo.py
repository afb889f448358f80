"""The fleet's canary as Argo Rollouts objects (``argoproj.io/v1alpha1``, rendered with
``--argo``; single-node fleets only). Pure functions.

* ``Rollout``: takes the pods over from the rendered Deployment (``workloadRef``; the
  Deployment is rendered with 0 replicas and stays the one pod template), and moves them
  as the fleet's rollout block says: ``canary`` replicas first, then the smoke check
  below, then ``parallelism`` replicas per step with a ``monitor_s`` pause between steps.
  Without a traffic router the Service sends each replica its share of requests, so
  the weights are replica counts (``setWeight`` of k/replicas).
* ``Service`` ``<fleet>-canary``: Argo narrows its selector to the canary's pods, so the
  smoke check reaches the canary only.
* ``AnalysisTemplate`` ``<fleet>-smoke``: a Job in the serving image that asks the canary
  for ``/health_generate`` and ``smoke_requests`` greedy generations. It runs on a node
  that runs a pod of the candidate profile (required pod affinity on its hash label, and
  the serving pods' node selector), where the image is already pulled: never a 15-30 GB
  pull inside the Job's deadline; as nobody, Guaranteed (``SMOKE_CPU``, ``SMOKE_MEMORY``).
  With ``server.api_key`` its requests carry the key, read from the key's Secret through a
  ``secretKeyRef`` (:mod:`kctl.k8s.apikey`).
  Its pods carry their own name label, so neither the fleet's Service, its router, its
  disruption budget nor its network policy takes them for serving pods. kctl's gate (decode
  throughput per context against a live incumbent, the greedy-output comparison) is not in
  it: docs/kubernetes.md says where it would go.
"""

from __future__ import annotations

from typing import Any

from kctl.k8s import apikey
from kctl.k8s.pod import (
    fingerprint_annotations,
    guaranteed,
    labels,
    least_privilege,
    near,
    node_selector,
    selector,
)
from kctl.k8s.policy import smoke_selector
from kctl.k8s.target import Target, seconds
from kctl.k8s.workload import metadata, progress_deadline, rolling, service

API = "argoproj.io/v1alpha1"
#: the smoke Job's CPU and memory (requests = limits): python3 and a few HTTP requests
SMOKE_CPU = "1"
SMOKE_MEMORY = "1Gi"
#: the smoke check, run with python3 in the serving image (SGLang needs it, so it is
#: there): /health_generate, then greedy generations that must return text, sent with
#: the API key (``Authorization: Bearer``) when the profile sets one (:mod:`kctl.k8s.apikey`)
SMOKE = (
    apikey.READ_KEY
    + """\
import sys, urllib.request
url, count = sys.argv[1], int(sys.argv[2])
urllib.request.urlopen(url + "/health_generate", timeout=60).read()
body = json.dumps({"text": "The capital of France is", "sampling_params": {"max_new_tokens": 8, "temperature": 0}}).encode()
headers = {"Content-Type": "application/json"}
if api_key is not None:
    headers["Authorization"] = "Bearer " + api_key
for _ in range(count):
    req = urllib.request.Request(url + "/generate", body, headers)
    out = json.load(urllib.request.urlopen(req, timeout=120))
    assert out.get("text"), out
print("canary answered", count, "generations")
"""
)


def steps(target: Target) -> list[dict[str, Any]]:
    """Canary steps: the canary's weight, the smoke analysis, then a wave per
    ``parallelism`` replicas, each followed by a ``monitor_s`` pause (100% is implicit)."""
    fleet = target.fleet
    n = fleet.replicas
    out: list[dict[str, Any]] = [{"setWeight": 100 * fleet.rollout.canary // n}]
    if fleet.rollout.smoke_requests:
        out.append({"analysis": {"templates": [{"templateName": f"{fleet.name}-smoke"}]}})
    pause = f"{seconds(fleet.rollout.monitor_s)}s"
    moved = fleet.rollout.canary
    while moved + fleet.rollout.parallelism < n:
        moved += fleet.rollout.parallelism
        # a fresh dict per step: YAML writes one shared dict as an anchor and aliases
        out += [{"setWeight": 100 * moved // n}, {"pause": {"duration": pause}}]
    return out


def rollout(target: Target) -> dict[str, Any]:
    unavailable, surge = rolling(target)
    return {
        "apiVersion": API,
        "kind": "Rollout",
        "metadata": metadata(target, target.fleet.name),
        "spec": {
            "replicas": target.fleet.replicas,
            "selector": {"matchLabels": selector(target)},
            "workloadRef": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": target.fleet.name,
                "scaleDown": "progressively",
            },
            "minReadySeconds": seconds(target.fleet.rollout.monitor_s),
            "progressDeadlineSeconds": progress_deadline(target),
            "progressDeadlineAbort": True,
            "revisionHistoryLimit": target.profile.runtime.retain,
            "strategy": {
                "canary": {
                    "canaryService": canary_service_name(target),
                    "maxUnavailable": unavailable,
                    "maxSurge": surge,
                    "steps": steps(target),
                }
            },
        },
    }


def canary_service_name(target: Target) -> str:
    return f"{target.fleet.name}-canary"


def canary_service(target: Target) -> dict[str, Any]:
    return service(target, name=canary_service_name(target))


def analysis_template(target: Target) -> dict[str, Any]:
    """The smoke check as a Job metric: it passes when the Job succeeds."""
    fleet = target.fleet
    port = target.profile.server.port
    url = f"http://{canary_service_name(target)}.{fleet.k8s.namespace}.svc:{port}"
    smoke_labels = {**labels(target), **smoke_selector(target), "kctl.role": "smoke"}
    # the candidate's pods (its hash label): their node holds the image the Job runs
    candidate = {**selector(target), "kctl.profile-hash": labels(target)["kctl.profile-hash"]}
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "affinity": near(candidate, required=True),
        "containers": [
            {
                "name": "smoke",
                "image": target.image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["python3", "-c", SMOKE, url, str(fleet.rollout.smoke_requests)],
                "resources": guaranteed(SMOKE_CPU, SMOKE_MEMORY),
                "securityContext": least_privilege(non_root=True),
            }
        ],
    }
    if key_env := apikey.env(target):  # the API key's Secret: named, never its value
        pod_spec["containers"][0]["env"] = key_env
    if pinned := node_selector(target):
        pod_spec["nodeSelector"] = pinned
    job_pod = {
        "metadata": {"labels": smoke_labels, "annotations": fingerprint_annotations(target)},
        "spec": pod_spec,
    }
    return {
        "apiVersion": API,
        "kind": "AnalysisTemplate",
        "metadata": metadata(target, f"{fleet.name}-smoke"),
        "spec": {
            "metrics": [
                {
                    "name": "canary-generates",
                    "count": 1,
                    "failureLimit": 0,
                    "provider": {
                        "job": {
                            "metadata": {"labels": dict(smoke_labels)},
                            "spec": {
                                "backoffLimit": 0,
                                "activeDeadlineSeconds": 600,
                                "template": job_pod,
                            },
                        }
                    },
                }
            ]
        },
    }


def objects(target: Target) -> list[dict[str, Any]]:
    """The Argo objects for ``target`` (the Deployment and Service are rendered apart)."""
    out = [rollout(target), canary_service(target)]
    if target.fleet.rollout.smoke_requests:
        out.append(analysis_template(target))
    return out
