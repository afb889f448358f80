"""The gate asks the cheap questions first and trusts no stale baseline, end to end: a
wrong-answering candidate is rejected on its probes, and a stored baseline measurement is
checked against the running baseline before it is reused (measured again once it drifts)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from tests.integration.conftest import Kctl, candidate_profile, serving_health

pytestmark = pytest.mark.slow


def _measurements(kctl: Kctl) -> list[tuple[int, dict[str, object]]]:
    with sqlite3.connect(kctl.state / "simulate" / "kctl.db") as db:
        rows = db.execute("SELECT id, data_json FROM measurements ORDER BY id").fetchall()
    return [(i, json.loads(d)) for i, d in rows]


def _scale(kctl: Kctl, row_id: int, factor: float) -> None:
    """Make the stored measurement drift: every decode rate in it times ``factor``."""
    with sqlite3.connect(kctl.state / "simulate" / "kctl.db") as db:
        (text,) = db.execute(
            "SELECT data_json FROM measurements WHERE id = ?", (row_id,)
        ).fetchone()
        data = json.loads(text)
        for s in data["samples"]:
            if s["decode_tps"] is not None:
                s["decode_tps"] *= factor
        for s in data["summaries"]:
            for key in ("median", "min", "max"):
                if s[key] is not None:
                    s[key] *= factor
            s["values"] = [v * factor for v in s["values"]]
        db.execute("UPDATE measurements SET data_json = ? WHERE id = ?", (json.dumps(data), row_id))


def test_the_stored_baseline_is_checked_reused_when_steady_and_measured_again_when_drifted(
    kctl: Kctl,
) -> None:
    assert kctl.run("deploy", str(kctl.tmp / "base.yaml")).code == 0
    ((first, _),) = _measurements(kctl)
    wrong = kctl.write("cand.yaml", candidate_profile(kctl.port, KCTL_SIM_FAULT="wrong_output"))
    plan = kctl.run("plan", wrong).out
    assert (
        "check the stored measurement of the baseline base on the running server (4 requests, at most 300 s)"
        in plan
    )
    assert (
        "else measure the baseline again under the gate workload (8 requests) before stopping it"
        in plan
    )
    # what it costs: estimated from the stored rates, bounded, and the fallback's requests
    cost = kctl.run("--json", "plan", wrong).json()["result"]["gate"]["baseline_check"]
    assert cost["requests"] == 4 and cost["bound_s"] == 300 and cost["measure_requests"] == 8
    assert 0 < cost["estimated_s"] < cost["bound_s"]
    assert (
        f"baseline drift check: 4 requests on the running baseline, about "
        f"{cost['estimated_s']:.0f} s, at most 300 s at real-time scale; if it drifted, the "
        "baseline is measured again (8 requests)"
    ) in plan

    # steady: the check confirms it, it is reused, and the wrong answers reject the
    # candidate on its probes, before any throughput request
    r = kctl.run("--json", "deploy", wrong)
    assert r.code == 3, r.out + r.err
    assert "baseline measurement reused (0 min old): the drift check found it steady" in r.err
    gate = r.json()["result"]["gate"]
    reason = gate["verdict"]["reason"]
    assert reason.startswith("correctness: 2 of 2 probe(s) differ")
    assert reason.endswith(
        "(rejected on its probes, before any throughput request; not measured: 5700, 23000)"
    )
    assert gate["candidate"]["samples"] == []
    check = r.json()["result"]["baseline_check"]
    assert check["steady"] and [row["completed"] for row in check["rows"]] == [2, 2]
    assert [row["result"] for row in gate["verdict"]["rows"]] == ["SKIPPED", "SKIPPED"]
    assert [i for i, _ in _measurements(kctl)] == [first]  # nothing measured again
    assert serving_health(kctl) == ("base", "healthy")

    # drifted: the stored rates are 40% below what the baseline does now
    _scale(kctl, first, 0.6)
    r = kctl.run("--json", "deploy", wrong)
    assert r.code == 3, r.out + r.err
    check = r.json()["result"]["baseline_check"]
    assert not check["steady"] and all(row["ratio"] > 1.5 for row in check["rows"])
    assert (
        "the stored baseline measurement no longer holds (drifted beyond the noise: 5700:" in r.err
    )
    assert "measuring the running baseline " in r.err
    rows = _measurements(kctl)
    assert [i for i, _ in rows] == [first, rows[-1][0]] and rows[-1][0] > first
    fresh = {s["context"]: s["median"] for s in rows[-1][1]["summaries"]}
    drifted = {s["context"]: s["median"] for s in rows[0][1]["summaries"]}
    assert all(fresh[c] > drifted[c] / 0.6 * 0.8 for c in fresh), (fresh, drifted)
    assert serving_health(kctl) == ("base", "healthy")
