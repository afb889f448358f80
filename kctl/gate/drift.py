"""The drift check: does a stored baseline measurement still describe the baseline that
serves now?

A stored measurement is reused for up to ``baseline_max_age_s``, but the host can change
under it (other load, a clock, a driver): a baseline measured beside other work is slower
and noisier than the one that serves later, and every gate judged against it comes out
wrong or INCONCLUSIVE. When the known-good baseline serves at the start of a deploy, kctl
sends it :data:`DRIFT_REQUESTS` more requests per context (the gate's own prompts, new
indices), at most :data:`DRIFT_BUDGET_S` seconds, and compares their decode tok/s with the
stored ones: the ratio now / stored and its bootstrap interval (the gate's statistics).

The check is short: the decode rate is a rate, so a request need not stream the gate's
whole ``output_tokens`` to measure it. Where that stream would be long (a long context
decodes slowly) a check request streams :data:`DRIFT_STREAM_S` seconds of it at the stored
rate, never fewer than :data:`DRIFT_MIN_TOKENS` tokens (:func:`check_tokens`): still many
speculative verify steps and a stream far longer than any timer's jitter, while the short
contexts, which decode fast and cost little, keep the gate's full stream. The check's two
requests per context carry their own spread into the interval, as before.
A context has drifted when its ratio is more than :data:`DRIFT_TOLERANCE` from 1 and its
interval excludes 1 (a change beyond the noise of either measurement); a drift at any
context, a failed request or the time bound running out mean the baseline is measured
again before it stops. Otherwise the stored measurement is reused.

:func:`plan_check` and :func:`judge_drift` are pure; :func:`run_drift_check` sends.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from kctl.gate.bootstrap import bootstrap, interval
from kctl.gate.client import Clock, Endpoint
from kctl.gate.measurement import Measurement
from kctl.gate.runner import (
    AliveFn,
    ProgressFn,
    _no_check,
    _sample,
    _Sender,
    server_vocab_size,
)
from kctl.gate.stats import Sample, Summary, summarize
from kctl.gate.workload import GenRequest, Workload, fit_vocab

#: requests per context the check sends
DRIFT_REQUESTS = 2
#: the check's time bound, in seconds at real-time scale (the gate's clock)
DRIFT_BUDGET_S = 300.0
#: a ratio now / stored further than this from 1, whose interval excludes 1, is a drift
DRIFT_TOLERANCE = 0.05
#: a check request streams the gate's output_tokens, or this many seconds of decode at
#: the stored rate where that is fewer tokens ...
DRIFT_STREAM_S = 16.0
#: ... but never fewer tokens than this (nor more than the gate's output_tokens)
DRIFT_MIN_TOKENS = 32


@dataclass(frozen=True)
class DriftRow:
    """One context: the stored and current median decode tok/s, and the ratio now /
    stored with its interval (None where nothing completed)."""

    context: int
    stored: float
    now: float | None
    ratio: float | None
    lo: float | None
    hi: float | None
    completed: int
    sent: int

    @property
    def outcome(self) -> str:
        """``steady``, ``drifted`` (beyond the tolerance and the noise) or ``incomplete``
        (a request failed or was never sent)."""
        if self.ratio is None or self.completed < self.sent:
            return "incomplete"
        return "drifted" if _beyond_noise(self) else "steady"


@dataclass(frozen=True)
class DriftCheck:
    """The check's outcome: ``steady`` (reuse the stored measurement) and why."""

    rows: tuple[DriftRow, ...]
    steady: bool
    reason: str
    elapsed_s: float

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "rows": [asdict(r) for r in self.rows]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DriftCheck:
        """Inverse of :meth:`to_dict`."""
        return cls(
            rows=tuple(DriftRow(**r) for r in d["rows"]),
            steady=bool(d["steady"]),
            reason=str(d["reason"]),
            elapsed_s=float(d["elapsed_s"]),
        )


def _next_index(m: Measurement, context: int) -> int:
    used = [s.index for s in m.samples if s.context == context and s.concurrency == 1]
    return max(used, default=-1) + 1


def check_tokens(output_tokens: int, stored_tps: float) -> int:
    """The tokens a check request streams at a context whose stored median decode rate is
    ``stored_tps``: :data:`DRIFT_STREAM_S` seconds of decode, at least
    :data:`DRIFT_MIN_TOKENS`, at most the gate's ``output_tokens``."""
    return min(output_tokens, max(DRIFT_MIN_TOKENS, math.ceil(stored_tps * DRIFT_STREAM_S)))


def stored_rates(stored: Measurement) -> dict[int, float]:
    """The stored median decode tok/s of each one-at-a-time context."""
    return {
        s.context: s.median
        for s in stored.summaries
        if s.concurrency == 1 and s.median is not None and s.median > 0
    }


def check_requests(
    workload: Workload, rates: Mapping[int, float], start: Mapping[int, int] | None = None
) -> tuple[GenRequest, ...]:
    """:data:`DRIFT_REQUESTS` requests per context of ``workload`` that ``rates`` (stored
    median tok/s) names, each streaming :func:`check_tokens`; numbered from ``start`` (per
    context, else 0). What :func:`plan_check` sends, and what ``kctl plan`` estimates."""
    out: list[GenRequest] = []
    for ctx in workload.contexts:
        if ctx not in rates:
            continue
        tokens = check_tokens(workload.output_tokens, rates[ctx])
        first = (start or {}).get(ctx, 0)
        out += [
            replace(r, max_new_tokens=tokens)
            for r in workload.extra_requests(ctx, DRIFT_REQUESTS, first)
        ]
    return tuple(out)


def plan_check(workload: Workload, stored: Measurement) -> tuple[GenRequest, ...]:
    """The check's requests: :func:`check_requests` for each context the stored
    measurement rates, numbered after its own so no prompt repeats (no prefix-cache hit)."""
    rates = stored_rates(stored)
    return check_requests(workload, rates, {ctx: _next_index(stored, ctx) for ctx in rates})


def _fmt_row(r: DriftRow) -> str:
    if r.ratio is None or r.lo is None or r.hi is None:
        return f"{r.context}: {r.completed} of {r.sent} requests completed"
    return (
        f"{r.context}: {r.now:.1f} tok/s now vs {r.stored:.1f} stored, ratio {r.ratio:.2f} "
        f"(interval {r.lo:.2f}-{r.hi:.2f})"
    )


def judge_drift(
    stored: Measurement,
    samples: tuple[Sample, ...],
    planned: tuple[GenRequest, ...],
    elapsed_s: float,
    out_of_time: float | None = None,
) -> DriftCheck:
    """Whether ``samples`` (the check's) confirm ``stored`` within ±:data:`DRIFT_TOLERANCE`
    at every context it planned (``planned``); ``out_of_time``: the time bound, when it
    ran out before every planned request was sent."""
    now = {s.bucket: s for s in summarize(samples)}
    rows: list[DriftRow] = []
    pairs: dict[tuple[int, int], tuple[Summary, Summary]] = {}
    for ctx in dict.fromkeys(r.context for r in planned):
        base = stored.summary(ctx)
        assert base is not None and base.median is not None, "planned from the stored buckets"
        cur = now.get((ctx, 1))
        if cur is not None and cur.median is not None and cur.n_failed == 0:
            pairs[(ctx, 1)] = (base, cur)
    draws = bootstrap(pairs).draws
    for ctx in dict.fromkeys(r.context for r in planned):
        base = stored.summary(ctx)
        assert base is not None and base.median is not None
        cur = now.get((ctx, 1))
        sent = sum(1 for r in planned if r.context == ctx)
        done = cur.n_completed if cur is not None else 0
        if (ctx, 1) in pairs and cur is not None and cur.median is not None:
            lo, hi = interval(draws[(ctx, 1)])
            row = DriftRow(ctx, base.median, cur.median, cur.median / base.median, lo, hi,
                           done, sent)  # fmt: skip
        else:
            row = DriftRow(ctx, base.median, None, None, None, None, done, sent)
        rows.append(row)
    return _decide(tuple(rows), elapsed_s, out_of_time)


def _decide(rows: tuple[DriftRow, ...], elapsed_s: float, out_of_time: float | None) -> DriftCheck:
    shown = "; ".join(_fmt_row(r) for r in rows)
    if out_of_time is not None:
        why = f"out of time after {elapsed_s:.0f} s (bound {out_of_time:g} s): {shown}"
        return DriftCheck(rows, False, why, elapsed_s)
    short = [r for r in rows if r.ratio is None or r.completed < r.sent]
    if short:
        return DriftCheck(rows, False, f"requests failed: {shown}", elapsed_s)
    drifted = [r for r in rows if _beyond_noise(r)]
    if drifted:
        return DriftCheck(rows, False, f"drifted beyond the noise: {shown}", elapsed_s)
    return DriftCheck(rows, True, f"steady (within ±{DRIFT_TOLERANCE:.0%} or the noise): {shown}",
                      elapsed_s)  # fmt: skip


def _beyond_noise(r: DriftRow) -> bool:
    """Moved by more than the tolerance, and its interval excludes no change."""
    assert r.ratio is not None and r.lo is not None and r.hi is not None
    return abs(r.ratio - 1) > DRIFT_TOLERANCE and (r.lo > 1 or r.hi < 1)


def run_drift_check(
    endpoint: Endpoint,
    workload: Workload,
    stored: Measurement,
    *,
    budget_s: float = DRIFT_BUDGET_S,
    progress: ProgressFn | None = None,
    clock: Clock = time.monotonic,
    alive: AliveFn = _no_check,
) -> DriftCheck:
    """Send :func:`plan_check`'s requests one at a time and judge them
    (:func:`judge_drift`). ``budget_s`` (on ``clock``) bounds the whole check: each
    request's timeout is at most the time left, and a request the bound cut short, or
    one that was never sent, makes the check out of time."""
    workload = fit_vocab(workload, server_vocab_size(endpoint, workload.request_timeout_s))
    planned = plan_check(workload, stored)
    send = _Sender(endpoint, workload.request_timeout_s, progress, clock, alive)
    samples: list[Sample] = []
    for n, req in enumerate(planned):
        left = budget_s - (clock() - send.t0)
        if left <= 0:
            return judge_drift(stored, tuple(samples), planned, clock() - send.t0, budget_s)
        send.timeout_s = min(workload.request_timeout_s, left)
        send.alive()
        samples.append(_sample(req, send.one(req), 0))
        if samples[-1].error:
            send.alive()
            if clock() - send.t0 >= budget_s:  # the bound, not the server, ended it
                return judge_drift(stored, tuple(samples), planned, clock() - send.t0, budget_s)
        send._report("drift check", req.context, n + 1, len(planned), samples[-1])
    return judge_drift(stored, tuple(samples), planned, clock() - send.t0)
