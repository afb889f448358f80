"""kctl killed outright (SIGKILL: no handler runs) at every step of deploy, rollback and
bench, then ``status`` and ``rollback``.

A step is entered when kctl announces it on stderr; the kill follows the announcement
within milliseconds, while the step (a load, a measurement, a gate of about a second) is
still running. Afterwards ``status`` must name the interrupted deployment and the next
command (exit 4), and ``rollback`` must bring the known-good baseline back, verified,
without losing or rewriting a record.
"""

from __future__ import annotations

import http.server
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from tests.faults.harness import BASE_NAME, CAND_NAME, Case, Run

pytestmark = pytest.mark.slow

# (step id, stderr line announcing it and its nth match, journal step and its nth entry
# that must be on disk before the kill, or None where the step journals nothing itself)
# ("start", n, "done"): the start has returned and the new process is recorded; a revert or
# rollback journals its start inside "restore"
Journal = tuple[str, int] | tuple[str, int, str]
Step = tuple[str, str, int, "Journal | None"]
FIRST_DEPLOY: list[Step] = [
    ("recorded", r"kctl: deployment d-", 1, None),
    ("baseline-start", r"starting .*\(baseline for the gate\)", 1, ("start", 1)),
    ("baseline-measure", r"kctl: measuring the baseline ", 1, None),
    ("baseline-stop", r"stopping .*\(replaced by the candidate\)", 1, ("stop-serving", 1)),
    ("candidate-start", r"starting .*\(candidate\)", 1, ("start", 2)),
    ("gate", r" is healthy", 2, ("gate", 1)),
]
REJECTED_DEPLOY: list[Step] = [
    # the baseline serves: its stored measurement is checked against it first
    ("baseline-check", r"checking the stored measurement of ", 1, ("measure", 1)),
    # reused when steady; on a loaded host the check may find a drift and measure the
    # running baseline again instead: a kill there changes the host no more
    (
        "measurement-reused",
        r"baseline measurement reused|the stored baseline measurement no longer holds",
        1,
        None,
    ),
    ("baseline-stop", r"stopping .*\(replaced by the candidate\)", 1, ("stop-serving", 1)),
    ("candidate-start", r"starting .*\(candidate\)", 1, ("start", 1)),
    ("gate", r" is healthy", 1, ("gate", 1)),
    ("revert", r"; reverting", 1, None),
    ("revert-stop", r"stopping .*\(revert\)", 1, ("stop-others", 1)),
    ("revert-start", r"starting .*\(revert\)", 1, ("restore", 1)),
]
REVERT_STEPS = [s for s in REJECTED_DEPLOY if s[0].startswith("revert")]
ROLLBACK: list[Step] = [
    ("stop", r"stopping .*\(rollback\)", 1, ("stop-others", 1)),
    ("start", r"starting .*\(rollback\)", 1, ("restore", 1)),
]


def step_ids(steps: list[Step]) -> list[str]:
    return [s[0] for s in steps]


def act_at(
    case: Case,
    args: tuple[str, ...],
    pattern: str,
    nth: int,
    journal: Journal | None,
    signals: tuple[int, ...] = (signal.SIGKILL,),
    then: Journal | None = None,
    env: dict[str, str] | None = None,
) -> Run:
    """Run kctl, send ``signals`` once it is at the step (each later one once the journal
    shows ``then``), and return how it ended."""
    old = {row[0] for row in case.journal()}
    proc = case.spawn(*args, env=env)
    try:
        proc.wait_line(pattern, nth=nth)
        if journal is not None:
            case.wait_journal(journal[0], journal[1], old, done=len(journal) > 2)
        for i, sig in enumerate(signals):
            if i:
                # two signals sent back to back can reach the process as one (a pending
                # signal is not queued twice): let the first one's handler run
                time.sleep(0.2)
            if i and then is not None:
                case.wait_journal(then[0], then[1], old, done=len(then) > 2)
            proc.signal(sig)
    except BaseException:
        proc.signal(signal.SIGKILL)
        proc.finish()
        raise
    return proc.finish()


def _kill_at(
    case: Case, args: tuple[str, ...], pattern: str, nth: int, journal: Journal | None
) -> None:
    run = act_at(case, args, pattern, nth, journal)
    assert run.code == -signal.SIGKILL, str(run)


def _interrupted_id(case: Case) -> str:
    """`status` reports the killed transaction and the way out; returns its id."""
    code, st = case.status()
    assert code == 4, st
    assert st["needs_attention"] is True
    assert len(st["interrupted"]) == 1, st
    assert any("was interrupted" in p and "kctl rollback" in p for p in st["problems"]), st
    assert st["in_progress"] is None, st  # the lock's holder is dead: nobody is at work
    return str(st["interrupted"][0]["id"])


@pytest.mark.parametrize(
    ("step", "pattern", "nth", "journal"), FIRST_DEPLOY, ids=step_ids(FIRST_DEPLOY)
)
def test_kill_first_deploy(
    slow_case: Case, step: str, pattern: str, nth: int, journal: Journal | None
) -> None:
    case = slow_case
    _kill_at(case, ("deploy", case.cand), pattern, nth, journal)
    if step == "recorded":
        # killed between writing its record and its first journal step: the host is as it
        # was; status shows the dead holder's lock as stale (the next command closes its
        # record: test_killed_before_first_step_is_closed)
        code, st = case.status()
        assert code == 0 and st["serving"] is None and st["lock"]["stale"] is True, st
        assert case.serving() is None
        killed = case.history()[0]["id"]
    else:
        killed = _interrupted_id(case)
    before = case.history()
    assert any(r["id"] == killed and r["ended_at"] is None for r in before), before
    r = case.run("rollback")
    assert r.code == 0, str(r)
    assert f"deployment {killed} was interrupted" in r.err, str(r)
    if step in ("recorded", "baseline-start"):
        # no known-good baseline was ever verified: the one step back is a clean host,
        # nothing serving (the baseline still loading is stopped, never adopted)
        assert r.out.startswith("CLEARED: "), str(r)
        assert "took over a stale deploy lock" in r.err, str(r)
        case.assert_serves(None)
        code, st = case.status()
        assert code == 0 and not st["interrupted"] and not st["unmanaged"], st
        assert not case.servers()
    else:
        case.assert_serves(BASE_NAME)
        assert len(case.servers()) == 1
    after = case.check_store(before)
    assert next(row for row in after if row["id"] == killed)["status"] == "interrupted"


@pytest.mark.parametrize(
    ("step", "pattern", "nth", "journal"), FIRST_DEPLOY, ids=step_ids(FIRST_DEPLOY)
)
def test_deploy_again_after_kill_first_deploy(
    slow_case: Case, step: str, pattern: str, nth: int, journal: Journal | None
) -> None:
    """status's other way out, deploying again, completes from every phase: a baseline
    still loading is stopped, never measured, and the candidate is gated and promoted."""
    case = slow_case
    _kill_at(case, ("deploy", case.cand), pattern, nth, journal)
    before = case.history()
    r = case.run("deploy", case.cand)
    assert r.code == 0, str(r)
    assert "ConnectionRefused" not in r.text, str(r)
    case.assert_serves(CAND_NAME)
    code, st = case.status()
    assert st["known_good"] is not None and st["known_good"]["profile"] == "base", st
    case.check_store(before)
    assert len(case.servers()) == 1


@pytest.mark.parametrize("step", ["start", "wait-healthy"])
def test_kill_first_baseline_deploy_then_again(slow_case: Case, step: str) -> None:
    """A killed first deploy of a baseline profile, deployed again: never ALREADY-SERVING
    on the word of the record; the second deploy ends established and verified."""
    case = slow_case
    pattern = r"starting .*known-good baseline" if step == "start" else r"health d-"
    _kill_at(case, ("deploy", case.base), pattern, 1, ("start", 1, "done"))
    r = case.run("deploy", case.base)
    assert r.code == 0, str(r)
    assert "ALREADY-SERVING" not in r.out, str(r)
    case.assert_serves(BASE_NAME)
    r = case.run("deploy", case.base)
    assert r.code == 0 and r.out.startswith("ALREADY-SERVING"), str(r)
    assert "health verified" in r.out, str(r)


@pytest.mark.parametrize(
    ("step", "pattern", "nth", "journal"), REJECTED_DEPLOY, ids=step_ids(REJECTED_DEPLOY)
)
def test_kill_rejected_deploy(
    slow_case: Case, step: str, pattern: str, nth: int, journal: Journal | None
) -> None:
    case = slow_case
    case.establish()
    before = case.history()
    slow = case.candidate("slow.yaml", KCTL_SIM_SLOWDOWN="4")
    _kill_at(case, ("deploy", slow), pattern, nth, journal)
    if step in ("baseline-check", "measurement-reused"):
        # nothing changed: the baseline serves on; the lock is left, stale, and the open
        # transaction of the journalled (checked) measure step, which the next command
        # takes over and closes
        code, st = case.status()
        assert code == 4 and st["lock"]["stale"] is True and st["interrupted"], st
        assert case.serving() == BASE_NAME
        r = case.run("rollback")
        assert r.code == 0 and "took over a stale deploy lock" in r.err, str(r)
        assert "was interrupted" in r.err, str(r)
        assert "ALREADY-SERVING" in r.out, str(r)
        case.assert_serves(BASE_NAME)
        case.check_store(before)
        return
    killed = _interrupted_id(case)
    r = case.run("rollback")
    assert r.code == 0, str(r)
    assert f"deployment {killed} was interrupted" in r.err, str(r)
    case.assert_serves(BASE_NAME)
    after = case.check_store(before)
    assert next(row for row in after if row["id"] == killed)["status"] == "interrupted"
    assert len(case.servers()) == 1


def test_kill_after_promote(slow_case: Case) -> None:
    """Killed as it announces the promotion: the promotion is whole, nothing is open."""
    case = slow_case
    _kill_at(case, ("deploy", case.cand), r"kctl: promoted d-", 1, None)
    code, st = case.status()
    assert code == 0 and not st["interrupted"], st
    before = case.history()
    case.assert_serves(CAND_NAME)
    r = case.run("rollback")
    assert r.code == 0, str(r)
    case.assert_serves(BASE_NAME)
    case.check_store(before)


@pytest.mark.parametrize(("step", "pattern", "nth", "journal"), ROLLBACK, ids=step_ids(ROLLBACK))
def test_kill_rollback(
    slow_case: Case, step: str, pattern: str, nth: int, journal: Journal | None
) -> None:
    case = slow_case
    case.promote()
    before = case.history()
    _kill_at(case, ("rollback",), pattern, nth, journal)
    killed = _interrupted_id(case)
    r = case.run("rollback")
    assert r.code == 0, str(r)
    assert f"deployment {killed} was interrupted" in r.err, str(r)
    case.assert_serves(BASE_NAME)
    case.check_store(before)
    assert len(case.servers()) == 1


def test_kill_bench(slow_case: Case) -> None:
    """bench changes nothing on the host: killed mid-measure, nothing is left open but
    the lock it held while measuring, stale, which the next command takes over."""
    case = slow_case
    case.promote()
    before = case.history()
    _kill_at(case, ("bench",), r"kctl: bench: ", 1, None)
    code, st = case.status()
    assert code == 0 and not st["interrupted"] and st["lock"]["stale"] is True, st
    case.assert_serves(CAND_NAME)
    case.check_store(before)
    r = case.run("rollback")
    assert r.code == 0, str(r)
    case.assert_serves(BASE_NAME)
    case.check_store(before)


# -- issue 33 (defects numbered as in its list; F: found by this suite) ---------------------


@pytest.mark.known_defect("1")
def test_status_names_server_after_kill(slow_case: Case) -> None:
    case = slow_case
    gate = next(s for s in FIRST_DEPLOY if s[0] == "gate")
    run = act_at(case, ("deploy", case.cand), gate[1], gate[2], gate[3])
    assert run.code == -signal.SIGKILL
    code, st = case.status()
    assert code == 4 and st["interrupted"], st
    cand_id = st["interrupted"][0]["id"]
    assert case.serving() == "faults-cand"
    named = (st["serving"] or {}).get("id") == cand_id or any(
        cand_id in str(u) or str(case.port) in str(u) for u in st["unmanaged"]
    )
    assert named, f"status does not name {cand_id} serving on port {case.port}: {st}"


@pytest.fixture
def foreign_server(case: Case) -> Iterator[int]:
    server = http.server.HTTPServer(("127.0.0.1", case.port), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield case.port
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.known_defect("1")
def test_status_names_foreign_server(case: Case, foreign_server: int) -> None:
    r = case.run("deploy", case.base)
    assert r.code == 5 and "which kctl does not own" in r.err, str(r)
    code, st = case.status()
    assert any(str(foreign_server) in str(u) for u in st["unmanaged"]), st


@pytest.mark.known_defect("F1")
def test_killed_before_first_step_is_closed(slow_case: Case) -> None:
    case = slow_case
    rec = FIRST_DEPLOY[0]
    act_at(case, ("deploy", case.cand), rec[1], rec[2], rec[3])
    (killed,) = case.history()
    assert case.run("deploy", case.cand).code == 0
    row = next(r for r in case.history() if r["id"] == killed["id"])
    assert row["ended_at"] is not None and row["status"] != "planned", row


@pytest.mark.known_defect("F2")
def test_kill_inside_revert_start(slow_case: Case) -> None:
    case = slow_case
    case.establish()
    slow = case.candidate("slow.yaml", KCTL_SIM_SLOWDOWN="4")
    step = next(s for s in REVERT_STEPS if s[0] == "revert-start")
    act_at(case, ("deploy", slow), step[1], step[2], ("restore", 1))
    assert case.run("rollback").code == 0
    case.assert_serves(BASE_NAME)
