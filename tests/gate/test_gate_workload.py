"""The workload plan: deterministic, distinct prompts of exact length, right counts."""

from __future__ import annotations

import dataclasses

import pytest

from kctl.gate.workload import (
    PROBE_PROMPT_TOKENS,
    estimate_duration,
    interpolate_rate,
    plan_workload,
)
from kctl.profile.model import CorrectnessSpec, GateSpec

GATE = GateSpec(contexts=(64, 512), output_tokens=8, repeats=3, warmup=1, seed=7)


def test_plan_is_deterministic_and_compares_by_equality() -> None:
    assert plan_workload(GATE) == plan_workload(GATE)
    a, b = plan_workload(GATE), plan_workload(dataclasses.replace(GATE, seed=8))
    assert a.measured[0].input_ids() != b.measured[0].input_ids()


def test_counts_order_and_sampling_params() -> None:
    w = plan_workload(GATE)
    assert [(r.context, r.index) for r in w.warmups] == [(64, 0), (512, 0)]
    assert [(r.context, r.index) for r in w.measured] == [
        (c, i) for c in (64, 512) for i in range(3)
    ]
    assert w.concurrent == () and w.concurrency is None
    assert len(w.probes) == 3 and all(p.tokens == 16 for p in w.probes)
    payload = w.measured[0].payload()
    assert payload["sampling_params"] == {
        "max_new_tokens": 8,
        "ignore_eos": True,
        "temperature": 0.0,
    }
    assert payload["stream"] is True
    assert w.planned_requests == 2 + 6 + 3


def test_every_prompt_has_exact_length_and_distinct_ids() -> None:
    w = plan_workload(GATE, vocab_size=1000)
    reqs = [*w.warmups, *w.measured]
    prompts = [r.input_ids() for r in reqs]
    for r, ids in zip(reqs, prompts):
        assert len(ids) == r.context
        assert all(100 <= i < 1000 - 256 for i in ids)
    # no two requests share even a short prefix, so the radix cache cannot serve one
    prefixes = {tuple(ids[:8]) for ids in prompts}
    assert len(prefixes) == len(prompts)
    # the same request gives the same ids every time
    assert w.measured[2].input_ids() == plan_workload(GATE, vocab_size=1000).measured[2].input_ids()


def test_probes_are_fixed_by_seed_and_distinct() -> None:
    w = plan_workload(GATE)
    ids = [p.input_ids() for p in w.probes]
    assert all(len(x) == PROBE_PROMPT_TOKENS for x in ids)
    assert len({tuple(x) for x in ids}) == 3
    assert ids == [p.input_ids() for p in plan_workload(GATE).probes]


def test_concurrency_phase_and_extra_requests_never_repeat_a_prompt() -> None:
    w = plan_workload(dataclasses.replace(GATE, concurrency=4))
    assert w.concurrency == 4
    assert len(w.concurrent) == 2 * 4 * 3
    assert {r.concurrency for r in w.concurrent} == {4}
    extra = w.extra_requests(64, 2, start_index=3)
    assert [(r.phase, r.index) for r in extra] == [("measure", 3), ("measure", 4)]
    seen = {tuple(r.input_ids()[:8]) for r in (*w.measured, *w.concurrent)}
    assert not seen & {tuple(r.input_ids()[:8]) for r in extra}
    # concurrency 1 means "no concurrency phase"
    assert plan_workload(dataclasses.replace(GATE, concurrency=1)).concurrent == ()


def test_no_correctness_probes_when_disabled() -> None:
    gate = dataclasses.replace(GATE, correctness=CorrectnessSpec(prompts=0))
    assert plan_workload(gate).probes == ()


def test_tiny_vocabulary_is_refused() -> None:
    with pytest.raises(ValueError, match="vocab_size"):
        plan_workload(GATE, vocab_size=300)


def test_interpolate_rate_log_log_and_clamped() -> None:
    rates = {1000: 40.0, 100000: 4.0}
    assert interpolate_rate(rates, 10000) == pytest.approx(12.649, rel=1e-3)
    assert interpolate_rate(rates, 10) == 40.0
    assert interpolate_rate(rates, 10**6) == 4.0
    assert interpolate_rate(rates, 1000) == 40.0


def test_estimate_duration_sums_prefill_and_decode() -> None:
    gate = GateSpec(contexts=(1000,), output_tokens=100, repeats=2, warmup=1,
                    correctness=CorrectnessSpec(prompts=1, tokens=10))  # fmt: skip
    w = plan_workload(gate)
    est = estimate_duration(w, {1000: 10.0}, prefill_tps=1000.0, overhead_s=0.0)
    # 3 requests x (1 s prefill + 10 s decode) + probe (0.128 s prefill + 1 s decode)
    assert est == pytest.approx(3 * 11.0 + 0.128 + 1.0)
    conc = plan_workload(dataclasses.replace(gate, concurrency=2))
    # plus 2 rounds of 2 parallel requests
    assert estimate_duration(conc, {1000: 10.0}, prefill_tps=1000.0, overhead_s=0.0) == (
        pytest.approx(est + 2 * 11.0)
    )


def test_prompts_respect_the_vocabulary() -> None:
    from kctl.gate.workload import DEFAULT_VOCAB_SIZE, fit_vocab

    gate = GateSpec(contexts=(2000,), repeats=2, warmup=1)
    assert plan_workload(gate).vocab_size == DEFAULT_VOCAB_SIZE
    named = plan_workload(dataclasses.replace(gate, vocab_size=50000))
    assert named.vocab_size == 50000
    small = fit_vocab(named, 1000)  # the server reports a smaller vocabulary
    ids = [i for r in (*small.warmups, *small.measured) for i in r.input_ids()]
    ids += [i for p in small.probes for i in p.input_ids()]
    assert max(ids) < 1000 and min(ids) >= 0
    # same seeds: the same plan on either side of a gate
    assert [r.ids_seed for r in small.measured] == [r.ids_seed for r in named.measured]
    assert fit_vocab(named, 163840) is named  # never above the plan
    assert fit_vocab(named, None) is named
    with pytest.raises(ValueError, match="must exceed"):
        fit_vocab(named, 300)
