"""A deploy journals exactly the steps ``kctl plan`` printed for it, in order: all of
them when it promotes; up to the failing one and then the plan's revert steps when it is
rejected; up to the step a second signal aborted when it ends DEGRADED."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from kctl.store import Store
from tests.integration.conftest import (
    Kctl,
    base_profile,
    candidate_profile,
    serving_health,
    signal_at_revert_start,
)

pytestmark = pytest.mark.slow


def planned(kctl: Kctl, profile: str) -> dict[str, Any]:
    return dict(plan_result(kctl, profile)["plan"])


def plan_result(kctl: Kctl, profile: str) -> dict[str, Any]:
    r = kctl.run("--json", "plan", profile)
    assert r.code == 0, r.out + r.err
    result: dict[str, Any] = r.json()["result"]
    return result


def journal(kctl: Kctl, deployment_id: str) -> list[tuple[dict[str, Any], str]]:
    store = Store.open(kctl.state / "simulate", read_only=True)
    try:
        return [(s.intent, s.state) for s in store.journal(deployment_id)]
    finally:
        store.close()


def last_deploy(kctl: Kctl) -> str:
    rows = kctl.run("--json", "history").json()["result"]
    return str(next(r["id"] for r in rows if r["kind"] == "deploy"))


def names(steps: list[dict[str, Any]]) -> list[str]:
    return [s["step"] for s in steps]


def _promoting(profile: dict[str, Any]) -> dict[str, Any]:
    """``profile`` whose gate promotes an equal-speed candidate even when the 2-core machine's
    noise leaves the ratio straddling the threshold: these tests check the journal against
    the plan, not the gate's verdict (an INCONCLUSIVE appends the revert's steps)."""
    profile["gate"]["policy"].update(on_inconclusive="promote", max_extra_repeats=6)
    return profile


def test_promote_journals_the_planned_steps(kctl: Kctl) -> None:
    cand = kctl.write("cand.yaml", _promoting(candidate_profile(kctl.port)))
    result = plan_result(kctl, cand)
    assert result["gate"]["estimated_duration_s"] is None  # the baseline was never measured
    plan = result["plan"]
    # nothing serves and nothing is measured: the baseline comes up first
    assert names(plan["steps"]) == [
        "start", "wait-healthy", "record-baseline", "measure", "stop-serving",
        "start", "wait-healthy", "gate", "promote",
    ]  # fmt: skip
    r = kctl.run("--json", "deploy", cand)
    assert r.code == 0, r.out + r.err
    done = journal(kctl, r.json()["result"]["deployment_id"])
    assert [intent for intent, _ in done] == plan["steps"]
    assert {state for _, state in done} == {"done"}
    # the next deploy of it reuses the stored measurement: a shorter plan, journalled as is
    again = kctl.write("cand2.yaml", _promoting(candidate_profile(kctl.port, KCTL_SIM_SEED="7")))
    result = plan_result(kctl, again)
    # the estimate now comes from the baseline's stored measurement, in wall seconds (the
    # simulator compresses time 50x: a gate of a few seconds)
    assert 0 < result["gate"]["estimated_duration_s"] < 60
    assert "from the baseline's stored measurement" in kctl.run("plan", again).out
    plan = result["plan"]
    assert names(plan["steps"]) == [
        "measure", "stop-serving", "start", "wait-healthy", "gate", "promote",
    ]  # fmt: skip
    assert plan["steps"][0]["source"] == "stored"
    r = kctl.run("--json", "deploy", again)
    assert r.code == 0, r.out + r.err
    assert [i for i, _ in journal(kctl, r.json()["result"]["deployment_id"])] == plan["steps"]


def test_reject_journals_the_steps_to_the_gate_then_the_revert(kctl: Kctl) -> None:
    assert kctl.run("deploy", str(kctl.tmp / "base.yaml")).code == 0
    cand = kctl.write("cand.yaml", candidate_profile(kctl.port, KCTL_SIM_SLOWDOWN="4"))
    plan = planned(kctl, cand)
    r = kctl.run("--json", "deploy", cand)
    assert r.code == 3, r.out + r.err
    gate = names(plan["steps"]).index("gate")
    done = journal(kctl, r.json()["result"]["deployment_id"])
    assert [i for i, _ in done] == plan["steps"][: gate + 1] + plan["revert"]
    assert [s for _, s in done].count("failed") == 1 and done[gate][1] == "failed"
    assert names(plan["revert"]) == ["stop-others", "restore"]
    assert serving_health(kctl) == ("base", "healthy")


def test_degraded_journals_the_steps_to_the_aborted_revert(kctl: Kctl) -> None:
    assert kctl.run("deploy", str(kctl.tmp / "base.yaml")).code == 0
    prof = candidate_profile(kctl.port)
    prof["gate"]["output_tokens"] = 400
    # 10x: a gate of several seconds, time to see it gating and interrupt it; 20 simulated
    # s of load (2 s): the candidate's start is not what the test waits for (the second
    # signal lands in the baseline's restart, 2 s at its own profile's 50x)
    prof["simulator"].update(speedup=10, load_s=20)
    cand = kctl.write("cand.yaml", prof)
    plan = planned(kctl, cand)
    proc = kctl.spawn("deploy", cand)
    try:
        kctl.wait_for_status("gating", timeout=90)
        proc.send_signal(signal.SIGINT)
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    _, err = signal_at_revert_start(proc, signal.SIGINT)
    assert proc.returncode == 4, err
    gate = names(plan["steps"]).index("gate")
    done = journal(kctl, last_deploy(kctl))
    assert [i for i, _ in done] == plan["steps"][: gate + 1] + plan["revert"]
    assert [s for _, s in done] == ["done"] * gate + ["failed", "done", "failed"]
    assert kctl.run("rollback").code == 0
    # the rollback that reconciled it leaves the ended deploy's record as it was and adds
    # its own
    rows = kctl.run("--json", "history").json()["result"]
    row = next(r for r in rows if r["kind"] == "deploy")
    assert row["status"] == "aborted", row
    assert row["reason"].endswith("revert aborted by a second SIGINT"), row
    assert rows[0]["kind"] == "rollback", rows[0]


def test_one_signal_during_a_revert_a_failure_started_lets_it_finish(kctl: Kctl) -> None:
    slow_base = base_profile(kctl.port)
    # 250 simulated s of load at 50x: the baseline's restart in the revert takes 5 s, time
    # for the signal to land in it (its gate stays at 50x: a measurement of a second)
    slow_base["simulator"]["load_s"] = 250
    assert kctl.run("deploy", kctl.write("base.yaml", slow_base)).code == 0
    prof = candidate_profile(kctl.port, KCTL_SIM_FAULT="crash_at_start")
    cand = kctl.write("cand.yaml", prof)
    proc = kctl.spawn("deploy", cand)
    seen, err = signal_at_revert_start(proc, signal.SIGTERM)
    assert proc.returncode == 3, seen + err
    assert "SIGTERM received: finishing the revert" in err
    assert "restored and verified" in err
    assert serving_health(kctl) == ("base", "healthy")
    st = kctl.run("--json", "status")
    assert st.code == 0, st.out
