"""Runs a gate workload against a server (the only part of the gate that does I/O).

:func:`measure` sends the plan and records every request; :func:`run_gate` asks the
candidate the correctness probes first (a wrong answer fails the gate before any
throughput request is sent), then measures it, judges it against a stored baseline, and
spends the policy's extra-repeat budget on buckets whose ratio straddles the threshold
before judging again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from kctl.errors import GateError, ServerError
from kctl.gate.client import Clock, Endpoint, StreamResult, stream_generate
from kctl.gate.correctness import CorrectnessResult
from kctl.gate.measurement import Measurement, ProbeOutput
from kctl.gate.probes import ask_probes
from kctl.gate.stats import Sample, summarize
from kctl.gate.verdict import Verdict, check_correctness, judge
from kctl.gate.workload import GenRequest, Workload, fit_vocab
from kctl.profile.model import PolicySpec

#: extra repeats are spent this many per unclear bucket per round, so a bucket that
#: becomes clear early does not use the whole budget
EXTRA_REPEATS_PER_ROUND = 2

GATE_RESULT_SCHEMA = 1


@dataclass(frozen=True)
class GateProgress:
    """A progress event: ``done`` of ``total`` requests of ``phase`` at ``context``."""

    phase: str
    context: int | None
    done: int
    total: int
    elapsed_s: float
    last: Sample | None = None

    def __str__(self) -> str:
        where = f" {self.context}" if self.context is not None else ""
        text = f"{self.phase}{where} {self.done}/{self.total} ({self.elapsed_s:.0f} s)"
        if self.last is not None and self.last.error:
            text += f" last failed: {self.last.error}"
        elif self.last is not None and self.last.decode_tps is not None:
            text += f" last {self.last.decode_tps:.1f} tok/s"
        return text


ProgressFn = Callable[[GateProgress], None]


@dataclass(frozen=True)
class GateResult:
    """The candidate's measurement and the final verdict, as the store keeps them."""

    candidate: Measurement
    verdict: Verdict
    #: rounds of extra repeats spent, and how many extra requests they sent
    extra_rounds: int = 0
    extra_requests: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": GATE_RESULT_SCHEMA,
            "candidate": self.candidate.to_dict(),
            "verdict": self.verdict.to_dict(),
            "extra_rounds": self.extra_rounds,
            "extra_requests": self.extra_requests,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GateResult:
        if d.get("schema") != GATE_RESULT_SCHEMA:
            raise GateError(f"stored gate result has unknown schema {d.get('schema')!r}")
        return cls(
            candidate=Measurement.from_dict(d["candidate"]),
            verdict=Verdict.from_dict(d["verdict"]),
            extra_rounds=d.get("extra_rounds", 0),
            extra_requests=d.get("extra_requests", 0),
        )


def _sample(req: GenRequest, res: StreamResult, round_no: int) -> Sample:
    return Sample(
        phase=req.phase,
        context=req.context,
        index=req.index,
        concurrency=req.concurrency,
        round=round_no,
        ttft_s=res.ttft_s,
        decode_tps=res.decode_tps,
        e2e_s=res.e2e_s,
        completion_tokens=res.completion_tokens,
        error=res.error,
        itl_s=res.trace.itl_s(),
        accept_length=res.trace.accept_length(),
    )


#: called before each request and after a failed one: raises (the server is gone) to end
#: the measurement at the first sign of it
AliveFn = Callable[[], None]


def _no_check() -> None:
    return None


class _Sender:
    """Sends requests and reports progress; keeps the clock, timeout and liveness check in
    one place."""

    def __init__(
        self,
        endpoint: Endpoint,
        timeout_s: float,
        progress: ProgressFn | None,
        clock: Clock,
        alive: AliveFn = _no_check,
    ) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.progress = progress
        self.clock = clock
        self.alive = alive
        self.t0 = clock()

    def _report(
        self, phase: str, ctx: int | None, done: int, total: int, last: Sample | None
    ) -> None:
        if self.progress is not None:
            self.progress(GateProgress(phase, ctx, done, total, self.clock() - self.t0, last))

    def one(self, req: GenRequest) -> StreamResult:
        return stream_generate(
            self.endpoint,
            req.payload(),
            timeout_s=self.timeout_s,
            expected_tokens=req.max_new_tokens if req.ignore_eos else None,
            clock=self.clock,
        )

    def run(self, phase: str, reqs: Iterable[GenRequest], round_no: int = 0) -> list[Sample]:
        """Send ``reqs`` in order; requests of a concurrency bucket go out together,
        ``concurrency`` at a time."""
        reqs = list(reqs)
        out: list[Sample] = []
        self._report(phase, reqs[0].context if reqs else None, 0, len(reqs), None)
        i = 0
        while i < len(reqs):
            req = reqs[i]
            self.alive()
            if req.concurrency <= 1:
                out.append(_sample(req, self.one(req), round_no))
                i += 1
            else:
                # the contiguous run of requests of this bucket goes out together
                j = i
                while j < len(reqs) and (reqs[j].context, reqs[j].concurrency) == (
                    req.context,
                    req.concurrency,
                ):
                    j += 1
                group = reqs[i:j]
                pool = ThreadPoolExecutor(max_workers=req.concurrency)
                try:
                    results = list(pool.map(self.one, group))
                finally:
                    # on an interrupt, do not wait for requests in flight (up to the request
                    # timeout): the deploy must revert now, and stopping the server ends them
                    pool.shutdown(wait=False, cancel_futures=True)
                out.extend(_sample(r, res, round_no) for r, res in zip(group, results))
                i += len(group)
            if out[-1].error:
                self.alive()  # a failed request: is the server still there?
            self._report(phase, req.context, len(out), len(reqs), out[-1])
        return out


#: asked after each context's measured requests, with every sample so far: True stops the
#: measurement there (the contexts after it and the concurrency phase are skipped)
StopFn = Callable[[tuple[Sample, ...]], bool]
#: asked with the probes' outputs before any throughput request: False ends the
#: measurement there (nothing else is sent)
ProbesFn = Callable[[tuple[ProbeOutput, ...]], bool]


def measure(
    endpoint: Endpoint,
    workload: Workload,
    *,
    fingerprint: str = "",
    label: str = "",
    progress: ProgressFn | None = None,
    clock: Clock = time.monotonic,
    stop: StopFn | None = None,
    alive: AliveFn = _no_check,
    probes_pass: ProbesFn | None = None,
    asked: tuple[ProbeOutput, ...] | None = None,
) -> Measurement:
    """Run ``workload`` against the server at ``endpoint``: first the correctness probes
    (short, and the cheapest question), then per context its warm-ups (recorded, not
    counted) and its measured requests, then the concurrency phase. Failed requests are
    recorded as failed samples. ``probes_pass`` may end it after the probes (see
    :data:`ProbesFn`) and ``stop`` after any context (see :data:`StopFn`); ``alive``
    raises when the server has gone (see :data:`AliveFn`), which ends it at once.
    ``asked``: the probes' outputs when the caller asked them already (the fleet canary
    asks both sides before either's throughput); they are not asked again. Prompt ids
    stay below the vocabulary size the server reports
    (:func:`~kctl.gate.workload.fit_vocab`)."""
    workload = fit_vocab(workload, server_vocab_size(endpoint, workload.request_timeout_s))
    send = _Sender(endpoint, workload.request_timeout_s, progress, clock, alive)
    samples: list[Sample] = []
    timings: list[tuple[str, float]] = []
    t = clock()
    if asked is None:
        probes = ask_probes(
            endpoint, workload.probes, workload.request_timeout_s, alive=send.alive,
            done=lambda n, total: send._report("probe", None, n, total, None),
        )  # fmt: skip
        if workload.probes:
            timings.append(("probes", clock() - t))
    else:
        probes = asked
    if probes_pass is None or probes_pass(tuple(probes)):
        timings += _throughput(workload, send, samples, stop, clock)
    timings.append(("total", clock() - send.t0))
    return Measurement(
        fingerprint=fingerprint,
        samples=tuple(samples),
        summaries=summarize(samples),
        probes=tuple(probes),
        timings=tuple(timings),
        label=label,
    )


def _throughput(
    workload: Workload,
    send: _Sender,
    samples: list[Sample],
    stop: StopFn | None,
    clock: Clock,
) -> list[tuple[str, float]]:
    """The throughput requests, appended to ``samples``; their timings."""
    t_warm = t_meas = 0.0
    for ctx in workload.contexts:
        t = clock()
        samples += send.run("warmup", [r for r in workload.warmups if r.context == ctx])
        t_warm += clock() - t
        t = clock()
        samples += send.run("measure", [r for r in workload.measured if r.context == ctx])
        t_meas += clock() - t
        if stop is not None and stop(tuple(samples)):
            return [("warmup", t_warm), ("measure", t_meas)]
    timings = [("warmup", t_warm), ("measure", t_meas)]
    if workload.concurrent:
        t = clock()
        samples += send.run("concurrent", workload.concurrent)
        timings.append(("concurrent", clock() - t))
    return timings


def server_vocab_size(endpoint: Endpoint, timeout_s: float) -> int | None:
    """The ``vocab_size`` the server reports in ``/get_model_info`` (or ``/model_info``),
    or None where it reports none (or does not answer: the gate's own requests then say
    what is wrong)."""
    client = endpoint.client()
    for path in ("/get_model_info", "/model_info"):
        try:
            vocab = client.get_json(path, timeout_s).get("vocab_size")
        except ServerError:
            continue
        if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab > 0:
            return vocab
    return None


def _next_index(m: Measurement, context: int, concurrency: int) -> int:
    indices = [
        s.index
        for s in m.samples
        if s.phase != "warmup" and s.context == context and s.concurrency == concurrency
    ]
    return max(indices, default=-1) + 1


def run_gate(
    endpoint: Endpoint,
    workload: Workload,
    baseline: Measurement,
    policy: PolicySpec,
    *,
    fingerprint: str = "",
    label: str = "",
    progress: ProgressFn | None = None,
    clock: Clock = time.monotonic,
    alive: AliveFn = _no_check,
) -> GateResult:
    """Measure the candidate at ``endpoint``, judge it against ``baseline``; while the
    verdict is INCONCLUSIVE and budget is left, add :data:`EXTRA_REPEATS_PER_ROUND`
    repeats to each unclear bucket (at most ``policy.max_extra_repeats`` per bucket in
    all) and judge again. Raises GateError only when the baseline cannot be judged
    against (it lacks data); the candidate's failures are verdicts. With
    ``policy.stop_at_first_fail`` it judges after each context and stops measuring at the
    first FAIL (the rest comes out as SKIPPED rows; no extra repeats). The correctness
    probes go first: a candidate that answers them wrongly (beyond
    ``max_mismatched_prompts``) fails at once, every bucket SKIPPED, before any throughput
    request is sent.
    ``alive`` ends it at once when the candidate's server has gone (it raises)."""

    def unmeasured(m: Measurement) -> frozenset[tuple[int, int]]:
        return frozenset(b.bucket for b in baseline.summaries if m.summary(*b.bucket) is None)

    def failed_so_far(samples: tuple[Sample, ...]) -> bool:
        partial = Measurement(fingerprint=fingerprint, samples=samples,
                              summaries=summarize(samples))  # fmt: skip
        left = unmeasured(partial)
        # after the last bucket nothing is left to skip: the full verdict decides
        return bool(left) and judge(baseline, partial, policy, None, left).verdict == "FAIL"

    def correctness(probes: tuple[ProbeOutput, ...]) -> CorrectnessResult:
        early = Measurement(fingerprint=fingerprint, samples=(), summaries=(), probes=probes)
        return check_correctness(baseline, early, max_mismatched=workload.max_mismatched_prompts)

    stop = failed_so_far if policy.stop_at_first_fail else None
    # fitted here too: the extra repeats below come from the same (fitted) plan
    workload = fit_vocab(workload, server_vocab_size(endpoint, workload.request_timeout_s))
    candidate = measure(endpoint, workload, fingerprint=fingerprint, label=label,
                        progress=progress, clock=clock, stop=stop, alive=alive,
                        probes_pass=lambda p: correctness(p).passed)  # fmt: skip
    corr = correctness(candidate.probes)
    if not corr.passed:  # a wrong answer: FAIL before any throughput request was sent
        wrong = judge(baseline, candidate, policy, corr, unmeasured(candidate))
        return GateResult(candidate, wrong)
    skipped = unmeasured(candidate) if stop is not None else frozenset()
    if skipped:  # it stopped: FAIL, with the rest not measured
        return GateResult(candidate, judge(baseline, candidate, policy, corr, skipped))

    def decide(m: Measurement) -> Verdict:
        return judge(baseline, m, policy, correctness(m.probes))

    verdict = decide(candidate)
    spent: dict[tuple[int, int], int] = {}
    rounds = sent = 0
    send = _Sender(endpoint, workload.request_timeout_s, progress, clock, alive)
    while verdict.verdict == "INCONCLUSIVE":
        batch: list[GenRequest] = []
        for ctx, conc in verdict.unclear:
            left = policy.max_extra_repeats - spent.get((ctx, conc), 0)
            n = min(EXTRA_REPEATS_PER_ROUND, left)
            if n <= 0:
                continue
            per_request = conc if conc > 1 else 1
            start = _next_index(candidate, ctx, conc)
            batch += workload.extra_requests(ctx, n * per_request, start, conc)
            spent[(ctx, conc)] = spent.get((ctx, conc), 0) + n
        if not batch:
            break
        rounds += 1
        t = clock()
        extra = send.run("extra", batch, round_no=rounds)
        sent += len(extra)
        candidate = candidate.with_samples(tuple(extra))
        candidate = replace(candidate, timings=_add_timing(candidate.timings, clock() - t))
        verdict = decide(candidate)
    return GateResult(candidate, verdict, rounds, sent)


def _add_timing(
    timings: tuple[tuple[str, float], ...], extra_s: float
) -> tuple[tuple[str, float], ...]:
    """Add ``extra_s`` to the "extra" and "total" timings (creating "extra")."""
    d = dict(timings)
    total = d.pop("total", 0.0) + extra_s
    d["extra"] = d.get("extra", 0.0) + extra_s
    return (*d.items(), ("total", total))
