"""What a report shows, read from the store: the deployment, its gate result, the baseline
measurement the gate compared it with, the journal's steps as a timeline, the profiles'
differences and (optionally) the baseline's history. Nothing here draws or writes.

A deployment that never reached the gate (a candidate that crashed or never became ready)
has no gate result; :attr:`ReportData.missing` then says why, and the page says so.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kctl.backend import Backend, fingerprint
from kctl.errors import KctlError, UsageError
from kctl.profile.model import Profile
from kctl.profile.serialize import from_stored

if TYPE_CHECKING:
    from kctl.gate import GateResult, Measurement
    from kctl.gate.drift import DriftCheck
    from kctl.store import Store
    from kctl.store.records import Deployment, JournalStep, StoredMeasurement


class Context(Protocol):
    """What a report needs of the command that writes it (a
    :class:`kctl.controller.context.Context` is one): the state dir and the backend."""

    @property
    def state_dir(self) -> Path: ...

    @property
    def backend(self) -> Backend: ...


def _profile_of(stored: Any) -> Profile:
    """The resolved profile a deployment ran, rebuilt from its stored record."""
    profile: Profile = from_stored(Profile, stored)
    return profile


#: the deployments a baseline is searched among, newest first
_SEARCH_LIMIT = 500
#: how many of the baseline's measurements the history shows, newest first
HISTORY_LIMIT = 50


@dataclass(frozen=True)
class Phase:
    """One bar of the timeline: a journalled step (or the build before the journal)."""

    name: str
    #: build, baseline, candidate, gate or revert
    kind: str
    #: seconds after the deployment was recorded (the build is before it: negative)
    start_s: float
    seconds: float
    #: done, failed, or intent (never closed: kctl was killed during it)
    state: str
    note: str = ""


@dataclass(frozen=True)
class DiffRow:
    """One setting of the profiles' diff; ``None`` where a side does not set it."""

    section: str
    key: str
    baseline: str | None
    candidate: str | None

    @property
    def changed(self) -> bool:
        return self.baseline != self.candidate


@dataclass(frozen=True)
class HistoryPoint:
    """The median decode rate of one context in one stored measurement of the baseline."""

    measured_at: str
    deployment_id: str
    context: int
    median_tps: float


@dataclass(frozen=True)
class ReportData:
    deployment: Deployment
    #: the baseline deployment the gate compared with (None for a baseline profile's deploy)
    baseline_deployment: Deployment | None
    gate: GateResult | None
    baseline: Measurement | None
    #: how the baseline measurement was found ("measured during this deploy" ...)
    baseline_source: str
    phases: tuple[Phase, ...]
    #: the whole try in wall-clock seconds: the build and the journalled transaction
    cost_s: float | None
    diff: tuple[DiffRow, ...]
    history: tuple[HistoryPoint, ...] | None
    #: what is missing from the page and why (no gate result, no baseline measurement ...)
    missing: tuple[str, ...]
    #: the backend's note above a gate table (SIMULATED ...), or None
    note: str | None
    #: the drift check of a stored baseline measurement on the running baseline, when the
    #: deploy made one (kept with the gate result: a deploy that ended before its gate
    #: shows none)
    baseline_check: DriftCheck | None = None


def gather(
    ctx: Context, store: Store, deployment_id: str | None, *, history: bool = False
) -> ReportData:
    """The report of ``deployment_id`` (a unique prefix is enough), or of the newest deploy.
    Raises UsageError when there is none, DeploymentNotFound for an unknown id."""
    dep = _deployment(store, deployment_id)
    base_dep = _baseline_deployment(store, dep)
    gate, gate_ts, missing = _gate(store, dep)
    check = _baseline_check(store, dep, missing)
    baseline, source = _baseline_measurement(ctx, store, dep, base_dep, gate_ts)
    if baseline is None and base_dep is not None:
        missing.append("no stored measurement of the baseline was found for this deployment")
    phases = _phases(dep, store.journal(dep.id))
    trend = None
    if history and base_dep is not None:
        trend = _history(store, base_dep.profile_hash)
    return ReportData(
        deployment=dep,
        baseline_deployment=base_dep,
        gate=gate,
        baseline=baseline,
        baseline_source=source,
        phases=phases,
        cost_s=_cost(dep, phases),
        diff=profile_diff(base_dep.profile if base_dep else None, dep.profile),
        history=trend,
        missing=tuple(missing),
        note=_note(ctx, dep),
        baseline_check=check,
    )


def _deployment(store: Store, deployment_id: str | None) -> Deployment:
    if deployment_id:
        return store.get_deployment(deployment_id)
    deploys = store.list_deployments(limit=1, kinds=("deploy",))
    if not deploys:
        raise UsageError(
            f"{store.path}: no deployment to report on",
            hint="run `kctl deploy PROFILE` first, or name one: `kctl report ID` (`kctl history`)",
        )
    return deploys[0]


def _baseline_deployment(store: Store, dep: Deployment) -> Deployment | None:
    """The baseline this deploy was gated against: the one it measured, else the newest
    earlier deployment of the profile file its profile names, else what it replaced."""
    if dep.baseline_id:
        try:
            return store.get_deployment(dep.baseline_id)
        except KctlError:
            pass
    path = dep.profile.get("baseline")
    if not path:
        return None
    wanted = Path(str(path)).name
    for other in store.list_deployments(limit=_SEARCH_LIMIT):
        earlier = other.id != dep.id and other.started_ts <= dep.started_ts
        if earlier and Path(other.profile_path).name == wanted:
            return other
    if dep.parent_id:
        try:
            return store.get_deployment(dep.parent_id)
        except KctlError:
            return None
    return None


def _gate(store: Store, dep: Deployment) -> tuple[GateResult | None, float | None, list[str]]:
    from kctl.gate import GateResult

    stored = store.gate_result_at(dep.id)
    if stored is None:
        if dep.profile.get("baseline"):
            return (
                None,
                None,
                [f"the gate did not run: the deployment ended {dep.status} before it"],
            )
        return None, None, ["a baseline profile is deployed without a gate (nothing to compare)"]
    data, ts = stored
    try:
        return GateResult.from_dict(data), ts, []
    except (KctlError, KeyError, TypeError, ValueError) as exc:
        return None, ts, [f"the stored gate result cannot be read by this kctl ({exc})"]


def _baseline_check(store: Store, dep: Deployment, missing: list[str]) -> DriftCheck | None:
    """The drift check stored with the deployment's gate result, or None (none ran, or
    the deploy ended before its gate); a check this kctl cannot read is named in
    ``missing``."""
    from kctl.gate.drift import DriftCheck

    stored = store.gate_result_at(dep.id)
    raw = None if stored is None else stored[0].get("baseline_check")
    if raw is None:
        return None
    try:
        return DriftCheck.from_dict(raw)
    except (KctlError, KeyError, TypeError, ValueError) as exc:
        missing.append(
            f"the stored drift check of the baseline cannot be read by this kctl ({exc})"
        )
        return None


def _baseline_measurement(
    ctx: Context,
    store: Store,
    dep: Deployment,
    base_dep: Deployment | None,
    gate_ts: float | None,
) -> tuple[Measurement | None, str]:
    """The baseline measurement the gate used: the newest one of the baseline's profile made
    before the gate, preferring the one whose fingerprint the gate's workload gives."""
    from kctl.gate import Measurement

    if base_dep is None:
        return None, ""
    until = gate_ts if gate_ts is not None else (dep.ended_ts or store.clock())
    rows = store.measurements(base_dep.profile_hash, until_ts=until)
    if not rows:
        return None, ""
    row = _matching(ctx, dep, base_dep, rows)
    try:
        meas = Measurement.from_dict(row.data)
    except (KctlError, KeyError, TypeError, ValueError):
        return None, ""
    from kctl.store.records import iso_utc

    when = iso_utc(row.created_ts)
    if row.deployment_id and row.deployment_id == dep.baseline_id:
        return meas, f"measured during this deploy ({row.deployment_id}, {when})"
    owner = f"{row.deployment_id}, " if row.deployment_id else ""
    return meas, f"stored measurement reused ({owner}{when})"


def _matching(
    ctx: Context, dep: Deployment, base_dep: Deployment, rows: list[StoredMeasurement]
) -> StoredMeasurement:
    try:
        fp = fingerprint(ctx.backend, _profile_of(dep.profile), _profile_of(base_dep.profile))
    except (KctlError, KeyError, TypeError, ValueError):
        return rows[0]
    return next((r for r in rows if r.fingerprint == fp), rows[0])


def _kind(step: JournalStep) -> str:
    if step.intent.get("why") == "revert" or step.step in ("stop-others", "restore"):
        return "revert"
    if step.step == "gate":
        return "gate"
    if step.intent.get("role") == "baseline" or step.step == "record-baseline":
        return "baseline"
    return "candidate"


def _phase_name(step: JournalStep) -> str:
    profile = step.intent.get("profile")
    return f"{step.seq}. {step.step}" + (f" {profile}" if profile else "")


def _phases(dep: Deployment, steps: list[JournalStep]) -> tuple[Phase, ...]:
    """The build (before the deployment was recorded) and each journalled step, offset from
    the deployment's start; a step never closed ends where the next began (or the deploy)."""
    out: list[Phase] = []
    build = dep.timings.get("build")
    if isinstance(build, (int, float)) and build > 0:
        out.append(Phase("0. build", "build", -float(build), float(build), "done"))
    for i, step in enumerate(steps):
        end = step.closed_ts
        if end is None:
            end = steps[i + 1].ts_epoch if i + 1 < len(steps) else dep.ended_ts
        seconds = max((end if end is not None else step.ts_epoch) - step.ts_epoch, 0.0)
        out.append(
            Phase(
                name=_phase_name(step),
                kind=_kind(step),
                start_s=step.ts_epoch - dep.started_ts,
                seconds=seconds,
                state=step.state,
                note=step.note or "",
            )
        )
    return tuple(out)


def _cost(dep: Deployment, phases: tuple[Phase, ...]) -> float | None:
    total = dep.timings.get("total")
    if isinstance(total, (int, float)):
        return float(total)
    if dep.duration_s is not None:
        build = sum(p.seconds for p in phases if p.kind == "build")
        return dep.duration_s + build
    return None


def _history(store: Store, profile_hash: str) -> tuple[HistoryPoint, ...]:
    from kctl.gate import Measurement
    from kctl.store.records import iso_utc

    points: list[HistoryPoint] = []
    for row in reversed(store.measurements(profile_hash, limit=HISTORY_LIMIT)):
        try:
            meas = Measurement.from_dict(row.data)
        except (KctlError, KeyError, TypeError, ValueError):
            continue
        for s in meas.summaries:
            if s.concurrency == 1 and s.median is not None:
                points.append(
                    HistoryPoint(
                        iso_utc(row.created_ts), row.deployment_id or "-", s.context, s.median
                    )
                )
    return tuple(points)


def _note(ctx: Context, dep: Deployment) -> str | None:
    try:
        profile = _profile_of(dep.profile)
    except (KctlError, KeyError, TypeError, ValueError):
        profile = None
    return ctx.backend.note(profile)


# ------------------------------------------------------------------------------ diff


def _argv_options(profile: dict[str, Any]) -> dict[str, str]:
    """The SGLang argv the profile renders, as option → value ("" for a flag)."""
    from kctl.launch import server_args

    try:
        argv = server_args(_profile_of(profile).server)
    except (KctlError, KeyError, TypeError, ValueError):
        return {}
    options: dict[str, str] = {}
    key = ""
    for token in argv:
        if token.startswith("--"):
            key = token
            options[key] = ""
        elif key:
            options[key] = f"{options[key]} {token}".strip()
    return options


def _flatten(value: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list):
        return {prefix: " ".join(shlex.quote(str(v)) for v in value)}
    return {prefix: "" if value is None else str(value)}


def _section(name: str, base: dict[str, str] | None, cand: dict[str, str]) -> list[DiffRow]:
    keys = list(cand) + [k for k in (base or {}) if k not in cand]
    return [DiffRow(name, k, None if base is None else base.get(k), cand.get(k)) for k in keys]


def profile_diff(baseline: dict[str, Any] | None, candidate: dict[str, Any]) -> tuple[DiffRow, ...]:
    """The SGLang argv, the server's environment and the image section of both profiles,
    setting by setting (every row; :attr:`DiffRow.changed` marks the differences)."""

    def env(p: dict[str, Any]) -> dict[str, str]:
        pairs = (p.get("server") or {}).get("env") or []
        return {str(k): str(v) for k, v in pairs}

    return tuple(
        _section("argv", _argv_options(baseline) if baseline else None, _argv_options(candidate))
        + _section("env", env(baseline) if baseline else None, env(candidate))
        + _section(
            "image",
            _flatten(baseline.get("image") or {}) if baseline else None,
            _flatten(candidate.get("image") or {}),
        )
    )
