"""The planner is pure: profiles and what the store and runtime say in, a plan out.
Compared by equality; the integration tests prove a deploy journals these same steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kctl.controller.planner import Observed, Serving, plan_deploy, plan_rollback, plan_stop
from kctl.controller.steps import (
    ClearServing,
    Gate,
    Measure,
    Plan,
    Promote,
    RecordBaseline,
    Restore,
    Role,
    StartServer,
    Step,
    StopOthers,
    StopServing,
    WaitHealthy,
)
from kctl.profile import load_profile
from kctl.profile.model import Profile

PROFILES = Path(__file__).resolve().parents[1] / "profiles"


@pytest.fixture(scope="module")
def pair() -> tuple[Profile, Profile]:
    cand = load_profile(str(PROFILES / "sim-kdtree.yaml"))
    base = load_profile(str(PROFILES / "sim-baseline.yaml"))
    return cand, base


def _up(role: Role, p: Profile, why: str) -> tuple[StartServer, WaitHealthy]:
    return (
        StartServer(role=role, profile=p.name, why=why),
        WaitHealthy(role=role, profile=p.name, deadline_s=p.health.deadline_s),
    )


def _tail(cand: Profile) -> tuple[Step, ...]:
    return (
        *_up("candidate", cand, "candidate"),
        Gate(
            profile=cand.name,
            contexts=tuple(cand.gate.contexts),
            stop_at_first_fail=cand.gate.policy.stop_at_first_fail,
        ),
        Promote(profile=cand.name),
    )


def test_first_deploy_brings_the_baseline_up_measures_it_then_gates(
    pair: tuple[Profile, Profile],
) -> None:
    cand, base = pair
    plan = plan_deploy(cand, base, Observed(serving=None))
    assert plan == Plan(
        "deploy",
        (
            *_up("baseline", base, "baseline for the gate"),
            RecordBaseline(profile=base.name),
            Measure(role="baseline", profile=base.name, source="live"),
            StopServing(profile=base.name, why="replaced by the candidate"),
            *_tail(cand),
        ),
        (StopOthers(keep="target", why="revert"), Restore(profile=base.name)),
    )
    assert [s.about_baseline for s in plan.steps[:4]] == [True, True, True, False]


def test_the_running_baseline_is_measured_before_it_is_stopped(
    pair: tuple[Profile, Profile],
) -> None:
    cand, base = pair
    serving = Serving("d-1", base.name, base.content_hash)
    plan = plan_deploy(cand, base, Observed(serving, baseline_known=True))
    assert plan.steps == (
        WaitHealthy(role="serving", profile=base.name, deadline_s=base.health.deadline_s),
        Measure(role="baseline", profile=base.name, source="live"),
        StopServing(profile=base.name, why="replaced by the candidate"),
        *_tail(cand),
    )
    assert plan.revert[-1] == Restore(profile=base.name)


def test_a_stored_measurement_is_reused_and_the_revert_target_follows_the_store(
    pair: tuple[Profile, Profile],
) -> None:
    cand, base = pair
    other = Serving("d-2", "other", "f" * 64)
    known = plan_deploy(cand, base, Observed(other, baseline_known=True, baseline_measured=True))
    assert known.steps == (
        Measure(role="baseline", profile=base.name, source="stored"),
        StopServing(profile="other", why="replaced by the candidate"),
        *_tail(cand),
    )
    assert known.revert[-1] == Restore(profile=base.name)
    # measured once but never recorded known-good: a failure goes back to what served
    unknown = plan_deploy(cand, base, Observed(other, baseline_measured=True))
    assert unknown.revert[-1] == Restore(profile="other")
    alone = plan_deploy(cand, base, Observed(None, baseline_measured=True))
    assert alone.revert == (StopOthers(keep=None, why="revert"), Restore(profile=None))


def test_a_baseline_profile_is_established(pair: tuple[Profile, Profile]) -> None:
    _, base = pair
    plan = plan_deploy(base, None, Observed(Serving("d-3", "old", "e" * 64)))
    assert plan.steps == (
        StopServing(profile="old", why="replaced"),
        *_up("candidate", base, "known-good baseline"),
        Measure(role="candidate", profile=base.name, source="live"),
        Promote(profile=base.name, establish=True),
    )
    assert plan.revert[-1] == Restore(profile="old")


def test_rollback_and_stop_plans_have_no_revert() -> None:
    assert plan_rollback("base") == Plan(
        "rollback", (StopOthers(keep="target", why="rollback"), Restore(profile="base"))
    )
    assert plan_stop() == Plan("stop", (StopOthers(keep=None, why="stop"), ClearServing()))


def test_plans_are_json_and_text(pair: tuple[Profile, Profile]) -> None:
    cand, base = pair
    plan = plan_deploy(cand, base, Observed(serving=None))
    data = json.loads(json.dumps(plan.to_dict()))
    assert [s["step"] for s in data["steps"]][:3] == ["start", "wait-healthy", "record-baseline"]
    assert data["steps"][0] == {
        "step": "start",
        "role": "baseline",
        "profile": base.name,
        "why": "baseline for the gate",
    }
    lines = plan.lines()
    assert lines[0] == f"1. start the baseline {base.name}: baseline for the gate"
    assert "on failure after the host changed:" in lines


def test_a_stored_measurement_of_the_serving_baseline_is_checked_before_reuse(
    pair: tuple[Profile, Profile],
) -> None:
    from kctl.gate import plan_workload
    from kctl.gate.drift import DRIFT_BUDGET_S, DRIFT_REQUESTS

    cand, base = pair
    runs = Serving("d-1", base.name, base.content_hash)
    plan = plan_deploy(cand, base, Observed(runs, baseline_known=True, baseline_measured=True))
    check = Measure(
        role="baseline",
        profile=base.name,
        source="checked",
        check_requests=DRIFT_REQUESTS * len(cand.gate.contexts),
        check_budget_s=DRIFT_BUDGET_S,
        measure_requests=plan_workload(cand.gate).planned_requests,
    )
    assert plan.steps == (
        WaitHealthy(role="serving", profile=base.name, deadline_s=base.health.deadline_s),
        check,
        StopServing(profile=base.name, why="replaced by the candidate"),
        *_tail(cand),
    )
    assert plan.revert[-1] == Restore(profile=base.name)
    # what kctl plan prints: the check's cost, its bound, and what it falls back to
    assert check.describe() == (
        f"check the stored measurement of the baseline {base.name} on the running server "
        f"({check.check_requests} requests, at most {DRIFT_BUDGET_S:g} s); reuse it if "
        f"steady, else measure the baseline again under the gate workload "
        f"({check.measure_requests} requests) before stopping it"
    )
    assert plan.to_dict()["steps"][1]["source"] == "checked"
    assert (
        plan.steps[-2]
        .describe()
        .startswith(
            f"gate {cand.name}: correctness probes first (a wrong answer fails it before any "
            "throughput request), then throughput"
        )
    )
