"""The gate's workload plan: which requests to send, in which order. Pure.

A :class:`Workload` is data: every request is described by its context length, its place
in the plan and a seed from which its ``input_ids`` are derived on demand. Deriving the
ids (instead of storing a 91k-token list per request) keeps the plan small enough to print
with ``kctl plan`` and to compare by equality in tests, while the ids stay deterministic.

Why random ids: SGLang's radix cache would serve a repeated prompt from cache and the
measurement would time a cache hit. Each request therefore gets its own random sequence
(seeded by the gate seed, the phase, the context and the index), so no two requests
share a prefix beyond chance (one token in ~30k).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from kctl.profile.model import GateSpec

Phase = Literal["warmup", "measure", "concurrent", "probe"]

#: ids below this are avoided: tokenizers keep control/special tokens at the low end
_LOW_ID = 100
#: ... and many (Kimi, DeepSeek) keep reserved special tokens at the top of the vocabulary
_HIGH_MARGIN = 256
#: length of each correctness-probe prompt
PROBE_PROMPT_TOKENS = 128


def _derive_seed(*parts: object) -> int:
    """A stable 64-bit seed from the parts (``hash()`` is salted per process; sha256 is not)."""
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def random_ids(seed: int, length: int, vocab_size: int) -> list[int]:
    """``length`` token ids drawn uniformly from the ordinary range of the vocabulary."""
    rng = random.Random(seed)
    return rng.choices(range(_LOW_ID, vocab_size - _HIGH_MARGIN), k=length)


@dataclass(frozen=True)
class GenRequest:
    """One timed ``/generate`` request of the plan."""

    phase: Phase
    context: int
    #: position within (phase, context); extra repeats continue the numbering
    index: int
    ids_seed: int
    vocab_size: int
    max_new_tokens: int
    #: how many requests of this phase run at once (1 = one request at a time)
    concurrency: int = 1
    ignore_eos: bool = True
    temperature: float = 0.0

    def input_ids(self) -> list[int]:
        """The request's prompt: exactly ``context`` distinct-per-request random ids."""
        return random_ids(self.ids_seed, self.context, self.vocab_size)

    def payload(self, *, stream: bool = True) -> dict[str, object]:
        """The JSON body SGLang's ``/generate`` takes for this request."""
        return {
            "input_ids": self.input_ids(),
            "sampling_params": {
                "max_new_tokens": self.max_new_tokens,
                "ignore_eos": self.ignore_eos,
                "temperature": self.temperature,
            },
            "stream": stream,
        }


@dataclass(frozen=True)
class Probe:
    """A fixed correctness prompt; its greedy output is compared with the baseline's."""

    index: int
    ids_seed: int
    vocab_size: int
    tokens: int
    length: int = PROBE_PROMPT_TOKENS

    def input_ids(self) -> list[int]:
        """The probe's fixed prompt ids."""
        return random_ids(self.ids_seed, self.length, self.vocab_size)


@dataclass(frozen=True)
class Workload:
    """Everything the gate sends. :func:`~kctl.gate.runner.measure` sends the correctness
    probes first, then per context the warm-ups and measured requests (one at a time),
    then the optional concurrency phase."""

    seed: int
    vocab_size: int
    contexts: tuple[int, ...]
    output_tokens: int
    repeats: int
    request_timeout_s: float
    warmups: tuple[GenRequest, ...]
    measured: tuple[GenRequest, ...]
    concurrent: tuple[GenRequest, ...]
    concurrency: int | None
    probes: tuple[Probe, ...]
    max_mismatched_prompts: int = 0

    @property
    def planned_requests(self) -> int:
        """Number of generation requests the plan sends (probes included)."""
        return len(self.warmups) + len(self.measured) + len(self.concurrent) + len(self.probes)

    def extra_requests(
        self, context: int, count: int, start_index: int, concurrency: int = 1
    ) -> tuple[GenRequest, ...]:
        """``count`` further requests for the bucket (``context``, ``concurrency``),
        numbered from ``start_index`` so they never repeat an earlier prompt."""
        phase: Phase = "measure" if concurrency == 1 else "concurrent"
        return tuple(
            _request(self, phase, context, i, concurrency)
            for i in range(start_index, start_index + count)
        )


def _request(w: Workload | _Base, phase: Phase, context: int, index: int, conc: int) -> GenRequest:
    return GenRequest(
        phase=phase,
        context=context,
        index=index,
        ids_seed=_derive_seed("kctl-gate", w.seed, phase, context, index),
        vocab_size=w.vocab_size,
        max_new_tokens=w.output_tokens,
        concurrency=conc,
    )


@dataclass(frozen=True)
class _Base:
    seed: int
    vocab_size: int
    output_tokens: int


#: prompt ids stay below this when neither the profile nor the server says more (every
#: current LLM vocabulary is larger; a smaller one must be named in gate.vocab_size)
DEFAULT_VOCAB_SIZE = 32000


def fit_vocab(workload: Workload, vocab_size: int | None) -> Workload:
    """``workload`` with prompt ids below ``vocab_size`` (the model's vocabulary as the
    server reports it): unchanged when that is unknown or no smaller than the plan's;
    never raised above the plan. Same seeds, so both sides of a gate get the same prompts."""
    if vocab_size is None or vocab_size >= workload.vocab_size:
        return workload
    if vocab_size <= _LOW_ID + _HIGH_MARGIN:
        raise ValueError(f"vocab_size must exceed {_LOW_ID + _HIGH_MARGIN} (got {vocab_size})")

    def fit(reqs: tuple[GenRequest, ...]) -> tuple[GenRequest, ...]:
        return tuple(replace(r, vocab_size=vocab_size) for r in reqs)

    return replace(
        workload,
        vocab_size=vocab_size,
        warmups=fit(workload.warmups),
        measured=fit(workload.measured),
        concurrent=fit(workload.concurrent),
        probes=tuple(replace(p, vocab_size=vocab_size) for p in workload.probes),
    )


def plan_workload(gate: GateSpec, *, vocab_size: int | None = None) -> Workload:
    """The gate's requests for ``gate``: per context ``warmup`` discarded requests, then
    ``repeats`` measured requests one at a time; with ``gate.concurrency`` a phase of
    ``concurrency * repeats`` requests per context kept ``concurrency`` in flight; then
    ``gate.correctness.prompts`` greedy probes. Deterministic in ``gate.seed``. Prompt
    ids stay below ``vocab_size``, else ``gate.vocab_size``, else
    :data:`DEFAULT_VOCAB_SIZE` (the runner lowers it to what the server reports,
    :func:`fit_vocab`)."""
    vocab_size = vocab_size or gate.vocab_size or DEFAULT_VOCAB_SIZE
    if vocab_size <= _LOW_ID + _HIGH_MARGIN:
        raise ValueError(f"vocab_size must exceed {_LOW_ID + _HIGH_MARGIN} (got {vocab_size})")
    base = _Base(seed=gate.seed, vocab_size=vocab_size, output_tokens=gate.output_tokens)
    warmups: list[GenRequest] = []
    measured: list[GenRequest] = []
    concurrent: list[GenRequest] = []
    for ctx in gate.contexts:
        warmups.extend(_request(base, "warmup", ctx, i, 1) for i in range(gate.warmup))
        measured.extend(_request(base, "measure", ctx, i, 1) for i in range(gate.repeats))
    conc = gate.concurrency if gate.concurrency and gate.concurrency > 1 else None
    if conc is not None:
        for ctx in gate.contexts:
            n = conc * gate.repeats
            concurrent.extend(_request(base, "concurrent", ctx, i, conc) for i in range(n))
    probes = tuple(
        Probe(
            index=i,
            ids_seed=_derive_seed("kctl-probe", gate.seed, i),
            vocab_size=vocab_size,
            tokens=gate.correctness.tokens,
        )
        for i in range(gate.correctness.prompts)
    )
    return Workload(
        seed=gate.seed,
        vocab_size=vocab_size,
        contexts=tuple(gate.contexts),
        output_tokens=gate.output_tokens,
        repeats=gate.repeats,
        request_timeout_s=gate.request_timeout_s,
        warmups=tuple(warmups),
        measured=tuple(measured),
        concurrent=tuple(concurrent),
        concurrency=conc,
        probes=probes,
        max_mismatched_prompts=gate.correctness.max_mismatched_prompts,
    )


def interpolate_rate(rates: Mapping[int, float], context: int) -> float:
    """Decode tok/s at ``context`` from known ``rates``: log-log interpolation between the
    nearest known contexts, the nearest value outside the known range."""
    if not rates:
        raise ValueError("no rates to interpolate from")
    if context in rates:
        return rates[context]
    known = sorted(rates)
    if context <= known[0]:
        return rates[known[0]]
    if context >= known[-1]:
        return rates[known[-1]]
    hi = next(k for k in known if k > context)
    lo = max(k for k in known if k < context)
    t = (math.log(context) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return math.exp(math.log(rates[lo]) + t * (math.log(rates[hi]) - math.log(rates[lo])))


def estimate_duration(
    workload: Workload,
    rates: Mapping[int, float],
    *,
    prefill_tps: float = 4000.0,
    overhead_s: float = 0.05,
) -> float:
    """Seconds the gate should take, given decode tok/s by context (``rates``, e.g. from
    the simulator's calibration table or a stored measurement) and a prefill rate.
    A concurrency phase is estimated as rounds of ``concurrency`` parallel requests, each
    round as slow as one request: an upper bound, since batching rarely slows decode less."""

    def one(req_context: int, new_tokens: int) -> float:
        decode = interpolate_rate(rates, req_context)
        return overhead_s + req_context / prefill_tps + new_tokens / decode

    total = 0.0
    for req in (*workload.warmups, *workload.measured):
        total += one(req.context, req.max_new_tokens)
    if workload.concurrency:
        for ctx in workload.contexts:
            n = sum(1 for r in workload.concurrent if r.context == ctx)
            rounds = math.ceil(n / workload.concurrency)
            total += rounds * one(ctx, workload.output_tokens)
    for probe in workload.probes:
        total += one(probe.length, probe.tokens)
    return total
