"""Offline validation of rendered objects, for the tests.

Core kinds (Deployment, Service, PodDisruptionBudget, NetworkPolicy, ServiceAccount, Role,
RoleBinding) go to ``kubernetes-validate`` with its strict schemas
(unknown fields refused) for the Kubernetes version the fleet names. The CRDs it does not
know are checked in two parts: their envelope against the structural schema written in
``data/`` from the project's API reference, and every pod template inside them against the
core schemas of the same version (a template wrapped in a ``v1 PodTemplate``; an Argo
analysis Job's spec in a ``batch/v1 Job``).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate

DATA = Path(__file__).parent / "data"
CORE = {
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("v1", "ServiceAccount"),
    ("policy/v1", "PodDisruptionBudget"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
}


@cache
def _crd_validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((DATA / name).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def core(obj: dict[str, Any], version: str) -> str:
    """Validate a core object; the version whose schema was used."""
    return str(kubernetes_validate.validate(obj, version, strict=True))


def pod_template(template: dict[str, Any], version: str, where: str) -> str:
    wrapped = {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": where},
        "template": template,
    }
    return core(wrapped, version)


def validate(obj: dict[str, Any], version: str) -> list[str]:
    """Validate ``obj`` for Kubernetes ``version``; raises on the first error. Returns the
    versions of the core schemas used (one per core object or embedded template)."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key in CORE:
        return [core(obj, version)]
    if key == ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"):
        _crd_validator("leaderworkerset-v1.schema.json").validate(obj)
        lwt = obj["spec"]["leaderWorkerTemplate"]
        return [
            pod_template(lwt[k], version, k.lower())
            for k in ("leaderTemplate", "workerTemplate")
            if k in lwt
        ]
    if key == ("argoproj.io/v1alpha1", "Rollout"):
        _crd_validator("argo-rollouts-v1alpha1.schema.json").validate(obj)
        return []
    if key == ("argoproj.io/v1alpha1", "AnalysisTemplate"):
        _crd_validator("argo-rollouts-v1alpha1.schema.json").validate(obj)
        used = []
        for metric in obj["spec"]["metrics"]:
            job = metric["provider"]["job"]
            wrapped = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": metric["name"], **job.get("metadata", {})},
                "spec": job["spec"],
            }
            used.append(core(wrapped, version))
        return used
    raise AssertionError(f"no schema for {key}: a rendered kind the tests do not validate")
