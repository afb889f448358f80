"""The judge: pass, fail, overrides, objective, noise, completion and correctness rules."""

from __future__ import annotations

import json
import math

import pytest

from kctl.errors import GateError
from kctl.gate.measurement import Measurement, ProbeOutput
from kctl.gate.stats import Sample, summarize
from kctl.gate.verdict import (
    CorrectnessResult,
    Mismatch,
    Verdict,
    check_correctness,
    crossover,
    judge,
)
from kctl.profile.model import ObjectiveSpec, PolicySpec

# the measured in-service figures (shared/data/inservice-2x.json), triton vs kdtree eager
TRITON = {5700: 38.0, 23000: 6.7, 91000: 1.8}
KDTREE = {5700: 35.2, 23000: 13.6, 91000: 3.6}


def meas(
    per_ctx: dict[int, list[float]],
    *,
    failed: dict[int, int] | None = None,
    probes: tuple[ProbeOutput, ...] = (),
) -> Measurement:
    samples: list[Sample] = []
    for ctx, values in per_ctx.items():
        for i, v in enumerate(values):
            samples.append(Sample("measure", ctx, i, decode_tps=v, ttft_s=0.1, e2e_s=1.0,
                                  completion_tokens=8))  # fmt: skip
        for j in range((failed or {}).get(ctx, 0)):
            samples.append(Sample("measure", ctx, len(values) + j, error="timed out after 1 s"))
    return Measurement("fp", tuple(samples), summarize(samples), probes, (("total", 12.5),))


def flat(rates: dict[int, float], n: int = 3) -> Measurement:
    return meas({c: [v] * n for c, v in rates.items()})


def test_clear_pass_when_faster_everywhere() -> None:
    v = judge(flat(TRITON), flat({c: 2 * x for c, x in TRITON.items()}), PolicySpec())
    assert v.verdict == "PASS"
    assert [r.result for r in v.rows] == ["PASS"] * 3
    assert v.rows[0].ratio == pytest.approx(2.0)
    assert v.reason == "every context at or above its threshold (lowest ratio 2.00 at 5700)"
    assert v.timings == (("total", 12.5),)


def test_kdtree_eager_fails_at_short_context_and_names_it() -> None:
    v = judge(flat(TRITON), flat(KDTREE), PolicySpec())
    assert v.verdict == "FAIL"
    assert [r.result for r in v.rows] == ["FAIL", "PASS", "PASS"]
    assert v.reason == "below threshold: 5700: ratio 0.93 (interval 0.93-0.93) < 1.00"
    # measured crossover lies between 5.7k and 23k
    assert v.crossover.position == "within"
    assert v.crossover.context is not None and 5700 < v.crossover.context < 23000


def test_per_context_override_lets_short_context_regress() -> None:
    policy = PolicySpec(min_ratio_per_context=((5700, 0.9),))
    v = judge(flat(TRITON), flat(KDTREE), policy)
    assert v.verdict == "PASS"
    assert [r.threshold for r in v.rows] == [0.9, 1.0, 1.0]


def test_weighted_objective_decides_and_floors_still_bind() -> None:
    weights = ((5700, 0.7), (23000, 0.2), (91000, 0.1))
    policy = PolicySpec(objective=ObjectiveSpec(weights=weights, min_ratio=1.1))
    v = judge(flat(TRITON), flat(KDTREE), policy)
    expected = (0.7 * 35.2 / 38.0 + 0.2 * 13.6 / 6.7 + 0.1 * 3.6 / 1.8) / 1.0
    assert v.objective is not None
    assert v.objective.value == pytest.approx(expected)
    assert v.verdict == "PASS" and v.reason.startswith(f"weighted objective {expected:.2f} >= 1.10")
    assert [r.result for r in v.rows] == ["INFO"] * 3
    # a per-context floor binds even with an objective
    floored = PolicySpec(
        objective=ObjectiveSpec(weights=weights, min_ratio=1.1),
        min_ratio_per_context=((5700, 0.95),),
    )
    v2 = judge(flat(TRITON), flat(KDTREE), floored)
    assert v2.verdict == "FAIL" and v2.reason.startswith("below threshold: 5700")
    # and a traffic mix dominated by short prompts fails the objective
    short = PolicySpec(objective=ObjectiveSpec(weights=((5700, 1.0), (23000, 0.01))))
    v3 = judge(flat(TRITON), flat(KDTREE), short)
    assert v3.verdict == "FAIL" and v3.reason.startswith("weighted objective 0.94")


def test_objective_naming_an_unmeasured_context_is_an_error() -> None:
    policy = PolicySpec(objective=ObjectiveSpec(weights=((1234, 1.0),)))
    with pytest.raises(GateError, match=r"context\(s\) \[1234\]"):
        judge(flat(TRITON), flat(KDTREE), policy)


def test_straddling_interval_is_unclear_and_inconclusive() -> None:
    base = meas({1000: [10.0, 10.5, 9.5]})
    cand = meas({1000: [9.8, 10.6, 10.1]})
    v = judge(base, cand, PolicySpec())
    row = v.rows[0]
    assert row.ratio_lo is not None and row.ratio_hi is not None
    assert row.ratio_lo < 1.0 <= row.ratio_hi
    assert row.result == "UNCLEAR"
    assert v.verdict == "INCONCLUSIVE"
    assert v.unclear == ((1000, 1),)
    assert v.reason.startswith("too noisy to decide: 1000: ratio 1.01 (interval")


def test_more_repeats_narrow_the_interval() -> None:
    base = meas({1000: [10.0, 10.5, 9.5, 10.2, 9.8, 10.1, 9.9]})
    few = judge(base, meas({1000: [10.4, 11.4, 10.9]}), PolicySpec())
    many = judge(base, meas({1000: [10.4, 11.4, 10.9, 11.0, 10.8, 11.1, 10.9, 11.0]}), PolicySpec())
    width = [(r.ratio_hi or 0) - (r.ratio_lo or 0) for r in (few.rows[0], many.rows[0])]
    assert width[1] < width[0]
    assert many.verdict == "PASS"


def test_bootstrap_is_reproducible() -> None:
    base = meas({1000: [10.0, 10.5, 9.5]})
    cand = meas({1000: [9.8, 10.6, 10.1]})
    assert judge(base, cand, PolicySpec()) == judge(base, cand, PolicySpec())


def test_too_few_completed_fails_with_the_count() -> None:
    cand = meas({c: [v] * 2 for c, v in KDTREE.items()}, failed={91000: 1, 23000: 1})
    v = judge(flat(TRITON), cand, PolicySpec(min_ratio=0.5))
    assert v.verdict == "FAIL"
    assert v.reason == (
        "too few requests completed: 23000: only 2 of 3 requests completed; "
        "91000: only 2 of 3 requests completed"
    )
    # a tolerant policy accepts the same run
    assert judge(
        flat(TRITON), cand, PolicySpec(min_ratio=0.5, min_completed_fraction=0.6)
    ).verdict == ("PASS")


def test_candidate_with_nothing_completed_fails() -> None:
    cand = meas({5700: [], 23000: [13.0], 91000: [3.0]}, failed={5700: 3})
    v = judge(flat(TRITON, 1), cand, PolicySpec())
    assert v.verdict == "FAIL"
    assert v.rows[0].candidate_tps is None and v.rows[0].result == "FAIL"
    assert "5700: only 0 of 3 requests completed" in v.reason


def test_baseline_without_data_cannot_be_judged() -> None:
    with pytest.raises(GateError, match="baseline measurement has no completed request"):
        judge(meas({1000: []}, failed={1000: 2}), flat({1000: 5.0}), PolicySpec())


def test_correctness_mismatch_fails_naming_prompt_and_position() -> None:
    base = meas({1000: [10.0]}, probes=(ProbeOutput(0, (1, 2, 3)), ProbeOutput(1, (4, 5, 6))))
    cand = meas({1000: [20.0]}, probes=(ProbeOutput(0, (1, 2, 3)), ProbeOutput(1, (4, 9, 6))))
    corr = check_correctness(base, cand, max_mismatched=0)
    assert corr.mismatches == (Mismatch(1, 1, 5, 9),)
    v = judge(base, cand, PolicySpec(), corr)
    assert v.verdict == "FAIL"
    assert v.reason == (
        "correctness: 1 of 2 probe(s) differ from the baseline (allowed 0): "
        "prompt 1 differs at token 1 (baseline 5, candidate 9)"
    )
    # tolerated when the policy allows one differing prompt
    assert judge(
        base, cand, PolicySpec(), check_correctness(base, cand, max_mismatched=1)
    ).verdict == ("PASS")


def test_failed_or_short_probe_is_a_mismatch() -> None:
    base = meas({1000: [10.0]}, probes=(ProbeOutput(0, (1, 2, 3)), ProbeOutput(1, (4, 5))))
    cand = meas({1000: [10.0]}, probes=(ProbeOutput(0, error="HTTP 500: x"), ProbeOutput(1, (4,))))
    corr = check_correctness(base, cand)
    assert [m.describe() for m in corr.mismatches] == [
        "prompt 0: probe failed: HTTP 500: x",
        "prompt 1 differs at token 1 (baseline 5, candidate None)",
    ]
    assert not corr.passed


def test_baseline_probe_without_output_is_an_error() -> None:
    base = meas({1000: [10.0]}, probes=(ProbeOutput(0, error="boom"),))
    with pytest.raises(GateError, match="no greedy output for probe 0"):
        check_correctness(base, base)


@pytest.mark.parametrize(
    ("points", "position", "context"),
    [
        (
            [(5700, 0.926), (23000, 2.03), (91000, 2.0)],
            "within",
            5700 * (23000 / 5700) ** (0.074 / 1.104),
        ),
        ([(1000, 2.0), (4000, 0.5)], "within", 2000.0),  # halfway in log space: 1000*4**(1/3)
        ([(1000, 1.0), (4000, 2.0)], "within", 1000.0),
        ([(1000, 1.2), (4000, 1.5)], "below", None),
        ([(1000, 1.5), (4000, 1.2)], "above", None),
        ([(1000, 0.5), (4000, 0.8)], "above", None),
        ([(1000, 0.8), (4000, 0.5)], "below", None),
        ([(1000, 0.8), (4000, 0.8)], "none", None),
        ([(1000, 0.8)], "none", None),
    ],
)
def test_crossover(points: list[tuple[int, float]], position: str, context: float | None) -> None:
    x = crossover(points)
    assert x.position == position
    if position == "within" and points == [(1000, 2.0), (4000, 0.5)]:
        assert x.context == pytest.approx(1000 * 4 ** (2 / 3))
    elif context is None:
        assert x.context is None
    else:
        assert x.context == pytest.approx(context)


def test_verdict_json_round_trip() -> None:
    base = meas({1000: [10.0, 10.5, 9.5], 4000: [5.0]}, probes=(ProbeOutput(0, (1, 2)),))
    cand = meas({1000: [9.8, 10.6, 10.1], 4000: [7.0]}, probes=(ProbeOutput(0, (1, 3)),))
    policy = PolicySpec(objective=ObjectiveSpec(weights=((1000, 1.0), (4000, 1.0))))
    v = judge(base, cand, policy, check_correctness(base, cand))
    back = Verdict.from_dict(json.loads(json.dumps(v.to_dict())))
    assert back == v
    assert Measurement.from_dict(json.loads(json.dumps(cand.to_dict()))) == cand
    assert CorrectnessResult.from_dict(v.correctness.to_dict()) == v.correctness  # type: ignore[union-attr]


def test_objective_with_failed_context_is_nan_and_fails() -> None:
    cand = meas({1000: []}, failed={1000: 3})
    policy = PolicySpec(objective=ObjectiveSpec(weights=((1000, 1.0),)))
    v = judge(flat({1000: 5.0}), cand, policy)
    assert v.verdict == "FAIL" and v.objective is not None and math.isnan(v.objective.value)


def test_skipped_buckets_are_shown_and_decide_nothing() -> None:
    # the gate stopped after 5.7k (policy.stop_at_first_fail): 23k and 91k were not measured
    skipped = frozenset({(23000, 1), (91000, 1)})
    v = judge(flat(TRITON), flat({5700: KDTREE[5700]}), PolicySpec(), None, skipped)
    assert v.verdict == "FAIL"
    assert [r.result for r in v.rows] == ["FAIL", "SKIPPED", "SKIPPED"]
    assert [r.candidate_tps for r in v.rows[1:]] == [None, None]
    assert v.reason == (
        "below threshold: 5700: ratio 0.93 (interval 0.93-0.93) < 1.00"
        " (stopped there; not measured: 23000, 91000)"
    )
    assert Verdict.from_dict(json.loads(json.dumps(v.to_dict()))) == v
    # what was measured passes: a skipped bucket alone never fails a verdict ...
    passing = judge(flat(TRITON), flat({5700: 40.0}), PolicySpec(), None, skipped)
    assert passing.verdict == "PASS"
    # ... while the same bucket missing without being skipped does
    assert judge(flat(TRITON), flat({5700: 40.0}), PolicySpec()).verdict == "FAIL"


def test_objective_over_a_skipped_context_is_not_computed() -> None:
    weights = ((5700, 0.7), (23000, 0.3))
    policy = PolicySpec(
        objective=ObjectiveSpec(weights=weights, min_ratio=1.0),
        min_ratio_per_context=((5700, 0.95),),
    )
    v = judge(flat(TRITON), flat({5700: KDTREE[5700]}), policy, None,
              frozenset({(23000, 1), (91000, 1)}))  # fmt: skip
    assert v.objective is not None and v.objective.result == "SKIPPED"
    assert math.isnan(v.objective.value)
    assert v.verdict == "FAIL"  # the 5.7k floor binds on its own
    assert v.reason.startswith("below threshold: 5700: ratio 0.93")
