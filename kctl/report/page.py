"""The report as one self-contained HTML page: the template ``kctl/templates/report.html.j2``
filled with the data and the charts' specifications, and the Vega, Vega-Lite and vega-embed
JavaScript inlined (bundled by ``vl-convert-python``), so the file opens with no network."""

from __future__ import annotations

import contextlib
import functools
import os
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kctl.report import charts

if TYPE_CHECKING:
    from kctl.report.data import ReportData


def _cache_dir() -> Path:
    """Where the bundle is kept between runs: ``$XDG_CACHE_HOME/kctl`` (``~/.cache/kctl``)."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:  # no home directory: the cache is the current one's
            base = ".cache"
    return Path(base) / "kctl"


@functools.lru_cache(maxsize=1)
def vega_bundle() -> str:
    """Vega, Vega-Lite (the version altair writes) and vega-embed as one script.

    Bundling takes about a second of CPU and gives the same script for the same
    vl-convert and Vega-Lite versions, so the script is kept in the user's cache dir under
    both versions' names and read from there by later deploys; a cache that cannot be read
    or written only costs the bundling again."""
    import altair as alt
    import vl_convert as vlc

    major, minor = alt.SCHEMA_VERSION.lstrip("v").split(".")[:2]
    vl_version = f"v{major}_{minor}"
    # the stub does not declare __version__; the package sets it
    vlc_version = str(getattr(vlc, "__version__", "") or metadata.version("vl-convert-python"))
    cached = _cache_dir() / f"vega-bundle-{vlc_version}-{vl_version}.js"
    try:
        script = cached.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        script = ""
    if script.endswith(_BUNDLE_END):
        return script
    # None: the default snippet, which sets window.vegaEmbed/vega/vegaLite (the stub
    # types the argument str; the function documents None as its default)
    raw: str = vlc.javascript_bundle(None, vl_version=vl_version)  # type: ignore[arg-type]
    # a literal end tag would end the inline <script> early
    script = raw.replace("</script", "<\\/script").replace("</SCRIPT", "<\\/SCRIPT")
    _keep(cached, script + _BUNDLE_END)
    return script + _BUNDLE_END


#: the bundle's last line, so that a cached file cut short is never inlined
_BUNDLE_END = "\n// kctl: end of the vega bundle\n"


def _keep(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a temp file renamed over it); never raises."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def verdict_sentence(data: ReportData) -> str:
    """The verdict and its reason in one sentence, or why there is none."""
    dep = data.deployment
    if data.gate is None:
        why = data.missing[0] if data.missing else "no gate result is stored"
        return f"No gate verdict for {dep.profile_name}: {why}."
    v = data.gate.verdict
    what = {
        "promoted": "was promoted and serves",
        "rejected": "was rejected and the known-good baseline restored",
        "degraded": "was rejected, and restoring the baseline failed (DEGRADED)",
        "aborted": "was rejected, and the revert was interrupted (DEGRADED)",
    }.get(dep.status, f"ended {dep.status}")
    return f"{v.verdict}: {dep.profile_name} {what}, because {v.reason}."


def _probes(data: ReportData) -> dict[str, Any] | None:
    if data.gate is None or data.gate.verdict.correctness is None:
        return None
    corr = data.gate.verdict.correctness
    return {
        "checked": corr.checked,
        "allowed": corr.allowed,
        "passed": corr.passed,
        "mismatches": [m.describe() for m in corr.mismatches],
        "outputs": [
            {
                "index": p.index,
                "tokens": len(p.output_ids),
                "error": p.error,
            }
            for p in data.gate.candidate.probes
        ],
    }


def _baseline_check(data: ReportData) -> dict[str, Any] | None:
    """The drift check of the stored baseline measurement, as the page shows it."""
    from kctl.gate.drift import DRIFT_TOLERANCE

    check = data.baseline_check
    if check is None:
        return None
    why = check.reason.partition(":")[0]
    return {
        "reused": check.steady,
        "outcome": "reused" if check.steady else f"measured again ({why})",
        "reason": check.reason,
        "elapsed_s": check.elapsed_s,
        "sent": sum(r.sent for r in check.rows),
        "contexts": len(check.rows),
        "tolerance": f"{DRIFT_TOLERANCE:.0%}",
        "rows": [
            {
                "context": r.context,
                "stored": r.stored,
                "now": r.now,
                "ratio": r.ratio,
                "interval": None if r.lo is None or r.hi is None else (r.lo, r.hi),
                "completed": r.completed,
                "sent": r.sent,
                "outcome": r.outcome,
            }
            for r in check.rows
        ],
    }


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 90:
        return f"{seconds / 60:.1f} min ({seconds:.0f} s)"
    return f"{seconds:.1f} s"


def render(data: ReportData) -> str:
    """The page's HTML."""
    import jinja2

    from kctl import __version__
    from kctl.gate.report import gate_rows, summary_lines

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("kctl", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["secs"] = _fmt_s
    specs: list[tuple[str, str, dict[str, Any]]] = []
    for key, title, spec in (
        ("rates", "Decode rate", charts.rate_chart(data)),
        ("ratio", "Ratio", charts.ratio_chart(data)),
    ):
        if spec is not None:
            specs.append((key, title, spec))
    latency = charts.latency_charts(data)
    accept = charts.accept_chart(data)
    timeline = charts.timeline_chart(data)
    trend = charts.history_chart(data)
    verdict = data.gate.verdict if data.gate is not None else None
    # chart element id -> spec, in page order; the page's script embeds each
    by_id: dict[str, dict[str, Any]] = {f"chart-{key}": spec for key, _, spec in specs}
    by_id.update({f"chart-{key}": spec for key, spec in latency})
    for key, extra in (("accept", accept), ("timeline", timeline), ("history", trend)):
        if extra is not None:
            by_id[f"chart-{key}"] = extra
    return env.get_template("report.html.j2").render(
        data=data,
        dep=data.deployment,
        sentence=verdict_sentence(data),
        crossover=charts.crossover_label(data),
        main_charts=specs,
        specs=by_id,
        latency=latency,
        accept=accept,
        timeline=timeline,
        trend=trend,
        rows=gate_rows(verdict) if verdict is not None else [],
        summary=summary_lines(verdict) if verdict is not None else [],
        probes=_probes(data),
        check=_baseline_check(data),
        changed=[r for r in data.diff if r.changed],
        unchanged=[r for r in data.diff if not r.changed],
        gate_total=dict(verdict.timings).get("total") if verdict is not None else None,
        vega_js=vega_bundle(),
        version=__version__,
    )
