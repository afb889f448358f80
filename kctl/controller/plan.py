"""``kctl plan PROFILE``: everything deploy would do, as data. Changes nothing."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from kctl.controller import common

if TYPE_CHECKING:
    from kctl.controller.context import Context


def plan(ctx: Context, profile_path: str) -> dict[str, Any]:
    from kctl.gate import plan_workload
    from kctl.profile import profile_to_dict

    candidate, baseline = common.load_pair(profile_path)
    kind = ctx.runtime_kind(candidate)
    spec = common.launch_spec_for(ctx, candidate, "<new>", None)
    workload = plan_workload(candidate.gate)
    stored = None
    if baseline is not None and (ctx.state_dir / "kctl.db").exists():
        store = ctx.open_store(read_only=True)
        try:
            fp = common.fingerprint(ctx, candidate, baseline)
            hit = store.latest_measurement(
                baseline.content_hash,
                fp,
                max_age_s=candidate.gate.policy.baseline_max_age_s,
                now=ctx.clock(),
            )
            stored = hit[1] if hit else None
        finally:
            store.close()
    steps = [
        "lock",
        "reconcile interrupted deploys",
        "preflight (runtime, port" + (", GPU arch, mounts)" if kind == "docker" else ")"),
    ]
    if kind == "docker":
        steps.append("build images (content-addressed; skipped when unchanged)")
    if baseline is None:
        steps += [
            "stop what serves",
            f"start {candidate.name}",
            "health",
            "measure it and record it as the known-good baseline",
        ]
    else:
        steps.append(
            f"baseline {baseline.name}: reuse stored measurement from {stored}"
            if stored
            else f"baseline {baseline.name}: measure it (the running one before stopping it, "
            "else start it first)"
        )
        steps += [
            "stop what serves",
            f"start {candidate.name}",
            f"health (deadline {candidate.health.deadline_s:.0f} s)",
            "gate: throughput + correctness vs the baseline"
            + (
                " (stops at the first failing context)"
                if candidate.gate.policy.stop_at_first_fail
                else ""
            ),
            f"promote, or revert to {baseline.name} and verify it",
        ]
    out: dict[str, Any] = {
        "profile": profile_to_dict(candidate),
        "profile_hash": candidate.content_hash,
        "baseline": baseline.source if baseline else None,
        "baseline_hash": baseline.content_hash if baseline else None,
        "runtime": kind,
        "simulate": ctx.simulate,
        "launch": {"argv": list(spec.argv), "env": dict(spec.env)},
        "gate": {
            "contexts": list(candidate.gate.contexts),
            "requests": _count(workload),
            "estimated_duration_s": _estimate(workload, candidate, ctx.simulate),
            "policy": profile_to_dict(candidate)["gate"]["policy"],
        },
        "stored_baseline_measurement": stored,
        "steps": steps,
    }
    if kind == "docker":
        from kctl.image import plan_image
        from kctl.runtime.docker import plan_run_spec

        image = plan_image(candidate, repo_root=ctx.repo_root)
        out["image"] = image
        out["run_spec"] = plan_run_spec(
            dataclasses.replace(spec, image=str(image["tag"])), candidate
        )
    return out


def _estimate(workload: Any, profile: Any, simulate: bool) -> float:
    """Gate seconds from the simulator's calibration table (the in-service measurements
    plus documented estimates); compressed by the simulator's speed-up when simulated."""
    from kctl.gate import estimate_duration
    from kctl.sim.calibration import load as load_calibration

    cal = load_calibration()
    path = "kdtree" if profile.server.verify_kernel == "kdtree" else "triton"
    rates = {c: cal.decode_tps(path, profile.server.cuda_graphs, c) for c in profile.gate.contexts}
    seconds = float(estimate_duration(workload, rates))
    return seconds / profile.simulator.speedup if simulate else seconds


def _count(workload: Any) -> int:
    return (
        len(workload.warmups)
        + len(workload.measured)
        + len(workload.concurrent)
        + len(workload.probes)
    )
