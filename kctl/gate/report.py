"""The verdict as a table, for ``kctl deploy``/``status``/``bench``, and as data for
``--json``. Pure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.table import Table

from kctl.gate.signals import Figures, MetricRow
from kctl.gate.verdict import Row, Verdict
from kctl.render import cell, table, to_text, verdict_cell


def _num(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _result(r: Row) -> str:
    result: str = "info" if r.result == "INFO" else r.result
    if r.n_planned and r.n_completed < r.n_planned:
        result += f" ({r.n_completed}/{r.n_planned} ok)"
    return result


def gate_rows(verdict: Verdict) -> list[dict[str, Any]]:
    """The verdict table as data, one dict per bucket, in table order:

    ``context`` (tokens, int), ``concurrency`` (1 for the one-at-a-time rows),
    ``baseline`` and ``candidate`` (median decode tok/s; ``candidate`` is None for a
    skipped bucket), ``ratio`` (candidate / baseline, or None), ``interval`` (``[lo, hi]``
    of the ratio, or None), ``threshold`` (the floor that binds the row, None when none
    binds), ``verdict`` (the row's result: PASS, FAIL, UNCLEAR, INFO or SKIPPED),
    ``completed`` and ``planned`` (requests); and SGLang's figures, each as
    ``{"baseline": x, "candidate": y}`` (None where not measured or not reported):
    ``ttft_s`` (median), ``itl_p50_s``, ``itl_p99_s``, ``accept_length`` (mean
    speculative acceptance length)."""
    figures = {(m.context, m.concurrency): m for m in verdict.metrics}
    return [
        {
            "context": r.context,
            "concurrency": r.concurrency,
            "baseline": r.baseline_tps,
            "candidate": r.candidate_tps,
            "ratio": r.ratio,
            "interval": None if r.ratio_lo is None else [r.ratio_lo, r.ratio_hi],
            "threshold": r.threshold,
            "verdict": r.result,
            "completed": r.n_completed,
            "planned": r.n_planned,
            **_figures(figures.get((r.context, r.concurrency))),
        }
        for r in verdict.rows
    ]


def _figures(row: MetricRow | None) -> dict[str, dict[str, float | None]]:
    base = row.baseline if row else Figures()
    cand = row.candidate if row else Figures()
    return {
        name: {"baseline": getattr(base, name), "candidate": getattr(cand, name)}
        for name in ("ttft_s", "itl_p50_s", "itl_p99_s", "accept_length")
    }


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.1f}"


def _pair(base: float | None, cand: float | None, fmt: Callable[[float | None], str]) -> str:
    return f"{fmt(base)} / {fmt(cand)}"


def metrics_table(verdict: Verdict) -> Table:
    """SGLang's figures per bucket, ``baseline / candidate``: median TTFT and ITL
    p50/p99 in milliseconds, mean acceptance length, and the policy checks' result."""
    t = table(
        ("context", "left"),
        ("TTFT ms", "right"),
        ("ITL p50 ms", "right"),
        ("ITL p99 ms", "right"),
        ("accept len", "right"),
        ("checks", "left"),
    )
    for m in verdict.metrics:
        mine = [
            c for c in verdict.checks if (c.context, c.concurrency) == (m.context, m.concurrency)
        ]
        result = "-" if not mine else ("PASS" if all(c.passed for c in mine) else "FAIL")
        b, c = m.baseline, m.candidate
        t.add_row(
            cell(m.label),
            cell(_pair(b.ttft_s, c.ttft_s, _ms)),
            cell(_pair(b.itl_p50_s, c.itl_p50_s, _ms)),
            cell(_pair(b.itl_p99_s, c.itl_p99_s, _ms)),
            cell(_pair(b.accept_length, c.accept_length, _num)),
            verdict_cell(result),
        )
    return t


def gate_table(verdict: Verdict) -> Table:
    """One line per bucket: context, both rates, the ratio with its interval, the
    threshold and the result."""
    t = table(
        ("context", "left"),
        ("baseline tok/s", "right"),
        ("candidate tok/s", "right"),
        ("ratio", "right"),
        ("interval", "right"),
        ("threshold", "right"),
        ("result", "left"),
    )
    for r in verdict.rows:
        interval = "-" if r.ratio_lo is None else f"{r.ratio_lo:.2f}-{r.ratio_hi or 0.0:.2f}"
        t.add_row(
            cell(r.label),
            cell(_num(r.baseline_tps)),
            cell(_num(r.candidate_tps)),
            cell(_num(r.ratio)),
            cell(interval),
            cell(_num(r.threshold)),
            verdict_cell(_result(r)),
        )
    return t


def _objective_line(verdict: Verdict) -> str:
    obj = verdict.objective
    if obj is None:
        return "objective: none (each context against its threshold)"
    weights = ", ".join(f"{c}:{w:g}" for c, w in obj.weights)
    if obj.result == "SKIPPED":
        return f"objective: not computed (weights {weights}): a weighted context was skipped"
    return (
        f"objective: {obj.value:.2f} (interval {obj.lo:.2f}-{obj.hi:.2f}) vs "
        f"{obj.min_ratio:.2f}, weights {weights}: {obj.result}"
    )


def summary_lines(verdict: Verdict) -> list[str]:
    """What follows the table: the crossover, the objective, correctness, the verdict with
    its reason, and the timings."""
    skipped = any(r.result == "SKIPPED" for r in verdict.rows)  # the gate stopped at a FAIL
    rated = [r for r in verdict.rows if r.concurrency == 1 and r.ratio is not None]
    if len(rated) < 2 and skipped:
        lines = ["crossover (ratio = 1.0): not estimated (fewer than two contexts measured)"]
    else:
        lines = [f"crossover (ratio = 1.0): {verdict.crossover.describe()}"]
    lines.append(_objective_line(verdict))
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
    return lines


def render_table(verdict: Verdict) -> str:
    """The verdict as plain text: :func:`gate_table`, SGLang's figures
    (:func:`metrics_table`, baseline / candidate) when either side reported any, then
    :func:`summary_lines`."""
    parts = [to_text(gate_table(verdict)), ""]
    if any(m.baseline != Figures() or m.candidate != Figures() for m in verdict.metrics):
        parts += ["SGLang figures (baseline / candidate):", to_text(metrics_table(verdict)), ""]
    return "\n".join([*parts, *summary_lines(verdict)]) + "\n"
