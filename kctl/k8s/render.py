"""``kctl render --k8s``: a profile on a fleet as Kubernetes objects, YAML on stdout or one
file per object. Rendered only: kctl applies nothing and talks to no cluster.

:func:`render` is pure (objects as dicts, checked against the API server's value rules in
:mod:`kctl.k8s.names`); :func:`write` is the one place that writes files.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kctl.fleet.spec import FleetSpec
from kctl.k8s import argo, names, policy, router, workload
from kctl.k8s.target import NotExpressible, Target, resolve
from kctl.profile.model import Profile


@dataclass(frozen=True)
class Rendered:
    target: Target
    objects: tuple[dict[str, Any], ...]

    @property
    def version(self) -> str:
        """The Kubernetes minor version the objects are written for (``k8s.version``)."""
        return self.target.fleet.k8s.version

    @property
    def workload_kind(self) -> str:
        return str(self.objects[0]["kind"])

    def file_name(self, obj: dict[str, Any]) -> str:
        return f"{obj['metadata']['name']}.{str(obj['kind']).lower()}.yaml"

    def header(self) -> str:
        t = self.target
        return (
            f"# Rendered by kctl render --k8s for Kubernetes {self.version}: profile "
            f"{t.profile.name} (hash {t.profile.content_hash[:12]}) on fleet {t.fleet.name}.\n"
            "# Rendered only: kctl applies nothing. docs/kubernetes.md explains every field.\n"
        )

    def to_yaml(self) -> str:
        """Every object, one YAML document each, after a comment naming the version."""
        docs = [dump(obj) for obj in self.objects]
        return self.header() + "---\n" + "---\n".join(docs)


def dump(obj: dict[str, Any]) -> str:
    """One object as YAML, keys in the order kctl wrote them (apiVersion, kind first)."""
    return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False, width=100)


def render(profile: Profile, fleet: FleetSpec, *, with_argo: bool = False) -> Rendered:
    """The objects of ``profile`` on ``fleet``: the workload (Deployment, or a
    LeaderWorkerSet when a replica spans nodes), its Service, with ``with_argo`` the Argo
    Rollouts canary, then the serving pods' PodDisruptionBudget and NetworkPolicy and the
    router (:mod:`.router`). :class:`NotExpressible` (exit 2) when Kubernetes cannot say it."""
    target = resolve(profile, fleet)
    if with_argo and target.multi_node:
        raise NotExpressible(
            [
                f"{fleet.source}: --argo: Argo Rollouts manages Deployments, not the "
                f"LeaderWorkerSet a {target.nodes}-node replica needs; fix: render without "
                "--argo and move the canary with the LeaderWorkerSet's partition "
                "(docs/kubernetes.md)"
            ]
        )
    if target.multi_node:
        objects = [workload.leader_worker_set(target), workload.service(target)]
    elif with_argo:
        objects = [
            workload.deployment(target, replicas=0),
            workload.service(target),
            *argo.objects(target),
        ]
    else:
        objects = [workload.deployment(target), workload.service(target)]
    smoke = with_argo and fleet.rollout.smoke_requests > 0
    objects += [
        policy.disruption_budget(target),
        policy.network_policy(target, with_smoke=smoke),
        *router.objects(target),
    ]
    problems = [line for obj in objects for line in names.problems(obj)]
    if problems:
        raise NotExpressible(problems)
    return Rendered(target=target, objects=tuple(objects))


def write(rendered: Rendered, out: Path) -> list[Path]:
    """One file per object under ``out`` (created), each written atomically; the paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for obj in rendered.objects:
        path = out / rendered.file_name(obj)
        fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(rendered.header() + dump(obj))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        paths.append(path)
    return paths


def render_command(
    profile_path: str, fleet_path: str, *, out: Path | None, with_argo: bool
) -> tuple[dict[str, Any], str]:
    """What ``kctl render --k8s`` prints: the ``--json`` result and the text (the YAML, or
    the files written to ``out``)."""
    from kctl.fleet.loader import load_fleet
    from kctl.profile.loader import load_profile

    profile = load_profile(profile_path)
    fleet = load_fleet(fleet_path)
    rendered = render(profile, fleet, with_argo=with_argo)
    files = [str(p) for p in write(rendered, out)] if out is not None else None
    t = rendered.target
    result: dict[str, Any] = {
        "kubernetes_version": rendered.version,
        "namespace": t.fleet.k8s.namespace,
        "fleet": t.fleet.name,
        "profile": t.profile.name,
        "profile_hash": t.profile.content_hash,
        "sglang_release": t.release.version,
        "image": t.image,
        "workload": rendered.workload_kind,
        "objects": [
            {"apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["metadata"]["name"]}
            for o in rendered.objects
        ],
        "files": files,
        "manifests": list(rendered.objects),
    }
    if files is None:
        return result, rendered.to_yaml().rstrip("\n")
    text = f"wrote {len(files)} objects for Kubernetes {rendered.version} to {out}:\n" + "\n".join(
        f"  {f}" for f in files
    )
    return result, text
