"""Text rendering of status and history: plain ASCII, no ``None`` shown to a user."""

from __future__ import annotations

from typing import Any

from kctl.cli.text import history_text, status_text
from kctl.controller.status import LastGate, Record, StatusReport
from kctl.lock.holder import LockInfo
from kctl.render import table, to_text


def test_a_table_is_plain_and_reads_markup_literally() -> None:
    t = table(("name", "left"), ("n", "right"))
    t.add_row("[bold]x[/bold]", "1")
    assert to_text(t) == "name             n\n--------------- --\n[bold]x[/bold]   1"


def report(**fields: Any) -> StatusReport:
    return StatusReport.model_validate({"state_dir": "/s", "health": "healthy", **fields})


def test_status_without_a_verdict_shows_a_dash() -> None:
    gate = {"deployment": "d-1", "profile": "p", "verdict": None, "reason": None, "timings": {}}
    text = status_text(report(last_gate=LastGate.model_validate(gate)))
    assert "None" not in text
    assert "last gate: d-1 (p): -" in text.splitlines()
    failed = {**gate, "verdict": "FAIL", "reason": "too slow"}
    text = status_text(report(last_gate=LastGate.model_validate(failed)))
    assert "last gate: d-1 (p): FAIL: too slow" in text.splitlines()
    assert text.isascii()


def record(**fields: Any) -> Record:
    """A record with what a test does not name left empty."""
    empty = {"profile_hash": "h", "verdict": None, "reason": None, "ended_at": None,
             "parent_id": None, "serving": False, "sglang_version": None, "overrides": []}  # fmt: skip
    return Record.model_validate({**empty, **fields})


ROWS = [
    {
        "id": "d-3",
        "kind": "rollback",
        "profile": "base",
        "status": "promoted",
        "verdict": None,
        "reason": None,
        "started_at": "t3",
        "parent_id": "d-1",
        "serving": True,
        "sglang_version": "0.5.10",
    },
    {
        "id": "d-2",
        "kind": "deploy",
        "profile": "cand",
        "status": "rejected",
        "verdict": "FAIL",
        "reason": "below threshold: 5700: ratio 0.93 < 1.00\n" + "x" * 200,
        "started_at": "t2",
        "parent_id": "d-1",
    },
    {
        "id": "d-1",
        "kind": "baseline",
        "profile": "base",
        "status": "promoted",
        "verdict": None,
        "reason": None,
        "started_at": "t1",
    },
]


HISTORY = [record(**row) for row in ROWS]


def test_history_says_what_each_record_is_and_what_serves() -> None:
    lines = history_text(HISTORY).splitlines()
    assert lines[0].split() == [
        "id", "kind", "profile", "status", "verdict", "sglang", "started", "notes",
    ]  # fmt: skip
    assert set(lines[1]) == {"-", " "}
    assert lines[2].split(maxsplit=7) == [
        "d-3",
        "rollback",
        "base",
        "promoted",
        "-",
        "0.5.10",
        "t3",
        "SERVING NOW; rollback to d-1",
    ]
    notes = lines[3].split(maxsplit=7)[7]
    assert notes.startswith(
        "candidate rejected, baseline restored; below threshold: 5700: ratio 0.93 < 1.00 xxx"
    )
    assert notes.endswith("x...") and len(notes) < 130
    assert lines[4].split(maxsplit=7)[7] == "known-good baseline"
    assert "None" not in "\n".join(lines)


def test_history_of_plain_rows() -> None:
    # records without a parent or a reason still render
    row = record(**{k: v for k, v in ROWS[1].items() if k not in ("parent_id", "reason")})
    assert history_text([row]).splitlines()[2].split() == [
        "d-2",
        "deploy",
        "cand",
        "rejected",
        "FAIL",
        "-",
        "t2",
        "candidate",
        "rejected,",
        "baseline",
        "restored",
    ]
    assert history_text([]) == "no deployments yet"


def test_status_says_whether_the_lock_is_held_or_its_holder_died() -> None:
    lock = {"pid": 42, "host": "h", "command": "kctl deploy x.yaml", "started_at": "t0"}
    text = status_text(report(lock=LockInfo(path="/l", started_ts=0.0, stale=False, **lock)))
    assert "lock: held by pid 42 on h for `kctl deploy x.yaml`" in text.splitlines()
    text = status_text(report(lock=LockInfo(path="/l", started_ts=0.0, stale=True, **lock)))
    assert (
        "lock: free; kctl pid 42 died holding it (`kctl deploy x.yaml` since t0), "
        "so that run did not finish"
    ) in text.splitlines()


def test_history_names_the_overrides_a_record_was_deployed_with() -> None:
    row = record(**{**ROWS[1], "overrides": ["gate.repeats=5", "server.port=30001"]})
    notes = history_text([row]).splitlines()[2].split(maxsplit=7)[7]
    assert notes.startswith(
        "candidate rejected, baseline restored; --set gate.repeats=5 --set server.port=30001; "
    )
    assert "--set" not in history_text([HISTORY[1]])
