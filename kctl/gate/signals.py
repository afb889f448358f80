"""SGLang's own figures per bucket, baseline vs candidate, and the policy checks on them.
Pure.

Per bucket: median TTFT, inter-token latency p50/p99 (over every token of the completed
requests) and the mean speculative acceptance length SGLang reports in ``meta_info``.

**Acceptance length** is a correctness signal: the same model, draft and tokens must be
accepted at the same rate, so the candidate's mean may move from the baseline's by
``policy.accept_length_tolerance`` (default 2 %) at most, either way; beyond that the
verdict is FAIL with both figures. **Latency** is gated only where the policy sets
``max_ttft_ratio`` / ``max_itl_p50_ratio`` / ``max_itl_p99_ratio`` (candidate over
baseline); otherwise it is shown.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from kctl.gate.measurement import Measurement
from kctl.gate.stats import Summary
from kctl.profile.model import PolicySpec

Metric = Literal["accept_length", "ttft", "itl_p50", "itl_p99"]

#: each metric's :class:`Figures` attribute, and how messages name it
_FIELDS: dict[Metric, tuple[str, str]] = {
    "accept_length": ("accept_length", "acceptance length"),
    "ttft": ("ttft_s", "TTFT"),
    "itl_p50": ("itl_p50_s", "ITL p50"),
    "itl_p99": ("itl_p99_s", "ITL p99"),
}


@dataclass(frozen=True)
class Figures:
    """One side's figures for one bucket (None: not measured or not reported)."""

    ttft_s: float | None = None
    itl_p50_s: float | None = None
    itl_p99_s: float | None = None
    accept_length: float | None = None

    @classmethod
    def of(cls, summary: Summary | None) -> Figures:
        if summary is None or summary.n_completed == 0:
            return cls()
        return cls(
            summary.ttft_median_s, summary.itl_p50_s, summary.itl_p99_s, summary.accept_length
        )

    def get(self, metric: Metric) -> float | None:
        value: float | None = getattr(self, _FIELDS[metric][0])
        return value


@dataclass(frozen=True)
class MetricRow:
    context: int
    concurrency: int
    baseline: Figures
    candidate: Figures

    @property
    def label(self) -> str:
        return str(self.context) if self.concurrency == 1 else f"{self.context} x{self.concurrency}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "context": self.context,
            "concurrency": self.concurrency,
            "baseline": asdict(self.baseline),
            "candidate": asdict(self.candidate),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MetricRow:
        return cls(
            d["context"], d["concurrency"], Figures(**d["baseline"]), Figures(**d["candidate"])
        )


@dataclass(frozen=True)
class Check:
    """One policy check of one metric in one bucket."""

    metric: Metric
    context: int
    concurrency: int
    baseline: float
    candidate: float | None
    #: the allowed candidate range, as words, e.g. "within 2% of the baseline"
    limit: str
    passed: bool

    def describe(self) -> str:
        where = (
            str(self.context) if self.concurrency == 1 else f"{self.context} x{self.concurrency}"
        )
        name = _FIELDS[self.metric][1]
        unit = "" if self.metric == "accept_length" else " s"
        cand = "not reported" if self.candidate is None else f"{self.candidate:.4g}{unit}"
        return (
            f"{where}: {name} candidate {cand} vs baseline {self.baseline:.4g}{unit} "
            f"(allowed: {self.limit})"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Check:
        return cls(**d)


def metric_rows(baseline: Measurement, candidate: Measurement) -> tuple[MetricRow, ...]:
    """Both sides' figures for every bucket of the baseline, in its order."""
    return tuple(
        MetricRow(
            b.context,
            b.concurrency,
            Figures.of(b),
            Figures.of(candidate.summary(b.context, b.concurrency)),
        )
        for b in baseline.summaries
    )


def _accept_check(row: MetricRow, tolerance: float) -> Check | None:
    base = row.baseline.accept_length
    if base is None or row.candidate == Figures():
        return None  # no speculative decoding, or a bucket the candidate did not finish
    cand = row.candidate.accept_length
    ok = cand is not None and abs(cand / base - 1.0) <= tolerance
    limit = f"within {tolerance:.0%} of the baseline"
    return Check("accept_length", row.context, row.concurrency, base, cand, limit, ok)


def _ratio_check(row: MetricRow, metric: Metric, max_ratio: float | None) -> Check | None:
    base = row.baseline.get(metric)
    cand = row.candidate.get(metric)
    if max_ratio is None or base is None or base <= 0 or cand is None:
        return None
    ok = cand / base <= max_ratio
    limit = f"at most {max_ratio:g}x the baseline"
    return Check(metric, row.context, row.concurrency, base, cand, limit, ok)


def check_metrics(rows: tuple[MetricRow, ...], policy: PolicySpec) -> tuple[Check, ...]:
    """Every check the policy asks for, per bucket: acceptance length always (where
    both sides decode speculatively), latency where a ratio is set."""
    latency: tuple[tuple[Metric, float | None], ...] = (
        ("ttft", policy.max_ttft_ratio),
        ("itl_p50", policy.max_itl_p50_ratio),
        ("itl_p99", policy.max_itl_p99_ratio),
    )
    out: list[Check] = []
    for row in rows:
        found = [_accept_check(row, policy.accept_length_tolerance)]
        found += [_ratio_check(row, metric, limit) for metric, limit in latency]
        out.extend(c for c in found if c is not None)
    return tuple(out)


def failed_reason(checks: tuple[Check, ...], metrics: tuple[Metric, ...]) -> str | None:
    """The FAIL reason for the failed checks of ``metrics``, or None when all passed."""
    failed = [c for c in checks if not c.passed and c.metric in metrics]
    if not failed:
        return None
    what = "acceptance length" if metrics == ("accept_length",) else "latency"
    return f"{what} outside the policy: " + "; ".join(c.describe() for c in failed)
