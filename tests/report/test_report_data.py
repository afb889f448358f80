"""The report read from a store built in-process (no server, no browser): what the page
says for a gated deploy and for one that never reached the gate, the profiles' diff, the
timeline, and the file's permissions."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import pytest

from kctl.controller.context import Context
from kctl.gate import GateResult, Measurement, plan_workload
from kctl.gate.drift import DriftCheck, judge_drift, plan_check
from kctl.gate.stats import Sample, summarize
from kctl.gate.verdict import judge
from kctl.profile.loader import load_profile
from kctl.profile.model import GateSpec
from kctl.report import gather, profile_diff, report_path, write_report
from kctl.report.page import render, verdict_sentence
from kctl.store import Store

REPO = Path(__file__).resolve().parents[2]
#: decode tok/s per context: the candidate loses at 5.7k and wins above (the README's shape)
RATES = {"baseline": {5700: 50.0, 23000: 8.0}, "candidate": {5700: 35.0, 23000: 13.0}}


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _measurement(side: str) -> Measurement:
    samples = tuple(
        Sample(
            phase="measure",
            context=ctx,
            index=i,
            ttft_s=ctx / 3000,
            decode_tps=rate * (1 + 0.01 * i),
            e2e_s=1.0,
            completion_tokens=64,
            itl_s=(1 / rate,) * 8,
            accept_length=2.9,
        )
        for ctx, rate in RATES[side].items()
        for i in range(3)
    )
    return Measurement(fingerprint="fp", samples=samples, summaries=summarize(samples))


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    return Context(state_dir=tmp_path / "state")


@pytest.fixture
def store(ctx: Context) -> Store:
    return Store.open(ctx.state_dir, clock=Clock())


def _baseline(store: Store) -> str:
    base = load_profile(str(REPO / "profiles" / "triton-graphs.yaml"))
    dep = store.new_deployment("baseline", base, status="promoted")
    store.save_measurement(
        deployment_id=dep.id,
        profile_hash=base.content_hash,
        fingerprint="fp",
        data=_measurement("baseline").to_dict(),
    )
    return dep.id


def _drift_check(factor: float) -> DriftCheck:
    """A drift check of the stored baseline measurement: two requests per context at
    ``factor`` times the stored rates (1.0: steady)."""
    stored = _measurement("baseline")
    planned = plan_check(plan_workload(GateSpec(contexts=(5700, 23000))), stored)
    samples = tuple(
        Sample(r.phase, r.context, r.index, decode_tps=RATES["baseline"][r.context] * factor
               * (1 + 0.005 * (r.index % 2)), completion_tokens=64)
        for r in planned
    )  # fmt: skip
    return judge_drift(stored, samples, planned, 21.5)


def _candidate(
    store: Store, baseline_id: str, *, gated: bool, check: DriftCheck | None = None
) -> str:
    clock = store.clock
    assert isinstance(clock, Clock)
    cand = load_profile(str(REPO / "profiles" / "kdtree-eager.yaml"))
    dep = store.new_deployment("deploy", cand, baseline_id=baseline_id)
    for step, seconds in (("stop-serving", 1.0), ("start", 0.5), ("wait-healthy", 330.0)):
        seq = store.begin_step(dep.id, step, {"profile": cand.name, "role": "candidate"})
        clock.now += seconds
        store.finish_step(dep.id, seq, "done" if gated or step != "wait-healthy" else "failed")
    if gated:
        seq = store.begin_step(dep.id, "gate", {"profile": cand.name})
        clock.now += 95.0
        verdict = judge(_measurement("baseline"), _measurement("candidate"), cand.gate.policy)
        result = GateResult(candidate=_measurement("candidate"), verdict=verdict)
        kept = result.to_dict()
        if check is not None:  # as a deploy keeps it
            kept["baseline_check"] = check.to_dict()
        store.save_gate_result(dep.id, kept)
        store.finish_step(dep.id, seq, "failed", note=f"gate {verdict.verdict}")
    seq = store.begin_step(dep.id, "restore", {"profile": "triton-graphs"})
    clock.now += 300.0
    store.finish_step(dep.id, seq)
    reason = "gate FAIL: below threshold" if gated else "health failed in phase port"
    store.update_deployment(
        dep.id, status="rejected", reason=reason, timings={"build": 12.0, "total": 740.0}
    )
    return dep.id


def _specs(html: str) -> dict[str, object]:
    """The charts' Vega-Lite specifications the page embeds, by element id."""
    found = re.search(r'<script type="application/json" id="kctl-specs">(.*?)</script>', html, re.S)
    assert found is not None
    loaded: dict[str, object] = json.loads(found.group(1))
    return loaded


def test_gated_deploy_report(ctx: Context, store: Store) -> None:
    base_id = _baseline(store)
    dep_id = _candidate(store, base_id, gated=True)
    data = gather(ctx, store, None)  # the newest deploy by default
    assert data.deployment.id == dep_id and data.missing == ()
    assert data.baseline is not None and data.baseline_source.startswith("measured during")
    sentence = verdict_sentence(data)
    assert sentence.startswith("FAIL: kdtree-eager was rejected and the known-good baseline")
    assert "5700" in sentence
    # the build before the journal, then each step; the try's cost is the recorded total
    assert [p.kind for p in data.phases] == [
        "build",
        "candidate",
        "candidate",
        "candidate",
        "gate",
        "revert",
    ]
    assert data.phases[0].start_s == -12.0 and data.phases[3].seconds == 330.0
    assert data.cost_s == 740.0
    html = render(data)
    specs = _specs(html)
    assert set(specs) >= {
        "chart-rates",
        "chart-ratio",
        "chart-timeline",
        "chart-accept",
        "chart-ttft",
    }
    assert "https://" not in html.split("<script>")[0]  # no stylesheet or font from the network
    cross = re.search(r"crossover ≈ ([\d,]+) tokens", html)
    assert cross is not None and 5700 < int(cross.group(1).replace(",", "")) < 23000


def test_a_gated_deploy_without_a_drift_check_shows_none(ctx: Context, store: Store) -> None:
    _candidate(store, _baseline(store), gated=True)
    data = gather(ctx, store, None)
    assert data.baseline_check is None
    assert "Baseline drift check" not in render(data)


@pytest.mark.parametrize(
    ("factor", "outcome", "results"),
    [
        (1.0, "reused", ["steady", "steady"]),
        (0.7, "measured again (drifted beyond the noise)", ["drifted", "drifted"]),
    ],
)
def test_the_drift_check_is_shown_with_its_rates_and_outcome(
    ctx: Context, store: Store, factor: float, outcome: str, results: list[str]
) -> None:
    check = _drift_check(factor)
    _candidate(store, _baseline(store), gated=True, check=check)
    data = gather(ctx, store, None)
    assert data.baseline_check == check and data.missing == ()
    html = render(data)
    found = re.search(r'<strong id="baseline-check-outcome">([^<]*)</strong>', html)
    assert found is not None and found.group(1) == outcome
    assert (
        "sent the running baseline 4 requests over 2 contexts (21.5 s at real-time scale)" in html
    )
    table = html.split('id="baseline-check-table"')[1].split("</table>")[0]
    rows = re.findall(r"<tr><td class=\"l\">(\d+)</td>(.*?)</tr>", table, re.S)
    assert [int(ctx) for ctx, _ in rows] == [5700, 23000]
    for (_, cells), row, result in zip(rows, check.rows, results):
        assert row.now is not None and row.lo is not None and row.hi is not None
        assert f"<td>{row.stored:.2f}</td>" in cells and f"<td>{row.now:.2f}</td>" in cells
        assert f"<td>{row.lo:.3f} to {row.hi:.3f}</td>" in cells and "<td>2/2</td>" in cells
        assert f">{result}</td>" in cells
    assert (factor == 1.0) == ("the baseline still serves as it was measured" in html)


def test_never_ready_deploy_report_says_the_gate_did_not_run(ctx: Context, store: Store) -> None:
    dep_id = _candidate(store, _baseline(store), gated=False)
    data = gather(ctx, store, dep_id[:-2])  # a unique prefix is enough
    assert data.gate is None
    assert data.missing == ("the gate did not run: the deployment ended rejected before it",)
    assert verdict_sentence(data).startswith(
        "No gate verdict for kdtree-eager: the gate did not run"
    )
    html = render(data)
    assert "chart-ratio" not in _specs(html) and "chart-rates" in _specs(html)  # baseline only
    assert [p.state for p in data.phases if p.name.endswith("wait-healthy kdtree-eager")] == [
        "failed"
    ]


def test_written_report_is_private(ctx: Context, store: Store, tmp_path: Path) -> None:
    dep_id = _candidate(store, _baseline(store), gated=True)
    _, path = write_report(ctx, store, dep_id, history=True)
    assert path == report_path(ctx.state_dir, dep_id)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert "chart-history" in _specs(path.read_text())


def test_no_deployment_to_report_on(ctx: Context, store: Store) -> None:
    from kctl.errors import UsageError

    with pytest.raises(UsageError, match="no deployment to report on"):
        gather(ctx, store, None)


def test_profile_diff_names_each_changed_setting() -> None:
    base = load_profile(str(REPO / "profiles" / "triton-graphs.yaml"))
    cand = load_profile(str(REPO / "profiles" / "kdtree-eager.yaml"))
    from dataclasses import asdict

    rows = {
        (r.section, r.key): (r.baseline, r.candidate)
        for r in profile_diff(asdict(base), asdict(cand))
        if r.changed
    }
    assert rows[("argv", "--disable-cuda-graph")] == (None, "")
    assert rows[("argv", "--cuda-graph-max-bs")][1] is None
    assert rows[("env", "KDTREE_VERIFY")] == (None, "1")
    assert ("image", "kernel_source") in rows
    assert all(r.baseline is None for r in profile_diff(None, asdict(cand)))
