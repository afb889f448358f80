"""Per-bucket statistics."""

from __future__ import annotations

import pytest

from kctl.gate.stats import Sample, summarize, summarize_bucket


def ok(ctx: int, tps: float, index: int = 0, conc: int = 1, phase: str = "measure") -> Sample:
    return Sample(phase, ctx, index, conc, ttft_s=0.5, decode_tps=tps, e2e_s=2.0,
                  completion_tokens=8)  # fmt: skip


def test_median_min_max_cv_and_failures() -> None:
    samples = [
        ok(100, 999.0, phase="warmup"),  # warm-ups never count
        ok(100, 10.0, 0),
        ok(100, 12.0, 1),
        ok(100, 14.0, 2),
        Sample("measure", 100, 3, error="timed out after 5 s"),
    ]
    s = summarize_bucket(100, 1, samples)
    assert (s.n_completed, s.n_failed) == (3, 1)
    assert (s.median, s.min, s.max) == (12.0, 10.0, 14.0)
    assert s.cv == pytest.approx((8 / 3) ** 0.5 / 12.0)
    assert s.values == (10.0, 12.0, 14.0)
    assert s.ttft_median_s == 0.5 and s.e2e_median_s == 2.0


def test_all_failed_bucket_has_no_numbers() -> None:
    s = summarize_bucket(100, 1, [Sample("measure", 100, 0, error="HTTP 500: boom")])
    assert (s.n_completed, s.n_failed, s.median, s.cv) == (0, 1, None, None)


def test_summarize_one_summary_per_bucket_sorted() -> None:
    samples = [ok(500, 5.0), ok(100, 10.0), ok(100, 8.0, conc=4), ok(100, 1.0, phase="warmup")]
    out = summarize(samples)
    assert [(s.context, s.concurrency) for s in out] == [(100, 1), (500, 1), (100, 4)]


def test_sample_and_summary_round_trip() -> None:
    s = summarize([ok(100, 10.0), ok(100, 11.0, 1)])[0]
    assert type(s).from_dict(s.to_dict()) == s
    smp = ok(100, 10.0)
    assert Sample.from_dict(smp.to_dict()) == smp
