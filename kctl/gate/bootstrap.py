"""The gate's statistics, pure: the percentile-bootstrap interval of a ratio of medians
(fixed seed, so the same measurements always give the same interval) and where the
one-at-a-time ratio crosses 1.0 over context (:func:`crossover`). Used by
:mod:`kctl.gate.verdict`, whose docstring says how the verdict reads them."""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field
from typing import Literal

from kctl.gate.stats import Summary

CrossoverPosition = Literal["within", "below", "above", "none"]

BOOTSTRAP_ROUNDS = 2000
BOOTSTRAP_SEED = 0
#: two-sided: the interval spans the 5th to the 95th percentile
INTERVAL_LEVEL = 0.90


@dataclass(frozen=True)
class Crossover:
    """Where the one-at-a-time ratio crosses 1.0, by log-linear interpolation in context."""

    context: float | None
    #: within the measured range; below/above it (extrapolating the trend); or none
    position: CrossoverPosition

    def describe(self) -> str:
        if self.position == "within" and self.context is not None:
            return f"~{self.context:,.0f} tokens"
        if self.position == "below":
            return "below the measured range"
        if self.position == "above":
            return "above the measured range"
        return "none"


def _percentile(sorted_xs: list[float], q: float) -> float:
    """Linear-interpolated percentile of an already sorted list, q in [0, 1]."""
    pos = q * (len(sorted_xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


@dataclass
class Boot:
    """Bootstrap draws of the ratio per bucket (same rounds across buckets)."""

    draws: dict[tuple[int, int], list[float]] = field(default_factory=dict)


def bootstrap(pairs: dict[tuple[int, int], tuple[Summary, Summary]]) -> Boot:
    rng = random.Random(BOOTSTRAP_SEED)
    boot = Boot({b: [] for b in pairs})
    for _ in range(BOOTSTRAP_ROUNDS):
        for bucket, (base, cand) in pairs.items():
            b = statistics.median(rng.choices(base.values, k=len(base.values)))
            c = statistics.median(rng.choices(cand.values, k=len(cand.values)))
            boot.draws[bucket].append(c / b)
    return boot


def interval(draws: list[float]) -> tuple[float, float]:
    xs = sorted(draws)
    tail = (1.0 - INTERVAL_LEVEL) / 2
    return _percentile(xs, tail), _percentile(xs, 1.0 - tail)


def crossover(points: list[tuple[int, float]]) -> Crossover:
    """Where ``ratio`` crosses 1.0 over (context, ratio) points: linear in ratio against
    log(context) between the first pair of neighbours that brackets 1.0. With no
    bracketing pair the trend between the end points says on which side it would lie."""
    pts = sorted(points)
    if len(pts) < 2:
        if pts and pts[0][1] == 1.0:
            return Crossover(float(pts[0][0]), "within")
        return Crossover(None, "none")
    for (c1, r1), (c2, r2) in zip(pts, pts[1:]):
        if r1 == 1.0:
            return Crossover(float(c1), "within")
        if (r1 - 1.0) * (r2 - 1.0) < 0:
            t = (1.0 - r1) / (r2 - r1)
            x = math.log(c1) + t * (math.log(c2) - math.log(c1))
            return Crossover(math.exp(x), "within")
    if pts[-1][1] == 1.0:
        return Crossover(float(pts[-1][0]), "within")
    first, last = pts[0][1], pts[-1][1]
    if first == last:
        return Crossover(None, "none")
    rising = last > first
    above_one = first > 1.0
    # a rising ratio that is already above 1 crossed it at a shorter context
    return Crossover(None, "below" if rising == above_one else "above")
