"""A measurement bucket written as SGLang's bench_serving result, checked by hand figures."""

from __future__ import annotations

import json

import pytest

from kctl.gate.bench_serving import bench_serving_rows, bucket_row
from kctl.gate.measurement import Measurement
from kctl.gate.stats import Sample, summarize


def _sample(i: int, ttft: float, e2e: float, concurrency: int = 1) -> Sample:
    return Sample(
        phase="measure", context=1000, index=i, ttft_s=ttft, e2e_s=e2e, decode_tps=1.0,
        completion_tokens=5, itl_s=(0.1, 0.3), accept_length=2.0 + i, concurrency=concurrency,
    )  # fmt: skip


def test_a_bucket_in_bench_servings_fields_and_units() -> None:
    samples = [_sample(0, 0.2, 1.0), _sample(1, 0.4, 2.2), Sample("measure", 1000, 2, error="x")]
    row = bucket_row(samples, context=1000, concurrency=1, output_len=5)
    assert row["completed"] == 2 and row["duration"] == pytest.approx(3.2)
    assert row["total_input_tokens"] == 2000 and row["total_output_tokens"] == 10
    assert row["request_throughput"] == pytest.approx(2 / 3.2)
    assert row["output_throughput"] == pytest.approx(10 / 3.2)
    assert row["mean_ttft_ms"] == pytest.approx(300.0)
    assert row["median_e2e_latency_ms"] == pytest.approx(1600.0)
    # TPOT: (e2e - ttft) / (tokens - 1): 0.2 s and 0.45 s
    assert row["mean_tpot_ms"] == pytest.approx(325.0)
    assert row["median_itl_ms"] == pytest.approx(200.0)
    assert row["p95_itl_ms"] == pytest.approx(300.0)
    assert row["accept_length"] == pytest.approx(2.5)
    assert row["concurrency"] == pytest.approx(1.0) and row["request_rate"] is None


def test_rows_follow_the_buckets_and_are_strict_json() -> None:
    samples = (
        Sample("warmup", 1000, 0, ttft_s=9.0, e2e_s=9.0, decode_tps=1.0, completion_tokens=5),
        _sample(0, 0.2, 1.0),
        _sample(1, 0.4, 2.2, concurrency=2),
    )
    meas = Measurement(fingerprint="f", samples=samples, summaries=summarize(samples))
    rows = bench_serving_rows(meas, output_len=5, tag="t", server_info={"version": "0.5.23"})
    assert [(r["max_concurrency"], r["completed"]) for r in rows] == [(1, 1), (2, 1)]
    assert rows[0]["mean_ttft_ms"] == pytest.approx(200.0)  # the warm-up is not counted
    assert rows[1]["duration"] == pytest.approx(1.1)  # 2.2 s of end-to-end at concurrency 2
    assert all(r["tag"] == "t" and r["server_info"] == {"version": "0.5.23"} for r in rows)
    json.dumps(rows, allow_nan=False)
    empty = bucket_row([], context=1, concurrency=1, output_len=1)
    assert empty["completed"] == 0 and empty["mean_ttft_ms"] is None
    json.dumps(empty, allow_nan=False)
