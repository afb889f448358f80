"""What the store hands back: plain frozen dataclasses, JSON-friendly, no SQL."""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, is_dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal

from kctl.runtime.base import Instance

if TYPE_CHECKING:
    from kctl.profile.model import Profile

DeploymentKind = Literal["deploy", "rollback", "bench", "baseline"]
DeploymentStatus = Literal[
    "planned",
    "starting",
    "gating",
    "promoted",
    "rejected",
    "reverted",
    "degraded",
    "aborted",
    "failed",
    "interrupted",
]
StepState = Literal["intent", "done", "failed"]

#: statuses after which a deployment does nothing more; setting one stamps ``ended_at``
TERMINAL_STATUSES: frozenset[str] = frozenset(
    {"promoted", "rejected", "reverted", "degraded", "aborted", "failed", "interrupted"}
)

Clock = Callable[[], float]


def iso_utc(ts: float) -> str:
    """Epoch seconds → ``2026-11-29T10:24:07Z`` (UTC, second precision)."""
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_deployment_id(ts: float, token: Callable[[], str] | None = None) -> str:
    """``d-YYYYmmdd-HHMMSS-xxxx``: sortable by time, 4 hex chars against collisions
    within the same second."""
    stamp = datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y%m%d-%H%M%S")
    suffix = (token or (lambda: secrets.token_hex(2)))()
    return f"d-{stamp}-{suffix}"


@dataclass(frozen=True)
class Deployment:
    """One row of the deployments table: a deploy, rollback, bench or baseline run."""

    id: str
    kind: DeploymentKind
    profile_name: str
    profile_path: str
    profile_hash: str
    #: the resolved profile (``dataclasses.asdict`` of :class:`kctl.profile.model.Profile`)
    profile: dict[str, Any]
    status: DeploymentStatus
    started_at: str
    started_ts: float
    verdict: str | None = None
    reason: str | None = None
    exit_code: int | None = None
    runtime: str = ""
    #: :class:`kctl.runtime.base.Instance` as a dict, once started
    instance: dict[str, Any] | None = None
    #: the deployment this one replaced (deploy) or restores (rollback)
    parent_id: str | None = None
    #: the known-good baseline deployment the gate compared against / reverts to
    baseline_id: str | None = None
    ended_at: str | None = None
    ended_ts: float | None = None
    #: phase durations and similar, e.g. {"health_s": 331.2, "gate_s": 95.0}
    timings: dict[str, Any] = field(default_factory=dict)
    #: what the server reported after health (SGLang's ``/server_info``: ``version`` and
    #: the effective server arguments); None until read
    server: dict[str, Any] | None = None

    @property
    def sglang_version(self) -> str | None:
        """The SGLang version the server reported, None when it was not read."""
        version = (self.server or {}).get("version")
        return str(version) if version is not None else None

    @property
    def ended(self) -> bool:
        return self.ended_ts is not None

    @property
    def duration_s(self) -> float | None:
        return None if self.ended_ts is None else self.ended_ts - self.started_ts

    def instance_obj(self) -> Instance | None:
        """The recorded instance as :class:`Instance`, None when none was started."""
        if self.instance is None:
            return None
        data = dict(self.instance)
        data["extra"] = dict(data.get("extra") or {})
        return Instance(**data)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (for ``--json`` output)."""
        return asdict(self)


@dataclass(frozen=True)
class StoredMeasurement:
    """One row of the measurements table: a gate workload measured against one server."""

    id: int
    #: the deployment measured; None for a measurement kept without one
    deployment_id: str | None
    fingerprint: str
    created_ts: float
    #: ``Measurement.to_dict()``
    data: dict[str, Any]


@dataclass(frozen=True)
class JournalStep:
    """One host-changing step of a transaction: its intent, then how it ended."""

    txn: str
    seq: int
    step: str
    intent: dict[str, Any]
    state: StepState
    ts: str
    ts_epoch: float
    note: str | None = None
    closed_at: str | None = None
    #: epoch seconds the step was closed; None while it is open
    closed_ts: float | None = None


@dataclass(frozen=True)
class OpenTransaction:
    """A transaction that has not been ended: either running now (its kctl holds the
    deploy lock) or interrupted (kctl was killed). ``steps`` are in order."""

    txn: str
    begun_at: str
    begun_ts: float
    steps: tuple[JournalStep, ...]

    @property
    def pending(self) -> JournalStep | None:
        """The step whose intent was recorded but never closed: the host may be
        half-way through it. None when kctl stopped between steps."""
        if self.steps and self.steps[-1].state == "intent":
            return self.steps[-1]
        return None

    @property
    def last_step(self) -> JournalStep | None:
        return self.steps[-1] if self.steps else None


def to_json(value: Any) -> str:
    """Stable JSON for a column; raises TypeError before anything is written."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def profile_record(profile: Profile | Mapping[str, Any]) -> dict[str, Any]:
    data: dict[str, Any]
    if is_dataclass(profile) and not isinstance(profile, type):
        data = asdict(profile)
    else:
        data = dict(profile)  # type: ignore[arg-type]
    missing = [k for k in ("name", "source", "content_hash") if k not in data]
    if missing:
        raise ValueError(f"a profile record needs {', '.join(missing)}")
    # through JSON once so tuples become lists, as they will be when read back
    loaded: dict[str, Any] = json.loads(to_json(data))
    return loaded


def instance_record(value: Instance | Mapping[str, Any] | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, Instance):
        return to_json(asdict(value))
    return to_json(dict(value))


def deployment_from_row(row: sqlite3.Row) -> Deployment:
    return Deployment(
        id=row["id"],
        kind=row["kind"],
        profile_name=row["profile_name"],
        profile_path=row["profile_path"],
        profile_hash=row["profile_hash"],
        profile=json.loads(row["profile_json"]),
        status=row["status"],
        started_at=row["started_at"],
        started_ts=row["started_ts"],
        verdict=row["verdict"],
        reason=row["reason"],
        exit_code=row["exit_code"],
        runtime=row["runtime"],
        instance=None if row["instance_json"] is None else json.loads(row["instance_json"]),
        parent_id=row["parent_id"],
        baseline_id=row["baseline_id"],
        ended_at=row["ended_at"],
        ended_ts=row["ended_ts"],
        timings=json.loads(row["timings_json"]),
        server=None if row["server_json"] is None else json.loads(row["server_json"]),
    )
