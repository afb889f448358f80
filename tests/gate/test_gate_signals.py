"""SGLang's figures in the gate: TTFT, ITL p50/p99 and the acceptance length per bucket,
both sides, in the table and the data; the acceptance length fails a candidate outside
its tolerance with both figures; latency fails only where the policy sets a ratio."""

from __future__ import annotations

import json

import pytest

from kctl.gate.measurement import Measurement, ProbeOutput
from kctl.gate.report import gate_rows, render_table
from kctl.gate.stats import Sample, percentile, summarize
from kctl.gate.trace import ChunkTrace
from kctl.gate.verdict import Verdict, check_correctness, judge
from kctl.profile.model import PolicySpec


def meas(tps: float, *, accept: float | None, ttft: float = 0.5, itl: float = 0.02) -> Measurement:
    samples = [
        Sample(
            "measure", ctx, i, decode_tps=tps, ttft_s=ttft, itl_s=(itl,) * 9 + (itl * 3,),
            accept_length=accept,
        )
        for ctx in (5700, 23000)
        for i in range(3)
    ]  # fmt: skip
    probes = (ProbeOutput(0, (1, 2)),)
    return Measurement("fp", tuple(samples), summarize(samples), probes)


def _judge(base: Measurement, cand: Measurement, policy: PolicySpec | None = None) -> Verdict:
    corr = check_correctness(base, cand)
    return judge(base, cand, policy or PolicySpec(), corr)


def test_trace_itl_spreads_a_chunk_over_its_tokens_and_reads_accept_length() -> None:
    trace = ChunkTrace()
    trace.add(1.0, {"completion_tokens": 1})
    trace.add(1.3, {"completion_tokens": 4})
    trace.add(1.3, {"completion_tokens": 4})  # no new tokens: no latency
    trace.add(1.5, {"completion_tokens": 5, "spec_accept_length": 2.5, "spec_verify_ct": 2})
    assert trace.itl_s() == pytest.approx((0.1, 0.1, 0.1, 0.2))
    assert trace.accept_length() == 2.5
    old = ChunkTrace()
    old.add(0.0, {"completion_tokens": 8, "spec_verify_ct": 4})
    assert old.accept_length() == 2.0
    assert ChunkTrace().accept_length() is None


def test_percentiles() -> None:
    assert percentile([], 0.5) is None
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([float(i) for i in range(101)], 0.99) == pytest.approx(99.0)


def test_figures_of_both_sides_in_the_table_and_the_data() -> None:
    v = _judge(meas(40.0, accept=3.0), meas(41.0, accept=2.99, ttft=0.6))
    assert v.verdict == "PASS", v.reason
    text = render_table(v)
    assert "SGLang figures (baseline / candidate):" in text
    assert "5700      500.0 / 600.0   20.0 / 20.0  " in text
    assert "3.00 / 2.99   PASS" in text
    row = gate_rows(v)[0]
    assert row["ttft_s"] == {"baseline": 0.5, "candidate": 0.6}
    assert row["itl_p50_s"] == {"baseline": pytest.approx(0.02), "candidate": pytest.approx(0.02)}
    assert row["itl_p99_s"]["baseline"] == pytest.approx(0.06)  # 3 of 30 tokens waited 60 ms
    assert row["accept_length"] == {"baseline": 3.0, "candidate": 2.99}
    stored = Verdict.from_dict(json.loads(json.dumps(v.to_dict(), allow_nan=False)))
    assert stored == v


def test_acceptance_length_outside_2_percent_fails_with_both_figures() -> None:
    # faster and with identical probes, but the verify path accepts 10% fewer tokens
    v = _judge(meas(40.0, accept=3.0), meas(44.0, accept=2.7))
    assert v.verdict == "FAIL"
    assert v.reason.startswith("acceptance length outside the policy: 5700: acceptance length ")
    assert "candidate 2.7 vs baseline 3 (allowed: within 2% of the baseline)" in v.reason
    # ... and more accepted than the baseline is as wrong
    assert _judge(meas(40.0, accept=3.0), meas(40.0, accept=3.2)).verdict == "FAIL"
    loose = PolicySpec(accept_length_tolerance=0.15)
    assert _judge(meas(40.0, accept=3.0), meas(44.0, accept=2.7), loose).verdict == "PASS"


def test_candidate_without_acceptance_figures_fails_where_the_baseline_has_them() -> None:
    v = _judge(meas(40.0, accept=3.0), meas(40.0, accept=None))
    assert v.verdict == "FAIL" and "candidate not reported" in v.reason
    assert _judge(meas(40.0, accept=None), meas(40.0, accept=None)).verdict == "PASS"


def test_latency_is_gated_only_where_the_policy_sets_a_ratio() -> None:
    base, slow = meas(40.0, accept=None), meas(40.0, accept=None, ttft=1.0, itl=0.03)
    assert _judge(base, slow).verdict == "PASS"
    v = _judge(base, slow, PolicySpec(max_ttft_ratio=1.5))
    assert v.verdict == "FAIL" and v.reason.startswith("latency outside the policy: 5700: TTFT")
    v = _judge(base, slow, PolicySpec(max_itl_p99_ratio=1.2))
    assert v.verdict == "FAIL" and "ITL p99" in v.reason
    assert _judge(base, slow, PolicySpec(max_itl_p50_ratio=1.6)).verdict == "PASS"
