"""The fleet's gates: the canary against a live incumbent replica measured at the same
time with the same workload (judged by the gate's own policy and correctness check), and
the smoke gate of each replica a wave moved. The only I/O is the gate's own requests."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kctl.errors import GateError, GateRejected
from kctl.gate import (
    Endpoint,
    GateProgress,
    Measurement,
    Verdict,
    check_correctness,
    greedy_ids,
    judge,
    measure,
    plan_workload,
)
from kctl.gate.runner import EXTRA_REPEATS_PER_ROUND, _next_index, _Sender
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
    """Send the candidate's gate workload to the canary and to the incumbent at once (two
    threads, the same requests in the same order), then judge the canary against the
    incumbent. Both share the fleet's live traffic, so both see the same conditions."""
    from kctl.gate.runner import server_vocab_size
    from kctl.gate.workload import fit_vocab

    workload = plan_workload(candidate.gate)
    workload = fit_vocab(workload, server_vocab_size(canary, workload.request_timeout_s))
    policy = candidate.gate.policy
    with ThreadPoolExecutor(max_workers=1) as pool:
        live = pool.submit(
            measure, incumbent, workload, fingerprint=fingerprint, label="incumbent", clock=clock
        )
        mine = measure(
            canary, workload, fingerprint=fingerprint, label="canary", clock=clock,
            progress=progress,
        )  # fmt: skip
        theirs = live.result()

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
    probes = workload.probes[:count]
    for probe in probes:
        try:
            ids = tuple(
                greedy_ids(
                    replica.host,
                    replica.port,
                    probe.input_ids(),
                    probe.tokens,
                    timeout_s=workload.request_timeout_s,
                    api_key=replica.api_key,
                )  # fmt: skip
            )
        except GateError as exc:
            raise GateRejected(
                "FAIL", f"smoke gate: {label} did not answer: {exc.message}", {}, ""
            ) from exc
        want = expected.get(probe.index)
        if want is not None and ids != want:
            raise GateRejected(
                "FAIL",
                f"smoke gate: {label} answered prompt {probe.index} differently from the canary",
                {},
                "",
            )
