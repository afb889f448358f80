"""The fleet's gates: the canary against a live incumbent replica measured at the same
time with the same workload (judged by the gate's own policy and correctness check; the
correctness probes first, so a canary that answers wrongly is rejected before any
throughput request), and the smoke gate of each replica a wave moved. The only I/O is
the gate's own requests."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from kctl.errors import GateRejected
from kctl.gate import (
    Endpoint,
    GateProgress,
    Measurement,
    Verdict,
    check_correctness,
    judge,
    measure,
    plan_workload,
)
from kctl.gate.probes import ask_probe, ask_probes
from kctl.gate.runner import EXTRA_REPEATS_PER_ROUND, _next_index, _Sender
from kctl.gate.verdict import rejected_on_probes
from kctl.gate.workload import GenRequest, Workload
from kctl.profile.model import Profile


@dataclass(frozen=True)
class CanaryResult:
    incumbent: Measurement
    canary: Measurement
    verdict: Verdict

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "mode": "canary-vs-live-incumbent",
            "baseline": self.incumbent.to_dict(),
            "candidate": self.canary.to_dict(),
            "verdict": self.verdict.to_dict(),
        }


def gate_canary(
    candidate: Profile,
    canary: Endpoint,
    incumbent: Endpoint,
    *,
    fingerprint: str,
    clock: Callable[[], float],
    progress: Callable[[GateProgress], None] | None = None,
) -> CanaryResult:
    """Ask both the correctness probes at once and compare the canary's greedy answers
    with the incumbent's: a canary that answers wrongly fails there, before any
    throughput request is sent to either. Otherwise send the candidate's gate workload
    to the canary and to the incumbent at once (two threads, the same requests in the
    same order), then judge the canary against the incumbent. Both share the fleet's
    live traffic, so both see the same conditions."""
    from kctl.gate.runner import server_vocab_size
    from kctl.gate.workload import fit_vocab

    workload = plan_workload(candidate.gate)
    workload = fit_vocab(workload, server_vocab_size(canary, workload.request_timeout_s))
    policy = candidate.gate.policy
    with ThreadPoolExecutor(max_workers=1) as pool:
        theirs, mine = _probe_both(pool, workload, canary, incumbent, fingerprint, clock, progress)
        corr = check_correctness(theirs, mine, max_mismatched=workload.max_mismatched_prompts)
        if not corr.passed:
            wrong = rejected_on_probes(_buckets(workload), policy, corr, mine.timings)
            return CanaryResult(theirs, mine, wrong)
        live = pool.submit(
            measure, incumbent, workload, fingerprint=fingerprint, label="incumbent",
            clock=clock, asked=theirs.probes,
        )  # fmt: skip
        mine = _after_probes(mine, measure(
            canary, workload, fingerprint=fingerprint, label="canary", clock=clock,
            progress=progress, asked=mine.probes,
        ))  # fmt: skip
        theirs = _after_probes(theirs, live.result())

        def decide() -> Verdict:
            corr = check_correctness(theirs, mine, max_mismatched=workload.max_mismatched_prompts)
            return judge(theirs, mine, policy, corr)

        verdict, rounds = decide(), 0
        spent: dict[tuple[int, int], int] = {}
        while verdict.verdict == "INCONCLUSIVE":
            batch = _extra_batch(workload, verdict, mine, policy.max_extra_repeats, spent)
            if not batch:
                break
            rounds += 1
            timeout = workload.request_timeout_s
            live_extra = pool.submit(
                _Sender(incumbent, timeout, None, clock).run, "extra", batch, rounds
            )
            mine = mine.with_samples(
                tuple(_Sender(canary, timeout, progress, clock).run("extra", batch, rounds))
            )
            theirs = theirs.with_samples(tuple(live_extra.result()))
            verdict = decide()
    return CanaryResult(theirs, mine, verdict)


def _probe_both(
    pool: ThreadPoolExecutor,
    workload: Workload,
    canary: Endpoint,
    incumbent: Endpoint,
    fingerprint: str,
    clock: Callable[[], float],
    progress: Callable[[GateProgress], None] | None,
) -> tuple[Measurement, Measurement]:
    """The probes asked of the incumbent and of the canary at once: each side's answers
    (and the time they took) as a measurement with no throughput sample yet."""

    def ask(ep: Endpoint, label: str, send: _Sender | None) -> Measurement:
        t = clock()
        done = None if send is None else _probe_progress(send)
        answers = ask_probes(ep, workload.probes, workload.request_timeout_s, done=done)
        timings = (("probes", clock() - t),) if workload.probes else ()
        return Measurement(fingerprint=fingerprint, probes=answers, timings=timings, label=label)

    timeout = workload.request_timeout_s
    theirs = pool.submit(ask, incumbent, "incumbent", None)
    mine = ask(canary, "canary", _Sender(canary, timeout, progress, clock))
    return theirs.result(), mine


def _probe_progress(send: _Sender) -> Callable[[int, int], None]:
    def done(n: int, total: int) -> None:
        send._report("probe", None, n, total, None)

    return done


def _after_probes(probed: Measurement, measured: Measurement) -> Measurement:
    """``measured`` (its throughput, the probes given) with the probes' time first and
    in its total, as :func:`~kctl.gate.runner.measure` times its own probes."""
    asked = sum(s for _, s in probed.timings)
    timings = [(k, s + asked if k == "total" else s) for k, s in measured.timings]
    return replace(measured, timings=probed.timings + tuple(timings))


def _buckets(workload: Workload) -> list[tuple[int, int]]:
    """The (context, concurrency) buckets the workload measures, in the judge's order."""
    conc = sorted({(r.context, r.concurrency) for r in workload.concurrent})
    return [(ctx, 1) for ctx in workload.contexts] + conc


def _extra_batch(
    workload: Workload,
    verdict: Verdict,
    mine: Measurement,
    budget: int,
    spent: dict[tuple[int, int], int],
) -> list[GenRequest]:
    """More repeats of each unclear bucket, sent to both sides (as the one-host gate does,
    :data:`~kctl.gate.runner.EXTRA_REPEATS_PER_ROUND` a round, ``budget`` a bucket)."""
    batch: list[GenRequest] = []
    for ctx, conc in verdict.unclear:
        n = min(EXTRA_REPEATS_PER_ROUND, budget - spent.get((ctx, conc), 0))
        if n <= 0:
            continue
        start = _next_index(mine, ctx, conc)
        batch += workload.extra_requests(ctx, n * (conc if conc > 1 else 1), start, conc)
        spent[(ctx, conc)] = spent.get((ctx, conc), 0) + n
    return batch


def promotes(candidate: Profile, verdict: Verdict) -> bool:
    return verdict.verdict == "PASS" or (
        verdict.verdict == "INCONCLUSIVE" and candidate.gate.policy.on_inconclusive == "promote"
    )


def smoke(
    candidate: Profile,
    replica: Endpoint,
    expected: dict[int, tuple[int, ...]],
    count: int,
    label: str,
) -> None:
    """``count`` greedy requests (the gate's correctness prompts) to a moved replica; each
    must answer, and answer as the canary did where its answer is known. GateRejected
    otherwise (the rollout aborts)."""
    from kctl.gate.runner import server_vocab_size
    from kctl.gate.workload import fit_vocab

    workload = plan_workload(candidate.gate)
    # the canary's prompts were fitted to the vocabulary the server reports: so are these
    workload = fit_vocab(workload, server_vocab_size(replica, workload.request_timeout_s))
    for probe in workload.probes[:count]:
        answer = ask_probe(replica, probe, workload.request_timeout_s)
        if answer.error is not None:
            raise GateRejected(
                "FAIL", f"smoke gate: {label} did not answer: {answer.error}", {}, ""
            )
        want = expected.get(probe.index)
        if want is not None and answer.output_ids != want:
            raise GateRejected(
                "FAIL",
                f"smoke gate: {label} answered prompt {probe.index} differently from the canary",
                {},
                "",
            )
