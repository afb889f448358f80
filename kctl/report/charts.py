"""The report's charts as Vega-Lite specifications, built with altair. Pure: data in, spec
dicts out; the page (:mod:`kctl.report.page`) embeds them with the Vega JavaScript inlined.

Every layer a reader (or a browser test) counts is named: Vega draws a named layer as an
SVG group with the class ``<name>_marks``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kctl.gate import Measurement
    from kctl.report.data import ReportData

SIDES = ["baseline", "candidate"]
COLORS = ["#4c78a8", "#e45756"]
KIND_COLORS = {
    "build": "#9d755d",
    "baseline": "#4c78a8",
    "candidate": "#e45756",
    "gate": "#f58518",
    "revert": "#b279a2",
}
WIDTH = 440
HEIGHT = 260


def _alt() -> Any:
    import altair as alt

    return alt


def _context_x(alt: Any, contexts: list[int]) -> Any:
    return alt.X(
        "context:Q",
        title="context (prompt tokens, log scale)",
        scale=alt.Scale(type="log", domain=[min(contexts) * 0.8, max(contexts) * 1.25]),
        axis=alt.Axis(values=sorted(set(contexts)), format="~s"),
    )


def _side_color(alt: Any) -> Any:
    return alt.Color(
        "side:N",
        title=None,
        scale=alt.Scale(domain=SIDES, range=COLORS),
        legend=alt.Legend(orient="top"),
    )


def _samples(side: str, meas: Measurement | None) -> list[dict[str, Any]]:
    if meas is None:
        return []
    return [
        {
            "side": side,
            "context": s.context,
            "tps": s.decode_tps,
            "repeat": s.index + 1,
            "round": s.round,
        }
        for s in meas.samples
        if s.phase == "measure" and s.concurrency == 1 and s.ok
    ]


def _medians(side: str, meas: Measurement | None) -> list[dict[str, Any]]:
    if meas is None:
        return []
    return [
        {"side": side, "context": s.context, "median": s.median, "lo": s.min, "hi": s.max}
        for s in meas.summaries
        if s.concurrency == 1 and s.median is not None
    ]


def crossover_label(data: ReportData) -> str | None:
    """``crossover ≈ 8,783 tokens`` when the gate found one within the measured range."""
    if data.gate is None:
        return None
    cross = data.gate.verdict.crossover
    if cross.position == "within" and cross.context is not None:
        return f"crossover ≈ {cross.context:,.0f} tokens"
    return None


def _crossover_layers(alt: Any, data: ReportData, name: str, y_text: float) -> list[Any]:
    label = crossover_label(data)
    if label is None or data.gate is None:
        return []
    rows = [{"context": data.gate.verdict.crossover.context, "label": label, "y": y_text}]
    base = alt.Chart(alt.Data(values=rows))
    rule = base.mark_rule(strokeDash=[2, 2], color="#333").encode(x="context:Q")
    text = base.mark_text(align="left", dx=4, dy=-4, fontWeight="bold").encode(
        x="context:Q", y=alt.Y("y:Q"), text="label:N"
    )
    return [rule.properties(name=f"{name}_rule"), text.properties(name=name)]


def rate_chart(data: ReportData) -> dict[str, Any] | None:
    """Decode tok/s against context: every repeat of both sides, the median with the
    min-max range of the repeats, the rate the threshold asks of the candidate, and the
    crossover."""
    alt = _alt()
    cand = data.gate.candidate if data.gate is not None else None
    points = _samples("baseline", data.baseline) + _samples("candidate", cand)
    if not points:
        return None
    meds = _medians("baseline", data.baseline) + _medians("candidate", cand)
    contexts = [p["context"] for p in points]
    x = _context_x(alt, contexts)
    y = alt.Y("tps:Q", title="decode tok/s (per request)", scale=alt.Scale(type="log"))
    color = _side_color(alt)
    dots = (
        alt.Chart(alt.Data(values=points))
        .mark_point(filled=True, size=45, opacity=0.75)
        .encode(
            x=x,
            y=y,
            color=color,
            shape=alt.Shape("side:N", legend=None),
            tooltip=[
                "side:N",
                "context:Q",
                "repeat:Q",
                "round:Q",
                alt.Tooltip("tps:Q", format=".2f"),
            ],
        )
        .properties(name="rate_points")
    )
    layers = [dots]
    if meds:
        base = alt.Chart(alt.Data(values=meds))
        layers += [
            base.mark_rule(strokeWidth=3, opacity=0.5)
            .encode(x=x, y=alt.Y("lo:Q"), y2="hi:Q", color=color)
            .properties(name="rate_range"),
            base.mark_line(strokeWidth=1.5)
            .encode(x=x, y=alt.Y("median:Q"), color=color, detail="side:N")
            .properties(name="rate_median"),
        ]
    if data.gate is not None:
        need = [
            {
                "context": r.context,
                "need": r.threshold * r.baseline_tps,
                "what": "threshold x baseline",
            }
            for r in data.gate.verdict.rows
            if r.concurrency == 1 and r.threshold is not None and r.baseline_tps is not None
        ]
        if need:
            layers.append(
                alt.Chart(alt.Data(values=need))
                .mark_line(
                    strokeDash=[6, 4], color="#555", point=alt.OverlayMarkDef(shape="stroke")
                )
                .encode(
                    x=x, y=alt.Y("need:Q"), tooltip=["what:N", alt.Tooltip("need:Q", format=".2f")]
                )
                .properties(name="rate_threshold")
            )
    top = max(p["tps"] for p in points)
    layers += _crossover_layers(alt, data, "rate_crossover", top)
    chart = alt.layer(*layers).properties(
        width=WIDTH, height=HEIGHT, title="Decode rate by context"
    )
    spec: dict[str, Any] = chart.to_dict()
    return spec


def ratio_chart(data: ReportData) -> dict[str, Any] | None:
    """Candidate / baseline per context with its bootstrap interval, the threshold, 1.0 and
    the crossover; each point coloured by the row's result."""
    if data.gate is None:
        return None
    alt = _alt()
    rows = [
        {
            "context": r.context,
            "ratio": r.ratio,
            "lo": r.ratio_lo,
            "hi": r.ratio_hi,
            "threshold": r.threshold,
            "result": r.result,
        }
        for r in data.gate.verdict.rows
        if r.concurrency == 1 and r.ratio is not None
    ]
    if not rows:
        return None
    rated = [r for r in data.gate.verdict.rows if r.concurrency == 1 and r.ratio is not None]
    x = _context_x(alt, [r.context for r in rated])
    base = alt.Chart(alt.Data(values=rows))
    result_color = alt.Color(
        "result:N",
        scale=alt.Scale(
            domain=["PASS", "FAIL", "UNCLEAR", "INFO"],
            range=["#54a24b", "#e45756", "#eeca3b", "#79706e"],
        ),
        legend=alt.Legend(orient="top", title=None),
    )
    layers = [
        alt.Chart(alt.Data(values=[{"one": 1.0}]))
        .mark_rule(color="#999")
        .encode(y="one:Q")
        .properties(name="ratio_one"),
        base.mark_rule(strokeWidth=2)
        .encode(
            x=x,
            y=alt.Y("lo:Q", title="candidate / baseline (90% interval)"),
            y2="hi:Q",
            color=result_color,
        )
        .properties(name="ratio_interval"),
        base.mark_point(filled=True, size=80)
        .encode(
            x=x,
            y="ratio:Q",
            color=result_color,
            tooltip=[
                "context:Q",
                alt.Tooltip("ratio:Q", format=".3f"),
                alt.Tooltip("lo:Q", format=".3f"),
                alt.Tooltip("hi:Q", format=".3f"),
                "threshold:Q",
                "result:N",
            ],
        )
        .properties(name="ratio_points"),
    ]
    bound = [r for r in rows if r["threshold"] is not None]
    if bound:
        layers.append(
            alt.Chart(alt.Data(values=bound))
            .mark_tick(color="#333", thickness=2, size=28)
            .encode(x=x, y="threshold:Q", tooltip=["context:Q", "threshold:Q"])
            .properties(name="ratio_threshold")
        )
    top = max([r.ratio_hi or r.ratio or 0.0 for r in rated] + [1.0])
    layers += _crossover_layers(alt, data, "ratio_crossover", top)
    chart = alt.layer(*layers).properties(
        width=WIDTH, height=HEIGHT, title="Candidate / baseline by context"
    )
    spec: dict[str, Any] = chart.to_dict()
    return spec


def _figure_rows(data: ReportData, field: str, scale: float) -> list[dict[str, Any]]:
    cand = data.gate.candidate if data.gate is not None else None
    rows: list[dict[str, Any]] = []
    for side, meas in (("baseline", data.baseline), ("candidate", cand)):
        if meas is None:
            continue
        for s in meas.summaries:
            value = getattr(s, field)
            if s.concurrency == 1 and value is not None:
                rows.append({"side": side, "context": s.context, "value": value * scale})
    return rows


def _figure_chart(
    rows: list[dict[str, Any]], title: str, y_title: str, name: str, log: bool = True
) -> dict[str, Any] | None:
    if not rows:
        return None
    alt = _alt()
    x = _context_x(alt, [r["context"] for r in rows])
    scale = alt.Scale(type="log") if log else alt.Scale(zero=False)
    chart = (
        alt.Chart(alt.Data(values=rows))
        .mark_line(point=True)
        .encode(
            x=x,
            y=alt.Y("value:Q", title=y_title, scale=scale),
            color=_side_color(alt),
            tooltip=["side:N", "context:Q", alt.Tooltip("value:Q", format=".2f")],
        )
        .properties(width=WIDTH // 2 - 20, height=HEIGHT - 40, title=title, name=name)
    )
    spec: dict[str, Any] = chart.to_dict()
    return spec


def latency_charts(data: ReportData) -> list[tuple[str, dict[str, Any]]]:
    """Median TTFT, ITL p50 and ITL p99 per context, both sides, in milliseconds."""
    out = []
    for key, field, title in (
        ("ttft", "ttft_median_s", "TTFT, median (ms)"),
        ("itl_p50", "itl_p50_s", "ITL p50 (ms)"),
        ("itl_p99", "itl_p99_s", "ITL p99 (ms)"),
    ):
        spec = _figure_chart(_figure_rows(data, field, 1000.0), title, "ms", f"{key}_line")
        if spec is not None:
            out.append((key, spec))
    return out


def accept_chart(data: ReportData) -> dict[str, Any] | None:
    """Mean speculative acceptance length per context, both sides."""
    return _figure_chart(
        _figure_rows(data, "accept_length", 1.0),
        "Acceptance length, mean (tokens per verify step)",
        "tokens",
        "accept_line",
        log=False,
    )


def timeline_chart(data: ReportData) -> dict[str, Any] | None:
    """The deploy's steps as bars on a wall-clock axis, coloured by what they served."""
    if not data.phases:
        return None
    alt = _alt()
    rows = [
        {
            "step": p.name,
            "kind": p.kind,
            "start": round(p.start_s, 3),
            "end": round(p.start_s + max(p.seconds, 0.05), 3),
            "seconds": round(p.seconds, 2),
            "state": p.state,
            "note": p.note,
        }
        for p in data.phases
    ]
    chart = (
        alt.Chart(alt.Data(values=rows))
        .mark_bar(height=14)
        .encode(
            x=alt.X("start:Q", title="seconds from the deployment's start (wall clock)"),
            x2="end:Q",
            y=alt.Y("step:N", sort=[r["step"] for r in rows], title=None),
            color=alt.Color(
                "kind:N",
                scale=alt.Scale(domain=list(KIND_COLORS), range=list(KIND_COLORS.values())),
                legend=alt.Legend(orient="top", title=None),
            ),
            stroke=alt.condition(alt.datum.state == "failed", alt.value("#000"), alt.value(None)),
            tooltip=["step:N", "kind:N", "seconds:Q", "state:N", "note:N"],
        )
        .properties(
            width=WIDTH,
            height=max(22 * len(rows), 60),
            title="What the try did",
            name="timeline_bars",
        )
    )
    spec: dict[str, Any] = chart.to_dict()
    return spec


def history_chart(data: ReportData) -> dict[str, Any] | None:
    """The baseline's median decode rate per context over its stored measurements."""
    if not data.history:
        return None
    alt = _alt()
    rows = [
        {
            "measured_at": p.measured_at,
            "context": str(p.context),
            "tps": p.median_tps,
            "deployment": p.deployment_id,
        }
        for p in data.history
    ]
    chart = (
        alt.Chart(alt.Data(values=rows))
        .mark_line(point=True)
        .encode(
            x=alt.X("measured_at:T", title="measured at (UTC)"),
            y=alt.Y("tps:Q", title="median decode tok/s", scale=alt.Scale(type="log")),
            color=alt.Color("context:N", title="context", legend=alt.Legend(orient="top")),
            tooltip=[
                "measured_at:T",
                "context:N",
                alt.Tooltip("tps:Q", format=".2f"),
                "deployment:N",
            ],
        )
        .properties(
            width=WIDTH,
            height=HEIGHT - 60,
            title="Known-good baseline over time",
            name="history_line",
        )
    )
    spec: dict[str, Any] = chart.to_dict()
    return spec
