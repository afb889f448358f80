"""The gate's judge: candidate vs baseline under a policy. Pure.

Per bucket (context length; the concurrency phase forms buckets of its own) the ratio is
``median(candidate decode tok/s) / median(baseline decode tok/s)``.

**Noise.** Each ratio gets a 90 % percentile-bootstrap interval: both sides' samples are
resampled with replacement :data:`BOOTSTRAP_ROUNDS` times (fixed seed, so the same
measurements always give the same verdict) and the 5th and 95th percentiles of the
resampled ratio of medians bound it. With three samples a side this is close to
``[cand_min / base_max, cand_max / base_min]``; unlike that min/max bound it narrows as
repeats are added, which is what extra repeats are for. A row is

- PASS when the whole interval is at or above its threshold,
- FAIL when the whole interval is below it,
- UNCLEAR when the interval straddles it (the runner adds repeats for these buckets),
- INFO when no threshold binds it (see the objective below).

**Objective.** With ``policy.objective`` the traffic-mix weighted mean of the one-at-a-time
ratios, ``sum(w * ratio) / sum(w)``, decides instead of the per-context default: rows bind
only where ``policy.min_ratio_per_context`` names a floor for their context. The objective
gets its interval from the same bootstrap resamples.

**Overall**, first match wins: a correctness mismatch beyond the tolerance → FAIL; a bucket
with fewer completed requests than ``min_completed_fraction`` → FAIL; a binding row or the
objective clearly below its threshold → FAIL; anything UNCLEAR → INCONCLUSIVE (the runner
first spends ``policy.max_extra_repeats`` on it); otherwise PASS.

**SGLang's figures** (:mod:`kctl.gate.signals`): TTFT, ITL p50/p99 and the mean
acceptance length per bucket, both sides. An acceptance length outside
``policy.accept_length_tolerance`` → FAIL right after a correctness mismatch; a latency
ratio beyond a ``policy.max_*_ratio`` the policy sets → FAIL.

**Stopping early.** With ``policy.stop_at_first_fail`` the runner judges after each
context and stops at the first FAIL; the buckets it did not measure are passed as
``skipped`` and come out as SKIPPED rows, which decide nothing (an objective over a
skipped context is not computed: SKIPPED). The runner asks the correctness probes before
any throughput request: a candidate they reject is judged with every bucket skipped, and
its FAIL names the probes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from kctl.errors import GateError
from kctl.gate.bootstrap import (
    BOOTSTRAP_ROUNDS,
    BOOTSTRAP_SEED,
    INTERVAL_LEVEL,
    Boot,
    Crossover,
    bootstrap,
    crossover,
    interval,
)
from kctl.gate.correctness import CorrectnessResult, Mismatch, check_correctness
from kctl.gate.measurement import Measurement
from kctl.gate.signals import Check, MetricRow, check_metrics, failed_reason, metric_rows
from kctl.gate.stats import Summary
from kctl.profile.model import PolicySpec

RowResult = Literal["PASS", "FAIL", "UNCLEAR", "INFO", "SKIPPED"]
Overall = Literal["PASS", "FAIL", "INCONCLUSIVE"]

__all__ = [
    "CorrectnessResult",
    "Crossover",
    "Mismatch",
    "ObjectiveResult",
    "Row",
    "Verdict",
    "check_correctness",
    "crossover",
    "judge",
    "rejected_on_probes",
]


# --------------------------------------------------------------------------- rows


@dataclass(frozen=True)
class Row:
    """One bucket of the verdict table."""

    context: int
    concurrency: int
    #: None only where neither side was measured (a fleet canary its probes rejected)
    baseline_tps: float | None
    candidate_tps: float | None
    ratio: float | None
    ratio_lo: float | None
    ratio_hi: float | None
    #: None when no threshold binds this row (objective mode without a per-context floor)
    threshold: float | None
    result: RowResult
    n_completed: int
    n_planned: int
    note: str = ""

    @property
    def label(self) -> str:
        return str(self.context) if self.concurrency == 1 else f"{self.context} x{self.concurrency}"


@dataclass(frozen=True)
class ObjectiveResult:
    value: float
    lo: float
    hi: float
    min_ratio: float
    result: RowResult
    weights: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class Verdict:
    """The judge's answer; ``reason`` names the deciding bucket(s)."""

    verdict: Overall
    reason: str
    rows: tuple[Row, ...]
    crossover: Crossover
    objective: ObjectiveResult | None = None
    correctness: CorrectnessResult | None = None
    #: (context, concurrency) buckets whose interval straddles their threshold
    unclear: tuple[tuple[int, int], ...] = ()
    timings: tuple[tuple[str, float], ...] = ()
    #: SGLang's figures per bucket, both sides, and the policy's checks on them
    metrics: tuple[MetricRow, ...] = ()
    checks: tuple[Check, ...] = ()
    method: str = (
        f"ratio of medians; {INTERVAL_LEVEL:.0%} bootstrap interval, "
        f"{BOOTSTRAP_ROUNDS} resamples, seed {BOOTSTRAP_SEED}"
    )

    def with_timings(self, *extra: tuple[str, float]) -> Verdict:
        """A copy with more (name, seconds) timings, e.g. the health phases."""
        return replace(self, timings=self.timings + tuple(extra))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict."""
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "rows": [r.__dict__.copy() for r in self.rows],
            "crossover": self.crossover.__dict__.copy(),
            "objective": None
            if self.objective is None
            else {**self.objective.__dict__, "weights": [list(w) for w in self.objective.weights]},
            "correctness": None if self.correctness is None else self.correctness.to_dict(),
            "unclear": [list(b) for b in self.unclear],
            "timings": [[k, v] for k, v in self.timings],
            "metrics": [m.to_dict() for m in self.metrics],
            "checks": [c.to_dict() for c in self.checks],
            "method": self.method,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verdict:
        """Inverse of :meth:`to_dict`."""
        obj = d.get("objective")
        corr = d.get("correctness")
        return cls(
            verdict=d["verdict"],
            reason=d["reason"],
            rows=tuple(Row(**r) for r in d["rows"]),
            crossover=Crossover(**d["crossover"]),
            objective=None
            if obj is None
            else ObjectiveResult(**{**obj, "weights": tuple(tuple(w) for w in obj["weights"])}),
            correctness=None if corr is None else CorrectnessResult.from_dict(corr),
            unclear=tuple((int(c), int(k)) for c, k in d.get("unclear", ())),
            timings=tuple((str(k), float(v)) for k, v in d.get("timings", ())),
            metrics=tuple(MetricRow.from_dict(m) for m in d.get("metrics", ())),
            checks=tuple(Check.from_dict(c) for c in d.get("checks", ())),
            method=d.get("method", ""),
        )


# --------------------------------------------------------------------------- maths


def _classify(lo: float, hi: float, threshold: float) -> RowResult:
    if lo >= threshold:
        return "PASS"
    if hi < threshold:
        return "FAIL"
    return "UNCLEAR"


# --------------------------------------------------------------------------- judge


def _fmt(x: float) -> str:
    return f"{x:.2f}"


def judge(
    baseline: Measurement,
    candidate: Measurement,
    policy: PolicySpec,
    correctness: CorrectnessResult | None = None,
    skipped: frozenset[tuple[int, int]] = frozenset(),
) -> Verdict:
    """Judge ``candidate`` against ``baseline`` under ``policy`` (see the module doc).
    ``correctness`` comes from :func:`check_correctness`; None means it was not checked.
    ``skipped``: (context, concurrency) buckets deliberately not measured (stopping early,
    or a candidate its correctness probes rejected before any throughput request)."""
    rows_in, pairs = _pair(baseline, candidate)
    boot = bootstrap(pairs)
    probes_failed = correctness is not None and not correctness.passed
    why_skipped = (
        "not measured: the candidate failed its correctness probes"
        if probes_failed
        else "not measured: the gate stopped at a FAIL"
    )
    rows = [
        _row(base, cand, policy, boot, skipped=base.bucket in skipped, why=why_skipped)
        for base, cand in rows_in
    ]
    objective = _objective(policy, rows, boot)
    xover = crossover([(r.context, r.ratio) for r in rows if r.concurrency == 1 and r.ratio])
    unclear = _unclear(rows, objective)
    metrics = metric_rows(baseline, candidate)
    checks = check_metrics(metrics, policy)
    verdict, reason = _decide(rows, objective, correctness, unclear, checks)
    reason += _not_measured(rows, verdict == "FAIL", probes_failed)
    return Verdict(
        verdict=verdict,
        reason=reason,
        rows=tuple(rows),
        crossover=xover,
        objective=objective,
        correctness=correctness,
        unclear=unclear if verdict == "INCONCLUSIVE" else (),
        timings=candidate.timings,
        metrics=metrics,
        checks=checks,
    )


def _not_measured(rows: list[Row], failed: bool, probes_failed: bool) -> str:
    """The reason's tail that names the SKIPPED rows and why they were skipped."""
    not_measured = [r.label for r in rows if r.result == "SKIPPED"]
    if not not_measured:
        return ""
    lead = "stopped there; " if failed else ""
    if probes_failed:
        lead = "rejected on its probes, before any throughput request; "
    return f" ({lead}not measured: {', '.join(not_measured)})"


def rejected_on_probes(
    buckets: Sequence[tuple[int, int]],
    policy: PolicySpec,
    correctness: CorrectnessResult,
    timings: tuple[tuple[str, float], ...] = (),
) -> Verdict:
    """The FAIL of a candidate whose probes differ from a live baseline's when neither
    side's throughput was measured (the fleet canary asks both sides' probes first):
    every (context, concurrency) bucket SKIPPED, no rate on either side. As :func:`judge`
    words it, so both gates read alike."""
    assert not correctness.passed, "only a failed correctness check rejects on the probes"
    why = "not measured: the candidate failed its correctness probes"
    rows = [
        Row(ctx, conc, None, None, None, None, None, _threshold(policy, ctx), "SKIPPED", 0, 0, why)
        for ctx, conc in buckets
    ]
    verdict, reason = _overall(rows, None, correctness, ())
    return Verdict(
        verdict=verdict,
        reason=reason + _not_measured(rows, True, True),
        rows=tuple(rows),
        crossover=Crossover(None, "none"),
        correctness=correctness,
        timings=timings,
    )


def _threshold(policy: PolicySpec, context: int) -> float | None:
    """The floor that binds a row at ``context`` (None where none binds)."""
    if policy.objective is not None:
        return dict(policy.min_ratio_per_context).get(context)
    return policy.threshold(context)


def _pair(
    baseline: Measurement, candidate: Measurement
) -> tuple[list[tuple[Summary, Summary | None]], dict[tuple[int, int], tuple[Summary, Summary]]]:
    """Each baseline bucket with the candidate's (None where it has none), and the buckets
    both sides completed requests in (what the bootstrap resamples). GateError when the
    baseline lacks data to judge against."""
    pairs: dict[tuple[int, int], tuple[Summary, Summary]] = {}
    rows_in: list[tuple[Summary, Summary | None]] = []
    for base in baseline.summaries:
        if base.n_completed == 0 or base.median is None:
            raise GateError(
                f"baseline measurement has no completed request at context {base.context}",
                hint="measure the baseline again (kctl bench BASELINE_PROFILE)",
            )
        cand = candidate.summary(base.context, base.concurrency)
        rows_in.append((base, cand))
        if cand is not None and cand.n_completed > 0:
            pairs[base.bucket] = (base, cand)
    if not rows_in:
        raise GateError("baseline measurement has no summaries to compare with")
    return rows_in, pairs


def _row(
    base: Summary, cand: Summary | None, policy: PolicySpec, boot: Boot, *, skipped: bool, why: str
) -> Row:
    """One bucket's row: SKIPPED (``why``) when deliberately not measured, FAIL when
    nothing (or too little) completed, else classified by its interval."""
    assert base.median is not None, "checked by _pair"
    threshold = _threshold(policy, base.context)
    n_done = cand.n_completed if cand else 0
    n_planned = (cand.n_completed + cand.n_failed) if cand else 0
    if skipped and cand is None:
        return Row(base.context, base.concurrency, base.median, None, None, None, None,
                   threshold, "SKIPPED", 0, 0, why)  # fmt: skip
    if cand is None or cand.median is None:
        none = f"only 0 of {n_planned} requests completed" if n_planned else "not measured"
        return Row(base.context, base.concurrency, base.median, None, None, None, None,
                   threshold, "FAIL", n_done, n_planned, none)  # fmt: skip
    ratio = cand.median / base.median
    lo, hi = interval(boot.draws[base.bucket])
    result: RowResult = "INFO" if threshold is None else _classify(lo, hi, threshold)
    note = ""
    if n_planned and n_done / n_planned < policy.min_completed_fraction:
        result, note = "FAIL", f"only {n_done} of {n_planned} requests completed"
    return Row(base.context, base.concurrency, base.median, cand.median, ratio, lo, hi,
               threshold, result, n_done, n_planned, note)  # fmt: skip


def _unclear(rows: list[Row], objective: ObjectiveResult | None) -> tuple[tuple[int, int], ...]:
    """The buckets whose interval straddles their threshold; with an unclear objective,
    also every weighted context (more repeats there narrow the objective's interval)."""
    unclear = tuple((r.context, r.concurrency) for r in rows if r.result == "UNCLEAR")
    if objective is not None and objective.result == "UNCLEAR":
        weighted = {c for c, _ in objective.weights}
        unclear += tuple(
            (r.context, 1)
            for r in rows
            if r.concurrency == 1 and r.context in weighted and (r.context, 1) not in unclear
        )
    return unclear


def _objective(policy: PolicySpec, rows: list[Row], boot: Boot) -> ObjectiveResult | None:
    spec = policy.objective
    if spec is None:
        return None
    by_ctx = {r.context: r for r in rows if r.concurrency == 1}
    missing = [c for c, _ in spec.weights if c not in by_ctx]
    if missing:
        raise GateError(
            f"objective weights name context(s) {missing} that the gate does not measure",
            hint="list every weighted context in gate.contexts",
        )
    total = sum(w for _, w in spec.weights)
    nan = float("nan")
    if any(by_ctx[c].result == "SKIPPED" for c, _ in spec.weights):
        # not computable: the gate stopped at a FAIL before every weighted context
        return ObjectiveResult(nan, nan, nan, spec.min_ratio, "SKIPPED", spec.weights)
    if any(by_ctx[c].ratio is None for c, _ in spec.weights):
        return ObjectiveResult(nan, nan, nan, spec.min_ratio, "FAIL", spec.weights)
    value = sum(w * (by_ctx[c].ratio or 0.0) for c, w in spec.weights) / total
    draws = [
        sum(w * boot.draws[(c, 1)][i] for c, w in spec.weights) / total
        for i in range(BOOTSTRAP_ROUNDS)
    ]
    lo, hi = interval(draws)
    return ObjectiveResult(value, lo, hi, spec.min_ratio, _classify(lo, hi, spec.min_ratio),
                           spec.weights)  # fmt: skip


def _decide(
    rows: list[Row],
    objective: ObjectiveResult | None,
    correctness: CorrectnessResult | None,
    unclear: tuple[tuple[int, int], ...],
    checks: tuple[Check, ...],
) -> tuple[Overall, str]:
    """:func:`_overall`, with SGLang's figures: an acceptance length outside its
    tolerance fails right after a correctness mismatch (it is a correctness signal); a
    latency check the policy sets fails any verdict that was not already FAIL."""
    if correctness is None or correctness.passed:
        accept = failed_reason(checks, ("accept_length",))
        if accept is not None:
            return "FAIL", accept
    verdict, reason = _overall(rows, objective, correctness, unclear)
    latency = failed_reason(checks, ("ttft", "itl_p50", "itl_p99"))
    if latency is not None and verdict != "FAIL":
        return "FAIL", latency
    return verdict, reason


def _overall(
    rows: list[Row],
    objective: ObjectiveResult | None,
    correctness: CorrectnessResult | None,
    unclear: tuple[tuple[int, int], ...],
) -> tuple[Overall, str]:
    if correctness is not None and not correctness.passed:
        shown = "; ".join(m.describe() for m in correctness.mismatches[:3])
        return "FAIL", (
            f"correctness: {len(correctness.mismatches)} of {correctness.checked} probe(s) differ "
            f"from the baseline (allowed {correctness.allowed}): {shown}"
        )
    short = [r for r in rows if r.note and r.result != "SKIPPED"]
    if short:
        return "FAIL", "too few requests completed: " + "; ".join(
            f"{r.label}: {r.note}" for r in short
        )
    failed = [r for r in rows if r.result == "FAIL"]
    if failed:
        return "FAIL", "below threshold: " + "; ".join(
            f"{r.label}: ratio {_fmt(r.ratio or 0.0)} (interval {_fmt(r.ratio_lo or 0.0)}-"
            f"{_fmt(r.ratio_hi or 0.0)}) < {_fmt(r.threshold or 0.0)}"
            for r in failed
        )
    if objective is not None and objective.result == "FAIL":
        return "FAIL", (
            f"weighted objective {_fmt(objective.value)} (interval {_fmt(objective.lo)}-"
            f"{_fmt(objective.hi)}) < {_fmt(objective.min_ratio)}"
        )
    if unclear:
        parts = [
            f"{r.label}: ratio {_fmt(r.ratio or 0.0)} (interval {_fmt(r.ratio_lo or 0.0)}-"
            f"{_fmt(r.ratio_hi or 0.0)}) straddles {_fmt(r.threshold or 0.0)}"
            for r in rows
            if r.result == "UNCLEAR"
        ]
        if objective is not None and objective.result == "UNCLEAR":
            parts.append(
                f"weighted objective {_fmt(objective.value)} (interval {_fmt(objective.lo)}-"
                f"{_fmt(objective.hi)}) straddles {_fmt(objective.min_ratio)}"
            )
        return "INCONCLUSIVE", "too noisy to decide: " + "; ".join(parts)
    if objective is not None:
        return "PASS", (
            f"weighted objective {_fmt(objective.value)} >= {_fmt(objective.min_ratio)}"
            + _weakest(rows)
        )
    return "PASS", "every context at or above its threshold" + _weakest(rows)


def _weakest(rows: list[Row]) -> str:
    rated = [r for r in rows if r.ratio is not None]
    if not rated:
        return ""
    worst = min(rated, key=lambda r: r.ratio or 0.0)
    return f" (lowest ratio {_fmt(worst.ratio or 0.0)} at {worst.label})"
