"""The drift check of a stored baseline measurement: its requests, and the judgement that
reuses a steady measurement and measures a drifted one again."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from kctl.gate.client import Endpoint, StreamResult
from kctl.gate.drift import (
    DRIFT_MIN_TOKENS,
    DRIFT_REQUESTS,
    DRIFT_STREAM_S,
    DriftCheck,
    check_requests,
    check_tokens,
    judge_drift,
    plan_check,
    run_drift_check,
    stored_rates,
)
from kctl.gate.measurement import Measurement
from kctl.gate.runner import GateProgress
from kctl.gate.stats import Sample, summarize
from kctl.gate.workload import GenRequest, plan_workload
from kctl.profile.model import GateSpec

GATE = GateSpec(contexts=(5700, 23000), output_tokens=64, repeats=3, warmup=1)
WORKLOAD = plan_workload(GATE, vocab_size=163840)
#: the stored measurement: 38 and 10 tok/s, a little noise
RATES = {5700: (37.5, 38.0, 38.6), 23000: (9.9, 10.0, 10.2)}


def _samples(rates: dict[int, tuple[float, ...]], start: int = 0) -> tuple[Sample, ...]:
    return tuple(
        Sample("measure", ctx, start + i, decode_tps=v, completion_tokens=64)
        for ctx, values in rates.items()
        for i, v in enumerate(values)
    )


STORED = Measurement("fp", samples=_samples(RATES), summaries=summarize(_samples(RATES)))
PLANNED = plan_check(WORKLOAD, STORED)


def _check(now: dict[int, tuple[float, ...]], **kw: object) -> DriftCheck:
    return judge_drift(STORED, _samples(now, start=3), PLANNED, 12.0, **kw)  # type: ignore[arg-type]


def test_the_check_sends_a_few_new_prompts_per_context() -> None:
    assert [(r.context, r.index, r.phase) for r in PLANNED] == [
        (5700, 3, "measure"), (5700, 4, "measure"), (23000, 3, "measure"), (23000, 4, "measure"),
    ]  # fmt: skip
    assert DRIFT_REQUESTS == 2 and all(isinstance(r, GenRequest) for r in PLANNED)
    # the same prompts the gate would send as extra repeats: comparable with the stored ones
    assert PLANNED[0] == WORKLOAD.extra_requests(5700, 1, 3)[0]


def test_a_steady_baseline_is_reused() -> None:
    check = _check({5700: (38.1, 37.8), 23000: (10.1, 9.9)})
    assert check.steady, check.reason
    assert check.reason.startswith("steady (within ±5% or the noise): 5700: 38.0 tok/s now")
    assert [r.completed for r in check.rows] == [2, 2]


def test_a_drifted_baseline_is_measured_again() -> None:
    # the stored one was measured beside other load: the baseline is 40% faster now
    check = _check({5700: (53.0, 53.4), 23000: (10.1, 9.9)})
    assert not check.steady
    assert check.reason.startswith("drifted beyond the noise: 5700: 53.2 tok/s now vs 38.0")
    slower = _check({5700: (38.1, 37.8), 23000: (8.0, 8.1)})
    assert not slower.steady and "23000: 8.1 tok/s now vs 10.0 stored, ratio 0.81" in slower.reason


def test_a_change_within_the_noise_is_not_a_drift() -> None:
    # 6% off, but the samples straddle the stored ones: not beyond the noise
    assert _check({5700: (34.0, 46.0), 23000: (10.0, 10.1)}).steady
    # within the tolerance however tight: not a drift worth a measurement
    assert _check({5700: (39.5, 39.6), 23000: (10.0, 10.0)}).steady


def test_failures_and_the_time_bound_measure_again() -> None:
    failed = dataclasses.replace(
        _samples({5700: (38.0,)}, start=3)[0], error="HTTP 500", decode_tps=None
    )
    rest = _samples({5700: (38.0,), 23000: (10.0, 10.0)}, start=4)
    check = judge_drift(STORED, (failed, *rest), PLANNED, 5.0)
    assert not check.steady and check.reason.startswith("requests failed: 5700: 1 of 2")
    late = judge_drift(STORED, _samples({5700: (38.0, 38.0)}, start=3), PLANNED, 300.0, 300.0)
    assert not late.steady
    assert late.reason.startswith("out of time after 300 s (bound 300 s): 5700: 38.0 tok/s")
    assert "23000: 0 of 2 requests completed" in late.reason
    assert late.to_dict()["rows"][1]["completed"] == 0


class _FakeServer:
    """Stands in for the baseline's ``/generate``: each request takes ``seconds`` on a fake
    clock and decodes at ``rate`` (or fails with ``error``); records each timeout it got."""

    def __init__(self, seconds: float, rate: float = 38.0, error: str | None = None) -> None:
        self.now = 0.0
        self.seconds, self.rate, self.error = seconds, rate, error
        self.timeouts: list[float] = []
        self.tokens: list[int] = []

    def clock(self) -> float:
        return self.now

    def generate(self, endpoint: object, payload: object, *, timeout_s: float,
                 **kw: object) -> StreamResult:  # fmt: skip
        self.timeouts.append(timeout_s)
        self.tokens.append(payload["sampling_params"]["max_new_tokens"])  # type: ignore[index]
        if self.seconds > timeout_s:  # the request outlives its timeout: cut there
            self.now += timeout_s
            return StreamResult(None, None, timeout_s, 0, 0, f"timed out after {timeout_s:g} s")
        self.now += self.seconds
        return StreamResult(0.1, self.rate, self.seconds, 64, 64, self.error)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Callable[..., _FakeServer]:
    def make(seconds: float, **kw: Any) -> _FakeServer:
        server = _FakeServer(seconds, **kw)
        monkeypatch.setattr("kctl.gate.runner.stream_generate", server.generate)
        monkeypatch.setattr("kctl.gate.drift.server_vocab_size", lambda *a: None)
        return server

    return make


def _stored_flat(rate: float) -> Measurement:
    samples = _samples({5700: (rate, rate, rate), 23000: (rate, rate, rate)})
    return Measurement("fp", samples=samples, summaries=summarize(samples))


def test_run_drift_check_sends_the_planned_requests_within_the_bound(
    fake: Callable[..., _FakeServer],
) -> None:
    server = fake(10.0)
    events: list[GateProgress] = []
    check = run_drift_check(Endpoint("127.0.0.1", 1), WORKLOAD, _stored_flat(38.0),
                            budget_s=300.0, clock=server.clock, progress=events.append)  # fmt: skip
    assert check.steady, check.reason
    assert check.elapsed_s == 40.0 and [r.completed for r in check.rows] == [2, 2]
    # each request may take at most the time left of the bound
    assert server.timeouts == [min(WORKLOAD.request_timeout_s, 300.0 - 10 * i) for i in range(4)]
    assert [(e.phase, e.context, e.done) for e in events] == [
        ("drift check", 5700, 1), ("drift check", 5700, 2),
        ("drift check", 23000, 3), ("drift check", 23000, 4),
    ]  # fmt: skip
    assert DriftCheck.from_dict(check.to_dict()) == check
    drifted = run_drift_check(Endpoint("127.0.0.1", 1), WORKLOAD, _stored_flat(20.0),
                              clock=server.clock)  # fmt: skip
    assert not drifted.steady and drifted.reason.startswith("drifted beyond the noise")


def test_the_time_bound_ends_the_check_and_cuts_a_request_short(
    fake: Callable[..., _FakeServer],
) -> None:
    # 120 s a request, 300 s bound: two complete, the third is cut at 60 s, none more
    server = fake(120.0)
    check = run_drift_check(Endpoint("127.0.0.1", 1), WORKLOAD, _stored_flat(38.0),
                            budget_s=300.0, clock=server.clock)  # fmt: skip
    assert server.timeouts == [min(WORKLOAD.request_timeout_s, t) for t in (300.0, 180.0, 60.0)]
    assert not check.steady and check.elapsed_s == 300.0
    assert check.reason.startswith("out of time after 300 s (bound 300 s): 5700: 38.0 tok/s")
    assert [(r.completed, r.sent) for r in check.rows] == [(2, 2), (0, 2)]
    # a bound already spent sends nothing
    server = fake(1.0)
    none = run_drift_check(Endpoint("127.0.0.1", 1), WORKLOAD, _stored_flat(38.0),
                           budget_s=0.0, clock=server.clock)  # fmt: skip
    assert server.timeouts == [] and not none.steady and none.reason.startswith("out of time")


def test_a_failing_baseline_is_measured_again(fake: Callable[..., _FakeServer]) -> None:
    server = fake(1.0, error="HTTP 500: boom")
    check = run_drift_check(Endpoint("127.0.0.1", 1), WORKLOAD, _stored_flat(38.0),
                            clock=server.clock)  # fmt: skip
    assert not check.steady and check.reason.startswith("requests failed: 5700: 0 of 2")
    assert len(server.timeouts) == 4  # the bound did not end it: every request was tried


#: the shipped profiles' shape: 128 tokens a request; the baseline decodes about 52, 8 and
#: 2 tok/s at 5.7k, 23k and 91k
LONG = plan_workload(
    GateSpec(contexts=(5700, 23000, 91000), output_tokens=128, repeats=3, warmup=1),
    vocab_size=163840,
)
LONG_RATES = {5700: (51.0, 52.0, 52.5), 23000: (7.9, 8.0, 8.1), 91000: (1.98, 2.0, 2.02)}
LONG_STORED = Measurement(
    "fp", samples=_samples(LONG_RATES), summaries=summarize(_samples(LONG_RATES))
)


def test_a_slow_context_is_checked_on_a_shorter_stream() -> None:
    # the decode rate is a rate: where the gate's stream would last over 16 s, a check
    # request streams 16 s of it (at least 32 tokens); fast contexts keep the whole stream
    assert (DRIFT_STREAM_S, DRIFT_MIN_TOKENS) == (16.0, 32)
    planned = plan_check(LONG, LONG_STORED)
    assert [(r.context, r.index, r.max_new_tokens) for r in planned] == [
        (5700, 3, 128), (5700, 4, 128), (23000, 3, 128), (23000, 4, 128),
        (91000, 3, 32), (91000, 4, 32),
    ]  # fmt: skip
    # the gate's own prompts (its extra repeats'), fewer tokens each
    extra = LONG.extra_requests(91000, 1, 3)[0]
    assert planned[4] == dataclasses.replace(extra, max_new_tokens=32)
    assert [check_tokens(n, r) for n, r in ((128, 3.0), (128, 0.5), (16, 2.0), (64, 9.0))] == [
        48, 32, 16, 64,
    ]  # fmt: skip
    # what plan estimates from the stored rates is what the check sends
    assert check_requests(LONG, stored_rates(LONG_STORED), {c: 3 for c in LONG.contexts}) == planned


def test_the_short_stream_is_what_goes_out_and_a_drift_there_is_still_found(
    fake: Callable[..., _FakeServer],
) -> None:
    server = fake(5.0, rate=2.0)
    check = run_drift_check(Endpoint("127.0.0.1", 1), LONG, LONG_STORED, clock=server.clock)
    assert server.tokens == [128, 128, 128, 128, 32, 32]
    # the fake decodes 2 tok/s everywhere: far below the stored rates at 5.7k and 23k
    assert not check.steady and [r.outcome for r in check.rows] == ["drifted", "drifted", "steady"]
    # at 91k alone: the shorter stream's rates judged against the stored ones as before
    slow = judge_drift(
        LONG_STORED,
        _samples({91000: (1.70, 1.72)}, start=3),
        plan_check(LONG, LONG_STORED)[4:],
        80.0,
    )
    assert not slow.steady and slow.rows[0].outcome == "drifted"
