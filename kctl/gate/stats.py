"""Per-bucket statistics of a measurement. Pure.

A *bucket* is (context length, concurrency): the one-at-a-time requests of a context form
one bucket, the optional concurrency phase another. Only measured (not warm-up) samples
count; failed samples are counted, never averaged.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Sample:
    """One request as it happened. ``error`` is None when it completed."""

    phase: str
    context: int
    index: int
    concurrency: int = 1
    #: 0 for the planned requests, 1.. for each round of extra repeats
    round: int = 0
    ttft_s: float | None = None
    decode_tps: float | None = None
    e2e_s: float | None = None
    completion_tokens: int = 0
    error: str | None = None
    #: seconds per token after the first (SGLang bench_serving's ITL)
    itl_s: tuple[float, ...] = ()
    #: SGLang's mean speculative acceptance length for the request; None without it
    accept_length: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.decode_tps is not None

    @property
    def bucket(self) -> tuple[int, int]:
        return (self.context, self.concurrency)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Sample:
        return cls(**{**d, "itl_s": tuple(d.get("itl_s", ()))})


@dataclass(frozen=True)
class Summary:
    """Decode tok/s statistics of one bucket, and SGLang's latency and acceptance figures."""

    context: int
    concurrency: int
    n_completed: int
    n_failed: int
    median: float | None
    min: float | None
    max: float | None
    #: coefficient of variation (population stdev / mean) of decode tok/s
    cv: float | None
    ttft_median_s: float | None = None
    e2e_median_s: float | None = None
    #: decode tok/s of every completed sample, in the order measured
    values: tuple[float, ...] = ()
    #: inter-token latency percentiles over every token of the completed samples
    itl_p50_s: float | None = None
    itl_p99_s: float | None = None
    #: mean of the completed samples' acceptance lengths (speculative decoding)
    accept_length: float | None = None

    @property
    def bucket(self) -> tuple[int, int]:
        return (self.context, self.concurrency)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["values"] = list(self.values)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Summary:
        return cls(**{**d, "values": tuple(d.get("values", ()))})


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def percentile(xs: list[float], q: float) -> float | None:
    """Linear-interpolated percentile, ``q`` in [0, 1]; None for no values."""
    if not xs:
        return None
    ys = sorted(xs)
    pos = q * (len(ys) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ys) - 1)
    return ys[lo] + (ys[hi] - ys[lo]) * (pos - lo)


def summarize_bucket(context: int, concurrency: int, samples: Iterable[Sample]) -> Summary:
    """Statistics of the measured samples of one bucket (warm-ups are ignored)."""
    mine = [
        s
        for s in samples
        if s.phase != "warmup" and s.context == context and s.concurrency == concurrency
    ]
    values = [s.decode_tps for s in mine if s.ok and s.decode_tps is not None]
    itl = [x for s in mine if s.ok for x in s.itl_s]
    accept = [s.accept_length for s in mine if s.ok and s.accept_length is not None]
    failed = sum(1 for s in mine if not s.ok)
    cv = None
    if values:
        mean = statistics.fmean(values)
        cv = statistics.pstdev(values) / mean if mean > 0 else None
    return Summary(
        context=context,
        concurrency=concurrency,
        n_completed=len(values),
        n_failed=failed,
        median=_median(values),
        min=min(values) if values else None,
        max=max(values) if values else None,
        cv=cv,
        ttft_median_s=_median([s.ttft_s for s in mine if s.ok and s.ttft_s is not None]),
        e2e_median_s=_median([s.e2e_s for s in mine if s.ok and s.e2e_s is not None]),
        values=tuple(values),
        itl_p50_s=percentile(itl, 0.50),
        itl_p99_s=percentile(itl, 0.99),
        accept_length=statistics.fmean(accept) if accept else None,
    )


def summarize(samples: Iterable[Sample]) -> tuple[Summary, ...]:
    """One :class:`Summary` per bucket seen among the measured samples, sorted by
    (concurrency, context)."""
    samples = list(samples)
    buckets = sorted({s.bucket for s in samples if s.phase != "warmup"}, key=lambda b: (b[1], b[0]))
    return tuple(summarize_bucket(ctx, conc, samples) for ctx, conc in buckets)
