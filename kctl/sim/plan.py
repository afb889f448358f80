"""The timing plan of one generation request, as data: when each stream chunk is due and
how many new tokens it carries. Pure functions; :mod:`kctl.sim.engine` sleeps through a plan.

Times here are *simulated* seconds (uncompressed); the engine divides by the speed-up.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from kctl.sim.calibration import Calibration

#: a per-request speed factor is never taken outside this range, whatever the noise
NOISE_CLAMP = (0.2, 5.0)


@dataclass(frozen=True)
class Step:
    """A stream chunk: due ``at_s`` simulated seconds after the request arrived."""

    at_s: float
    tokens: int


@dataclass(frozen=True)
class RequestPlan:
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    ttft_s: float
    #: decode speed this request runs at (after slowdown and noise)
    decode_tps: float
    steps: tuple[Step, ...]
    #: verify steps under speculative decoding (the first token comes from prefill)
    spec_verify_ct: int = 0
    spec_num_draft_tokens: int = 1

    @property
    def total_s(self) -> float:
        return self.steps[-1].at_s if self.steps else self.ttft_s

    @property
    def spec_accept_length(self) -> float:
        return self.completion_tokens / self.spec_verify_ct if self.spec_verify_ct else 0.0


def accept_cycle(num_draft_tokens: int) -> tuple[int, ...]:
    """Accepted tokens per verify step, cycled deterministically: 2..num_draft_tokens
    (at least 1 token per step; a single draft token accepts 1)."""
    if num_draft_tokens < 2:
        return (1,)
    return tuple(range(2, num_draft_tokens + 1))


def avg_accept_length(num_draft_tokens: int) -> float:
    cycle = accept_cycle(num_draft_tokens)
    return sum(cycle) / len(cycle)


def noise_factor(noise: float, seed: int, counter: int) -> float:
    """Per-request speed factor ~ N(1, noise), deterministic in (seed, counter)."""
    if noise <= 0:
        return 1.0
    rng = random.Random(f"kctl-sim/noise/{seed}/{counter}")
    lo, hi = NOISE_CLAMP
    return min(hi, max(lo, rng.gauss(1.0, noise)))


def plan_request(
    *,
    calibration: Calibration,
    verify_path: str,
    cuda_graphs: bool,
    prompt_tokens: int,
    cached_tokens: int,
    max_new_tokens: int,
    speculative: bool,
    num_draft_tokens: int,
    slowdown: float = 1.0,
    speed_factor: float = 1.0,
) -> RequestPlan:
    """Plan one request: prefill (TTFT, first token), then decode steps of one token each,
    or of a cycled accept length under speculative decoding. Decode speed comes from the
    calibration at the prompt's context length, divided by ``slowdown`` and scaled by
    ``speed_factor`` (noise)."""
    ttft = calibration.ttft_s(prompt_tokens - cached_tokens)
    tps = calibration.decode_tps(verify_path, cuda_graphs, prompt_tokens) * speed_factor / slowdown
    n = max(0, max_new_tokens)
    if n == 0:
        return RequestPlan(prompt_tokens, cached_tokens, 0, ttft, tps, (Step(ttft, 0),))
    steps = [Step(ttft, 1)]
    cycle = accept_cycle(num_draft_tokens) if speculative else (1,)
    done, t, verify_ct = 1, ttft, 0
    while done < n:
        k = min(cycle[verify_ct % len(cycle)], n - done)
        # the measured tokens/s already includes speculative acceptance, so a step of k
        # tokens takes k / tps and the stream's average rate is exactly tps
        t += k / tps
        done += k
        verify_ct += 1
        steps.append(Step(t, k))
    return RequestPlan(
        prompt_tokens=prompt_tokens,
        cached_tokens=cached_tokens,
        completion_tokens=n,
        ttft_s=ttft,
        decode_tps=tps,
        steps=tuple(steps),
        spec_verify_ct=verify_ct if speculative else 0,
        spec_num_draft_tokens=num_draft_tokens if speculative else 1,
    )


#: how much the ``low_acceptance`` fault lowers the reported acceptance length
LOW_ACCEPTANCE_FACTOR = 0.9


def spec_fields(
    names: tuple[str, ...], plan: RequestPlan, *, acceptance_factor: float = 1.0
) -> dict[str, Any]:
    """The speculative-decoding fields of a finished request's ``meta_info``, spelt as
    the imitated release spells them (``names``: the release table's ``spec_metrics``):
    ``spec_verify_ct``, ``spec_accept_length``, ``spec_accept_rate`` everywhere;
    ``spec_accept_token_num``/``spec_draft_token_num`` up to 0.5.10,
    ``spec_accepted_drafts``/``spec_proposed_drafts`` 0.5.11 to 0.5.20,
    ``spec_num_correct_drafts``/``spec_num_proposed_drafts`` from 0.5.12. Histograms are
    not imitated. ``acceptance_factor`` < 1 reports more verify steps for the same tokens
    (a verify path that accepts less)."""
    verify_ct = plan.spec_verify_ct
    if verify_ct and acceptance_factor != 1.0:
        verify_ct = max(verify_ct, math.ceil(verify_ct / acceptance_factor))
    accepted = max(0, plan.completion_tokens - verify_ct - 1) if verify_ct else 0
    drafted = verify_ct * (plan.spec_num_draft_tokens - 1)
    values: dict[str, Any] = {
        "spec_verify_ct": verify_ct,
        "spec_accept_length": plan.completion_tokens / verify_ct if verify_ct else 0.0,
        "spec_accept_rate": accepted / drafted if drafted else 0.0,
        "spec_accept_token_num": accepted,
        "spec_draft_token_num": drafted,
        "spec_accepted_drafts": accepted,
        "spec_proposed_drafts": drafted,
        "spec_num_correct_drafts": accepted,
        "spec_num_proposed_drafts": drafted,
    }
    return {name: values[name] for name in names if name in values}
