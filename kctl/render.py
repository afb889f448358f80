"""Text rendering of command results (pure: values in, strings out) and the ``--json``
envelope. The envelope is versioned; scripts should check ``schema``.

Tables are :class:`rich.table.Table` values built by :func:`table`. :func:`to_text` turns
one into plain ASCII (no colour, no box-drawing characters: what piped output, logs, the
``--json`` envelope and tests see). Printed through a ``rich.console.Console`` instead,
the same table gets colour on a terminal, and none when ``NO_COLOR`` is set or the
output is not a terminal (rich decides).
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from rich.box import Box
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from kctl import __version__

JSON_SCHEMA = "kctl.result/v1"

#: the house table style: a dashed rule under the header, columns apart by spaces; ASCII
#: only, so it reads the same in a terminal, a log file and a CI page
RULED = Box("    \n    \n -  \n    \n    \n    \n    \n    \n", ascii=True)
#: wide enough that no table is wrapped in text form
TEXT_WIDTH = 400

Justify = Literal["left", "right"]
#: the style of a verdict or result word when printed in colour
VERDICT_STYLES = {
    "PASS": "green",
    "FAIL": "bold red",
    "INCONCLUSIVE": "yellow",
    "UNCLEAR": "yellow",
    "SKIPPED": "dim",
    "info": "dim",
}


def table(*columns: tuple[str, Justify]) -> Table:
    """An empty table with these ``(header, justify)`` columns in the house style."""
    t = Table(box=RULED, show_edge=False, pad_edge=False, header_style="bold", highlight=False)
    for header, justify in columns:
        t.add_column(header, justify=justify, no_wrap=True)
    return t


def cell(value: object, style: str = "") -> Text:
    """A table cell that shows ``value`` as it is (no rich markup read in it); None
    shows as ``-``."""
    return Text("-" if value is None else str(value), style=style)


def verdict_cell(value: str | None) -> Text:
    """A verdict word, coloured by its meaning when printed on a terminal."""
    word = "-" if value is None else value
    return cell(word, VERDICT_STYLES.get(word.split(" ")[0], ""))


def to_text(renderable: RenderableType) -> str:
    """Plain ASCII text of a table: no colour and no trailing spaces."""
    buf = io.StringIO()
    console = Console(
        file=buf,
        width=TEXT_WIDTH,
        color_system=None,
        force_terminal=False,
        no_color=True,
        highlight=False,
        markup=False,
        emoji=False,
    )
    console.print(renderable)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines())


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


class ErrorInfo(BaseModel):
    """What went wrong, and how to fix it."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(description="the error class: CandidateRejected, ProfileError, LockHeld ...")
    message: str
    hint: str | None = Field(description="what to do about it")


class Envelope(BaseModel):
    """The one JSON document ``--json`` prints on stdout, whatever happens."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    format: Literal["kctl.result/v1"] = Field(default="kctl.result/v1", alias="schema")
    kctl_version: str
    command: str = Field(description="deploy, status, lock show ...")
    ok: bool = Field(description="exit_code == 0")
    exit_code: int
    result: Any = Field(
        description="the command's result (`kctl schema COMMAND`); null on most errors; a "
        "rejected deploy's result on exit 3"
    )
    error: ErrorInfo | None


def dump(result: Any) -> Any:
    """A command's result as JSON values: a model's (or a dataclass's, or a list of
    them) dump, strict JSON (no NaN), anything the models do not type written as its
    ``str``."""
    if isinstance(result, BaseModel):
        result = result.model_dump(mode="json", by_alias=True, fallback=str)
    elif dataclasses.is_dataclass(result) and not isinstance(result, type):
        result = TypeAdapter(type(result)).dump_python(result, mode="json", fallback=str)
    elif isinstance(result, (list, tuple)):
        return [dump(item) for item in result]
    return _finite(result)


def envelope(
    command: str,
    *,
    ok: bool,
    exit_code: int,
    result: Any = None,
    error: ErrorInfo | None = None,
) -> str:
    doc = Envelope(
        kctl_version=__version__,
        command=command,
        ok=ok,
        exit_code=exit_code,
        result=dump(result),
        error=error,
    )
    return json.dumps(
        doc.model_dump(mode="json", by_alias=True, fallback=str),
        indent=2,
        sort_keys=False,
        default=str,
        allow_nan=False,
    )


def deploy_text(result: dict[str, Any], *, reason: bool = True) -> str:
    """A deploy's result for humans; ``reason=False`` when the error line says it."""
    lines = []
    if result.get("table"):
        lines += [result["table"], ""]
    outcome = result["outcome"].upper()
    lines.append(f"{outcome}: {result['profile']} ({result['deployment_id']})")
    if reason:
        lines.append(f"  reason: {result['reason']}")
    if result.get("serving"):
        lines.append(f"  serving: {result['serving']}")
    timings = result.get("timings") or {}
    if timings:
        lines.append(
            "  timings (wall clock): " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items())
        )
    if result.get("report"):
        lines.append(f"  report: {result['report']}")
    for w in result.get("warnings") or []:
        lines.append(f"  warning: {w}")
    return "\n".join(lines)


def _serving_line(report: dict[str, Any]) -> str:
    """What serves, first: the store's serving deployment, or else what really answers on
    a port (a server an interrupted command left, or a process kctl does not own)."""
    serving = report.get("serving")
    if serving:
        return (
            f"serving: {serving['id']}  profile {serving['profile']} "
            f"(hash {str(serving['profile_hash'])[:12]})  {serving.get('process', '')}"
        ).rstrip()
    others = report.get("unmanaged") or []
    ours = [u for u in others if u.get("deployment")]
    if ours:
        u = ours[0]
        return (
            f"serving: {u['deployment']}  profile {u.get('profile') or '?'} on port "
            f"{u['port']} ({u.get('health', 'health unknown')}), NOT verified: the store "
            "does not record it serving; run `kctl rollback`"
        )
    if others:
        return f"serving: nothing of kctl's; something else listens on port {others[0]['port']}"
    return "serving: nothing"


def status_text(report: dict[str, Any]) -> str:
    lines = [_serving_line(report)]
    if report.get("degraded"):
        lines.append(report["degraded"])
    serving = report.get("serving")
    if serving and serving.get("sglang_version"):
        lines.append(f"sglang: {serving['sglang_version']} (as the server reported it)")
    lines.append(f"health: {report['health']}")
    lines.append(f"state: {report['state_dir']}")
    known = report.get("known_good")
    lines.append(
        f"known-good: {known['id']}  profile {known['profile']}" if known else "known-good: none"
    )
    lock = report.get("lock")
    if lock and lock.get("stale"):
        lines.append(
            f"lock: free; kctl pid {lock.get('pid')} died holding it (`{lock.get('command')}` "
            f"since {lock.get('started_at')}), so that run did not finish"
        )
    elif lock:
        lines.append(
            f"lock: held by pid {lock.get('pid')} on {lock.get('host')} for `{lock.get('command')}`"
        )
    gate = report.get("last_gate")
    if gate:
        reason = f": {gate['reason']}" if gate.get("reason") else ""
        lines += [
            "",
            f"last gate: {gate['deployment']} ({gate['profile']}): {gate['verdict'] or '-'}{reason}",
        ]
        if gate.get("timings"):
            lines.append(
                "  timings (wall clock): "
                + ", ".join(f"{k} {v:.1f}s" for k, v in gate["timings"].items())
            )
        if report.get("last_gate_table"):
            lines += [report["last_gate_table"]]
    page = report.get("report")
    if page:
        lines += ["", f"report: {page['path']} (deployment {page['deployment']})"]
    for server in report.get("unmanaged") or []:
        lines.append(f"! {server['note']}")
    for problem in report.get("problems") or []:
        lines.append(f"! {problem}")
    return "\n".join(lines)


#: what a record of each kind is, for the notes column of ``kctl history``
_KIND_NOTES = {"rollback": "rollback to {parent}", "baseline": "known-good baseline"}
#: how a deploy ended, where its status alone does not say what serves after it
_STATUS_NOTES = {
    "rejected": "candidate rejected, baseline restored",
    "reverted": "reverted to the baseline",
    "degraded": "revert failed: DEGRADED",
    "aborted": "revert aborted: DEGRADED",
    "interrupted": "kctl interrupted",
}
_NOTE_REASON_CHARS = 80


def _history_notes(row: dict[str, Any]) -> str:
    notes = []
    if row.get("serving"):
        notes.append("SERVING NOW")
    kind_note = _KIND_NOTES.get(row.get("kind", ""))
    if kind_note:
        notes.append(kind_note.format(parent=row.get("parent_id") or "?"))
    elif row.get("status") in _STATUS_NOTES:
        notes.append(_STATUS_NOTES[row["status"]])
    overrides = row.get("overrides") or []
    if overrides:
        notes.append(" ".join(f"--set {o}" for o in overrides))
    reason = " ".join(str(row.get("reason") or "").split())
    if reason:
        cut = len(reason) > _NOTE_REASON_CHARS
        notes.append(reason[: _NOTE_REASON_CHARS - 3] + "..." if cut else reason)
    return "; ".join(notes)


def history_text(rows: Sequence[dict[str, Any]]) -> str:
    """``kctl history`` as plain text; see :func:`history_table`."""
    return to_text(history_table(rows)) if rows else "no deployments yet"


def history_table(rows: Sequence[dict[str, Any]]) -> Table:
    """One line per record, newest first. The notes say what each record is (a rollback
    and its target, the known-good baseline), how a deploy ended, why, and which record
    serves now (when rows carry ``serving`` and ``parent_id``)."""
    t = table(
        ("id", "left"),
        ("kind", "left"),
        ("profile", "left"),
        ("status", "left"),
        ("verdict", "left"),
        ("sglang", "left"),
        ("started", "left"),
        ("notes", "left"),
    )
    for r in rows:
        t.add_row(
            cell(r["id"], "bold" if r.get("serving") else ""),
            cell(r["kind"]),
            cell(r["profile"]),
            cell(r["status"]),
            verdict_cell(r.get("verdict")),
            cell(r.get("sglang_version") or "-"),
            cell(r["started_at"]),
            cell(_history_notes(r)),
        )
    return t
