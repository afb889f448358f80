"""The typed result of ``kctl render --k8s`` (:func:`kctl.k8s.render.render_command`
makes its values; ``--json`` prints this model's dump)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ObjectRef(BaseModel):
    """One rendered object, by kind and name."""

    model_config = ConfigDict(populate_by_name=True)

    api_version: str = Field(alias="apiVersion")
    kind: str
    name: str


class RenderResult(BaseModel):
    """The result of ``render --k8s PROFILE --fleet FLEET`` (docs/kubernetes.md)."""

    kubernetes_version: str = Field(
        description="the version the objects are written and validated for, e.g. 1.31"
    )
    namespace: str
    fleet: str
    profile: str
    profile_hash: str
    sglang_release: str
    image: str = Field(description="the image the pods run")
    workload: str = Field(description="Deployment or LeaderWorkerSet")
    objects: list[ObjectRef]
    files: list[str] | None = Field(description="the files written with --out; null: printed")
    manifests: list[dict[str, Any]] = Field(description="the objects themselves")
