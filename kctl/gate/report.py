"""Plain-text rendering of a verdict, for ``kctl deploy``/``status``/``bench``. Pure."""

from __future__ import annotations

from kctl.gate.verdict import Verdict

_HEADER = (
    "context",
    "baseline tok/s",
    "candidate tok/s",
    "ratio",
    "interval",
    "threshold",
    "result",
)
_WIDTHS = (12, 15, 16, 7, 12, 10, 8)
#: first column left-aligned, numbers right-aligned, the result left-aligned
_ALIGN = ("<", ">", ">", ">", ">", ">", "<")


def _line(cells: tuple[str, ...]) -> str:
    parts = [f"{c:{a}{w}}" for c, a, w in zip(cells, _ALIGN, _WIDTHS)]
    return "  ".join(parts).rstrip()


def _num(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def render_table(verdict: Verdict) -> str:
    """A fixed-width table of the verdict: one line per bucket, then the crossover, the
    objective, correctness, the verdict with its reason, and the timings."""
    lines = [_line(_HEADER), _line(tuple("-" * w for w in _WIDTHS))]
    for r in verdict.rows:
        interval = "-" if r.ratio_lo is None else f"{r.ratio_lo:.2f}-{r.ratio_hi or 0.0:.2f}"
        result: str = "info" if r.result == "INFO" else r.result
        if r.n_planned and r.n_completed < r.n_planned:
            result += f" ({r.n_completed}/{r.n_planned} ok)"
        lines.append(
            _line(
                (
                    r.label,
                    _num(r.baseline_tps),
                    _num(r.candidate_tps),
                    _num(r.ratio),
                    interval,
                    _num(r.threshold),
                    result,
                )
            )
        )
    lines.append("")
    skipped = any(r.result == "SKIPPED" for r in verdict.rows)  # the gate stopped at a FAIL
    rated = [r for r in verdict.rows if r.concurrency == 1 and r.ratio is not None]
    if len(rated) < 2 and skipped:
        lines.append("crossover (ratio = 1.0): not estimated (fewer than two contexts measured)")
    else:
        lines.append(f"crossover (ratio = 1.0): {verdict.crossover.describe()}")
    obj = verdict.objective
    if obj is None:
        lines.append("objective: none (each context against its threshold)")
    elif obj.result == "SKIPPED":
        weights = ", ".join(f"{c}:{w:g}" for c, w in obj.weights)
        lines.append(f"objective: not computed (weights {weights}): a weighted context was skipped")
    else:
        weights = ", ".join(f"{c}:{w:g}" for c, w in obj.weights)
        lines.append(
            f"objective: {obj.value:.2f} (interval {obj.lo:.2f}-{obj.hi:.2f}) vs "
            f"{obj.min_ratio:.2f}, weights {weights}: {obj.result}"
        )
    corr = verdict.correctness
    if corr is not None:
        ok = corr.checked - len(corr.mismatches)
        lines.append(
            f"correctness: {ok} of {corr.checked} probes match the baseline "
            f"(up to {corr.allowed} may differ)"
        )
    elif skipped:
        lines.append("correctness: not checked (the gate stopped at a FAIL)")
    lines.append(f"verdict: {verdict.verdict}: {verdict.reason}")
    if verdict.timings:
        lines.append("timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in verdict.timings))
    return "\n".join(lines) + "\n"
