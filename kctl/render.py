"""Text rendering of command results (pure: values in, strings out) and the ``--json``
envelope. The envelope is versioned; scripts should check ``schema``."""

from __future__ import annotations

import json
import math
from typing import Any

from kctl import __version__

JSON_SCHEMA = "kctl.result/v1"


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None: the envelope is strict JSON
    (``json.dumps`` would write the non-standard ``NaN``, which most parsers refuse)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def envelope(
    command: str,
    *,
    ok: bool,
    exit_code: int,
    result: Any = None,
    error: dict[str, Any] | None = None,
) -> str:
    return json.dumps(
        {
            "schema": JSON_SCHEMA,
            "kctl_version": __version__,
            "command": command,
            "ok": ok,
            "exit_code": exit_code,
            "result": _finite(result),
            "error": error,
        },
        indent=2,
        sort_keys=False,
        default=str,
        allow_nan=False,
    )


def deploy_text(result: dict[str, Any]) -> str:
    lines = []
    if result.get("table"):
        lines += [result["table"], ""]
    outcome = result["outcome"].upper()
    lines.append(f"{outcome}: {result['profile']} ({result['deployment_id']})")
    lines.append(f"  reason: {result['reason']}")
    if result.get("serving"):
        lines.append(f"  serving: {result['serving']}")
    timings = result.get("timings") or {}
    if timings:
        lines.append("  timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))
    for w in result.get("warnings") or []:
        lines.append(f"  warning: {w}")
    return "\n".join(lines)


def status_text(report: dict[str, Any]) -> str:
    lines = [f"state: {report['state_dir']}"]
    if report.get("degraded"):
        lines.append(report["degraded"])
    serving = report.get("serving")
    if serving:
        lines.append(
            f"serving: {serving['id']}  profile {serving['profile']} "
            f"(hash {str(serving['profile_hash'])[:12]})  {serving.get('process', '')}"
        )
    else:
        lines.append("serving: nothing")
    lines.append(f"health: {report['health']}")
    known = report.get("known_good")
    lines.append(
        f"known-good: {known['id']}  profile {known['profile']}" if known else "known-good: none"
    )
    lock = report.get("lock")
    if lock:
        stale = " (STALE)" if lock.get("stale") else ""
        lines.append(
            f"lock: held by pid {lock.get('pid')} on {lock.get('host')} "
            f"for `{lock.get('command')}`{stale}"
        )
    gate = report.get("last_gate")
    if gate:
        lines += [
            "",
            f"last gate: {gate['deployment']} ({gate['profile']}): "
            f"{gate['verdict']} — {gate['reason']}",
        ]
        if gate.get("timings"):
            lines.append(
                "  timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in gate["timings"].items())
            )
        if report.get("last_gate_table"):
            lines += [report["last_gate_table"]]
    for problem in report.get("problems") or []:
        lines.append(f"! {problem}")
    return "\n".join(lines)


def history_text(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no deployments yet"
    head = f"{'id':<28} {'kind':<9} {'profile':<20} {'status':<12} {'verdict':<13} started"
    out = [head]
    for r in rows:
        out.append(
            f"{r['id']:<28} {r['kind']:<9} {r['profile']:<20} {r['status']:<12} "
            f"{(r['verdict'] or '-'):<13} {r['started_at']}"
        )
    return "\n".join(out)
