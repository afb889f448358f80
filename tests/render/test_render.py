"""Text rendering of status and history: plain ASCII, no ``None`` shown to a user."""

from __future__ import annotations

from typing import Any

from kctl.render import history_text, status_text, table, to_text


def test_a_table_is_plain_and_reads_markup_literally() -> None:
    t = table(("name", "left"), ("n", "right"))
    t.add_row("[bold]x[/bold]", "1")
    assert to_text(t) == "name             n\n--------------- --\n[bold]x[/bold]   1"


def report(**fields: Any) -> dict[str, Any]:
    return {"state_dir": "/s", "health": "healthy", **fields}


def test_status_without_a_verdict_shows_a_dash() -> None:
    gate = {"deployment": "d-1", "profile": "p", "verdict": None, "reason": None, "timings": {}}
    text = status_text(report(last_gate=gate))
    assert "None" not in text
    assert "last gate: d-1 (p): -" in text.splitlines()
    text = status_text(report(last_gate={**gate, "verdict": "FAIL", "reason": "too slow"}))
    assert "last gate: d-1 (p): FAIL: too slow" in text.splitlines()
    assert text.isascii()


HISTORY = [
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
    # rows without the optional fields (parent_id, serving) still render
    row = {k: v for k, v in HISTORY[1].items() if k not in ("parent_id", "reason")}
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
    text = status_text(report(lock={**lock, "stale": False}))
    assert "lock: held by pid 42 on h for `kctl deploy x.yaml`" in text.splitlines()
    text = status_text(report(lock={**lock, "stale": True}))
    assert (
        "lock: free; kctl pid 42 died holding it (`kctl deploy x.yaml` since t0), "
        "so that run did not finish"
    ) in text.splitlines()


def test_history_names_the_overrides_a_record_was_deployed_with() -> None:
    row = {**HISTORY[1], "overrides": ["gate.repeats=5", "server.port=30001"]}
    notes = history_text([row]).splitlines()[2].split(maxsplit=7)[7]
    assert notes.startswith(
        "candidate rejected, baseline restored; --set gate.repeats=5 --set server.port=30001; "
    )
    assert "--set" not in history_text([HISTORY[1]])
