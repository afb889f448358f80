"""A measurement as SGLang's ``bench_serving`` writes its results: one JSON object per line,
one line per gate bucket (context x concurrency), with the same field names and units, so
dashboards and scripts built on ``python -m sglang.bench_serving --output-file`` read kctl's
numbers too (``kctl bench --bench-serving FILE``).

kctl's gate prompts are random token ids of a fixed length, so a bucket is written as
``dataset_name: random`` with ``random_input_len`` = the context and ``random_range_ratio``
1.0. kctl sends each bucket's requests at a fixed concurrency, never at a request rate:
``request_rate`` is null (bench_serving writes ``Infinity`` there, which is not JSON).
``duration`` is the sum of the bucket's end-to-end times, divided by its concurrency for a
concurrent bucket (kctl does not record each request's start). Fields bench_serving fills
from the tokenizer or from per-second accounting kctl does not do (retokenized output,
text/vision input split, ``max_output_tokens_per_s``) are null.
"""

from __future__ import annotations

import statistics
from typing import Any

from kctl.gate.measurement import Measurement
from kctl.gate.stats import Sample, percentile

MS = 1000.0


def _ms(xs: list[float]) -> dict[str, float | None]:
    """mean / median / std / p90 / p95 / p99 of ``xs`` (seconds) in milliseconds."""
    if not xs:
        return dict.fromkeys(("mean", "median", "std", "p90", "p95", "p99"))
    return {
        "mean": statistics.fmean(xs) * MS,
        "median": statistics.median(xs) * MS,
        "std": statistics.pstdev(xs) * MS,
        "p90": _scaled(percentile(xs, 0.90)),
        "p95": _scaled(percentile(xs, 0.95)),
        "p99": _scaled(percentile(xs, 0.99)),
    }


def _scaled(x: float | None) -> float | None:
    return None if x is None else x * MS


def _tpot(s: Sample) -> float | None:
    """Time per output token after the first, as bench_serving computes it."""
    if s.e2e_s is None or s.ttft_s is None or s.completion_tokens < 2:
        return None
    return (s.e2e_s - s.ttft_s) / (s.completion_tokens - 1)


def bucket_row(
    samples: list[Sample], *, context: int, concurrency: int, output_len: int
) -> dict[str, Any]:
    """The bench_serving result of one bucket's measured samples (warm-ups excluded)."""
    done = [s for s in samples if s.ok]
    e2e = [s.e2e_s for s in done if s.e2e_s is not None]
    ttft = [s.ttft_s for s in done if s.ttft_s is not None]
    tpot = [t for s in done if (t := _tpot(s)) is not None]
    itl = [x for s in done for x in s.itl_s]
    accept = [s.accept_length for s in done if s.accept_length is not None]
    duration = sum(e2e) / concurrency if e2e else 0.0
    total_in = context * len(done)
    total_out = sum(s.completion_tokens for s in done)

    def rate(n: float) -> float | None:
        return n / duration if duration > 0 else None

    lat, first, per_tok, inter = _ms(e2e), _ms(ttft), _ms(tpot), _ms(itl)
    return {
        "backend": "sglang",
        "dataset_name": "random",
        "request_rate": None,
        "max_concurrency": concurrency,
        "sharegpt_output_len": None,
        "random_input_len": context,
        "random_output_len": output_len,
        "random_range_ratio": 1.0,
        "duration": duration,
        "completed": len(done),
        "total_input_tokens": total_in,
        "total_input_text_tokens": None,
        "total_input_vision_tokens": None,
        "total_output_tokens": total_out,
        "total_output_tokens_retokenized": None,
        "request_throughput": rate(len(done)),
        "input_throughput": rate(total_in),
        "output_throughput": rate(total_out),
        "total_throughput": rate(total_in + total_out),
        "mean_e2e_latency_ms": lat["mean"],
        "median_e2e_latency_ms": lat["median"],
        "std_e2e_latency_ms": lat["std"],
        "p90_e2e_latency_ms": lat["p90"],
        "p99_e2e_latency_ms": lat["p99"],
        "mean_ttft_ms": first["mean"],
        "median_ttft_ms": first["median"],
        "std_ttft_ms": first["std"],
        "p99_ttft_ms": first["p99"],
        "mean_tpot_ms": per_tok["mean"],
        "median_tpot_ms": per_tok["median"],
        "std_tpot_ms": per_tok["std"],
        "p99_tpot_ms": per_tok["p99"],
        "mean_itl_ms": inter["mean"],
        "median_itl_ms": inter["median"],
        "std_itl_ms": inter["std"],
        "p95_itl_ms": inter["p95"],
        "p99_itl_ms": inter["p99"],
        "concurrency": sum(e2e) / duration if duration > 0 else None,
        "accept_length": statistics.fmean(accept) if accept else None,
        "max_output_tokens_per_s": None,
        "max_concurrent_requests": concurrency,
    }


def bench_serving_rows(
    meas: Measurement,
    *,
    output_len: int,
    tag: str,
    server_info: dict[str, Any] | None,
) -> list[dict[str, Any]]:
    """One bench_serving result per measured bucket of ``meas``, in the gate's order."""
    rows = []
    for summary in meas.summaries:
        ctx, conc = summary.context, summary.concurrency
        samples = [
            s
            for s in meas.samples
            if s.phase in ("measure", "concurrent") and s.bucket == (ctx, conc)
        ]
        row = bucket_row(samples, context=ctx, concurrency=conc, output_len=output_len)
        rows.append({"tag": tag, **row, "server_info": server_info})
    return rows
