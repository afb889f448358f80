"""``kctl plan PROFILE``: everything deploy would do, as data. Changes nothing.

The steps are the plan :func:`kctl.controller.planner.plan_deploy` builds from the same
observations a deploy makes now (what serves, the baseline's known-good record and stored
measurement), so a deploy run next journals exactly these steps."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from kctl.controller import common
from kctl.controller.deploy import observe
from kctl.controller.planner import Observed, plan_deploy
from kctl.controller.steps import Measure
from kctl.errors import RuntimeUnavailable
from kctl.launch import argv_warnings, release_info
from kctl.profile.compare import gate_mismatches
from kctl.runtime import kind_of
from kctl.secrets import describe, exposure_warnings

if TYPE_CHECKING:
    from kctl.controller.context import Context
    from kctl.controller.steps import Step
    from kctl.gate.workload import Workload
    from kctl.profile.model import Profile
    from kctl.store import Store


class ReleaseInfo(BaseModel):
    """The SGLang release a profile serves with (:func:`kctl.launch.release_info`)."""

    version: str = Field(description="the SGLang release the image holds")
    source: Literal["image.sglang", "image.base's tag"]
    launcher: str = Field(description="e.g. 'sglang serve'")
    attention_backend: str = Field(description="--attention-backend as rendered")
    kernel: Literal["plugin backend", "startup hook"] | None = Field(
        description="how the kdtree kernel attaches; null: no kernel"
    )


class LaunchView(BaseModel):
    """The server's command line and environment, secrets by reference."""

    argv: list[str]
    env: dict[str, str] = Field(
        description="clear values, and <secret:env NAME> / <secret:file PATH> for server.secrets"
    )
    api_key: str | None = Field(description="the key's reference; null: none")


class DriftCheckCost(BaseModel):
    """The drift check the deploy runs on the running baseline before it reuses the
    stored measurement."""

    requests: int = Field(description="the check's requests in all")
    bound_s: float = Field(description="its time bound, seconds at real-time scale")
    estimated_s: float | None = Field(
        description="its seconds at real-time scale, from the stored rates"
    )
    measure_requests: int = Field(
        description="what measuring the baseline again sends, when the check finds a drift"
    )


class GatePlan(BaseModel):
    """The gate a deploy runs."""

    contexts: list[int]
    requests: int
    estimated_duration_s: float | None = Field(
        description="from the baseline's stored measurement; null before one"
    )
    policy: dict[str, Any]
    baseline_check: DriftCheckCost | None = Field(
        description="null when the plan has none (no stored measurement, or the baseline "
        "does not serve)"
    )


class PlanResult(BaseModel):
    """The result of ``plan``: everything a deploy would do; changes nothing."""

    profile: dict[str, Any] = Field(description="the resolved profile")
    profile_hash: str
    baseline: str | None
    baseline_hash: str | None
    runtime: str
    simulate: bool
    sglang: ReleaseInfo
    warnings: list[str] = Field(
        description="flags the release deprecates (accepted today), with the replacement; a "
        "server on every interface without an API key"
    )
    launch: LaunchView
    gate: GatePlan
    stored_baseline_measurement: float | None = Field(
        description="when the baseline's reusable stored measurement was taken (a UNIX "
        "time); null: none"
    )
    preconditions: list[str]
    steps: list[str]
    revert: list[str]
    plan: dict[str, Any] = Field(description="the steps as data, as the journal records them")
    image: dict[str, Any] | None = Field(
        default=None, description="docker runtime: the image a build gives (tag, Dockerfile ...)"
    )
    run_spec: dict[str, Any] | None = Field(
        default=None, description="docker runtime: the container's run spec"
    )


def plan(ctx: Context, profile_path: str) -> PlanResult:
    from kctl.gate import estimate_duration, plan_workload
    from kctl.profile import profile_to_dict

    candidate, baseline = common.load_pair(profile_path, ctx.overrides)
    kind = kind_of(ctx.runtime_kind(candidate))
    spec = common.launch_spec_for(ctx, candidate, "<new>", None)
    workload = plan_workload(candidate.gate)
    seen, stored, rates = Observed(serving=None), None, {}
    if (ctx.state_dir / "kctl.db").exists():
        store = ctx.open_store(read_only=True)
        try:
            seen = _observe(ctx, store, candidate, baseline)
            stored = _stored_ts(ctx, store, candidate, baseline)
            rates = _rates(ctx, store, candidate, baseline)
        finally:
            store.close()
    estimate = None
    if rates:
        scale = ctx.backend.time_scale(candidate)
        estimate = round(float(estimate_duration(workload, rates)) / scale, 1)
    steps = plan_deploy(candidate, baseline, seen)
    preconditions = [
        "lock",
        "reconcile interrupted deploys",
        f"preflight ({', '.join(kind.preflight_checks)})",
    ]
    if kind.builds_images:
        preconditions.append("build images (content-addressed; skipped when unchanged)")
    out: dict[str, Any] = {
        "profile": profile_to_dict(candidate),
        "profile_hash": candidate.content_hash,
        "baseline": baseline.source if baseline else None,
        "baseline_hash": baseline.content_hash if baseline else None,
        "runtime": kind.name,
        "simulate": ctx.backend.simulated,
        "sglang": release_info(candidate),
        "warnings": [
            *argv_warnings(candidate),
            *(gate_mismatches(candidate, baseline, "its baseline") if baseline else []),
            *exposure_warnings(candidate),
        ],
        "launch": {
            "argv": list(spec.argv),
            "env": {**dict(spec.env), **{k: describe(r) for k, r in spec.secrets}},
            "api_key": describe(spec.api_key) if spec.api_key is not None else None,
        },
        "gate": {
            "contexts": list(candidate.gate.contexts),
            "requests": _count(workload),
            "estimated_duration_s": estimate,
            "policy": profile_to_dict(candidate)["gate"]["policy"],
            "baseline_check": _check_cost(steps.steps, workload, rates),
        },
        "stored_baseline_measurement": stored,
        "preconditions": preconditions,
        "steps": [s.describe() for s in steps.steps],
        "revert": [s.describe() for s in steps.revert],
        "plan": steps.to_dict(),
    }
    if kind.builds_images:
        from kctl.image import plan_image
        from kctl.runtime.docker import plan_run_spec

        image = plan_image(candidate, repo_root=ctx.repo_root)
        out["image"] = image
        out["run_spec"] = plan_run_spec(
            dataclasses.replace(spec, image=str(image["tag"])), candidate
        )
    return PlanResult.model_validate(out)


def _observe(ctx: Context, store: Store, candidate: Profile, baseline: Profile | None) -> Observed:
    runtime = ctx.runtime(ctx.runtime_kind(candidate))
    try:
        return observe(ctx, store, runtime, candidate, baseline)[0]
    except RuntimeUnavailable:  # the plan without the runtime's word: nothing serves
        return Observed(serving=None)


def _stored_ts(
    ctx: Context, store: Store, candidate: Profile, baseline: Profile | None
) -> float | None:
    if baseline is None:
        return None
    fp = common.fingerprint(ctx, candidate, baseline)
    max_age = candidate.gate.policy.baseline_max_age_s
    hit = store.latest_measurement(baseline.content_hash, fp, max_age, now=ctx.clock())
    return hit[1] if hit else None


def _rates(
    ctx: Context, store: Store, candidate: Profile, baseline: Profile | None
) -> dict[int, float]:
    """Decode tok/s by context (real-time scale) that the store measured on the baseline
    (on the profile itself for a baseline profile) under this workload, whatever its age;
    empty before it was ever measured."""
    from kctl.gate import Measurement

    measured = baseline or candidate
    fp = common.fingerprint(ctx, candidate, measured)
    hit = store.latest_measurement(measured.content_hash, fp, float("inf"), now=ctx.clock())
    if hit is None:
        return {}
    meas = Measurement.from_dict(hit[0])
    return {
        s.context: s.median
        for s in meas.summaries
        if s.concurrency == 1 and s.median is not None and s.median > 0
    }


def _check_cost(
    steps: tuple[Step, ...], workload: Workload, rates: dict[int, float]
) -> dict[str, Any] | None:
    """What the plan's drift check of the stored baseline measurement sends and may take
    (seconds at real-time scale, as its bound), and what measuring the baseline again would
    send; None when the plan has no drift check."""
    from kctl.gate import estimate_duration
    from kctl.gate.drift import check_requests

    checked = [s for s in steps if isinstance(s, Measure) and s.source == "checked"]
    if not checked:
        return None
    step = checked[0]
    sends = dataclasses.replace(
        workload,
        warmups=(),
        measured=check_requests(workload, rates),  # the check's short streams
        concurrent=(),
        probes=(),
    )
    estimate = round(float(estimate_duration(sends, rates)), 1) if rates else None
    return {
        "requests": step.check_requests,
        "bound_s": step.check_budget_s,
        "estimated_s": estimate,
        "measure_requests": step.measure_requests,
    }


def _count(workload: Any) -> int:
    return (
        len(workload.warmups)
        + len(workload.measured)
        + len(workload.concurrent)
        + len(workload.probes)
    )
