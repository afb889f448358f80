"""The typed results of ``kctl deploy --fleet`` and ``kctl rollback --fleet``
(:mod:`kctl.fleet.rollout` makes them; ``--json`` prints their dump)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class FleetDeployResult(BaseModel):
    """The result of ``deploy --fleet`` (docs/fleet.md), also on exit 3 (rejected: every
    replica back on what served, verified)."""

    fleet: str
    deployment_id: str = Field(
        description="this rollout's record (already-serving: the serving one)"
    )
    profile: str
    outcome: Literal["promoted", "established", "rejected", "already-serving"] = Field(
        description="established: a baseline profile on every replica, verified"
    )
    reason: str
    serving: str | None = Field(
        description="the deployment every replica runs afterwards (rejected: the one "
        "restored; null: nothing served before)"
    )
    verdict: str | None = Field(
        default=None,
        description="the canary gate's verdict; BASELINE for an established baseline; null "
        "when no gate ran",
    )
    table: str | None = Field(default=None, description="the canary gate table as text, for humans")
    smoke: list[str] = Field(
        default_factory=list,
        description="the replicas that passed the smoke gate, e.g. 'replica 1 (node:30000)'",
    )
    timings: dict[str, float] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)


class FleetRollbackResult(BaseModel):
    """The result of ``rollback --fleet``."""

    fleet: str
    deployment_id: str = Field(description="the rollback's own record")
    target: str = Field(description="the known-good deployment every replica runs now")
    profile: str
    outcome: Literal["restored"]
    reason: str
    timings: dict[str, float] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
