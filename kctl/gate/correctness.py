"""The correctness gate: the candidate's greedy outputs for the fixed probe prompts
compared token by token with the baseline's recorded outputs. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kctl.errors import GateError
from kctl.gate.measurement import Measurement


@dataclass(frozen=True)
class Mismatch:
    """A probe whose greedy output differs from the baseline's recorded output."""

    prompt_index: int
    #: first differing token position; -1 when a side has no output (the probe failed)
    position: int
    expected: int | None = None
    got: int | None = None
    detail: str = ""

    def describe(self) -> str:
        if self.position < 0:
            return f"prompt {self.prompt_index}: {self.detail}"
        return (
            f"prompt {self.prompt_index} differs at token {self.position} "
            f"(baseline {self.expected}, candidate {self.got})"
        )


@dataclass(frozen=True)
class CorrectnessResult:
    """Greedy outputs of the probes compared with the baseline's."""

    checked: int
    mismatches: tuple[Mismatch, ...] = ()
    #: how many prompts may differ (gate.correctness.max_mismatched_prompts)
    allowed: int = 0

    @property
    def passed(self) -> bool:
        return len(self.mismatches) <= self.allowed

    def to_dict(self) -> dict[str, Any]:
        return {
            "checked": self.checked,
            "allowed": self.allowed,
            "mismatches": [m.__dict__.copy() for m in self.mismatches],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CorrectnessResult:
        return cls(
            checked=d["checked"],
            allowed=d.get("allowed", 0),
            mismatches=tuple(Mismatch(**m) for m in d.get("mismatches", ())),
        )


def check_correctness(
    baseline: Measurement, candidate: Measurement, *, max_mismatched: int = 0
) -> CorrectnessResult:
    """Compare the candidate's probe outputs with the baseline's, token by token over
    the length the baseline recorded."""
    cand = {p.index: p for p in candidate.probes}
    mismatches: list[Mismatch] = []
    for ref in baseline.probes:
        if ref.error is not None or not ref.output_ids:
            raise GateError(
                f"baseline measurement has no greedy output for probe {ref.index}"
                + (f" ({ref.error})" if ref.error else ""),
                hint="measure the baseline again (kctl bench BASELINE_PROFILE)",
            )
        got = cand.get(ref.index)
        if got is None:
            mismatches.append(Mismatch(ref.index, -1, detail="probe was not run"))
            continue
        if got.error is not None:
            mismatches.append(Mismatch(ref.index, -1, detail=f"probe failed: {got.error}"))
            continue
        for pos, expected in enumerate(ref.output_ids):
            actual = got.output_ids[pos] if pos < len(got.output_ids) else None
            if actual != expected:
                mismatches.append(Mismatch(ref.index, pos, expected, actual))
                break
    return CorrectnessResult(len(baseline.probes), tuple(mismatches), max_mismatched)
