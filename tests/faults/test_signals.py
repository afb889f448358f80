"""One and two SIGTERM/SIGINT at every step of deploy, rollback and bench.

A first signal during a deploy interrupts it: kctl reverts to the known-good baseline,
verifies it and exits 3 (or, when nothing was verified yet, stops what it started and
exits 3 saying nothing was restored). A second signal during that revert aborts it: exit
4, DEGRADED, and `kctl rollback` recovers. A signal during `rollback` aborts it (exit 4);
`rollback` again recovers. The automatic revert's own steps, where a single signal must
not abort, are marked ``known_defect("2")`` (issue 33, defect 2).
"""

from __future__ import annotations

import signal

import pytest

from tests.faults.harness import BASE_NAME, CAND_NAME, Case, Run, cand_profile
from tests.faults.test_kill import FIRST_DEPLOY, REVERT_STEPS, ROLLBACK, Step, act_at

pytestmark = pytest.mark.slow

TERM, INT = signal.SIGTERM, signal.SIGINT
DEPLOY_STEPS = {s[0]: s for s in FIRST_DEPLOY}
#: steps whose revert has to start the baseline again (long enough for a second signal).
#: A signal while the baseline is being stopped ("baseline-stop") is a known defect.
RESTARTING = ("candidate-start", "gate")

ONE = [
    (step, sig)
    for step in ("baseline-start", "baseline-measure", "candidate-start", "gate")
    for sig in (TERM, INT)
]
TWO = [(step, sigs) for step in RESTARTING for sigs in ((TERM, TERM), (INT, TERM), (INT, INT))]


def _ids(cases: list[tuple[str, int | tuple[int, ...]]]) -> list[str]:
    def name(v: int | tuple[int, ...]) -> str:
        sigs = v if isinstance(v, tuple) else (v,)
        return "+".join(signal.Signals(s).name for s in sigs)

    return [f"{step}-{name(sig)}" for step, sig in cases]


def _at(case: Case, step: Step, sigs: tuple[int, ...]) -> Run:
    """Signal a first deploy at ``step``; a second signal once the revert has started
    the baseline again (the third start of the deploy), while it waits for its health."""
    _, pattern, nth, journal = step
    return act_at(
        case, ("deploy", case.cand), pattern, nth, journal, signals=sigs, then=("restore", 1)
    )


@pytest.mark.parametrize(("step", "sig"), ONE, ids=_ids(ONE))
def test_one_signal_during_deploy(slow_case: Case, step: str, sig: int) -> None:
    case = slow_case
    run = _at(case, DEPLOY_STEPS[step], (sig,))
    name = signal.Signals(sig).name
    assert run.code == 3, str(run)
    assert f"interrupted by {name}" in run.err, str(run)
    hist = case.history()
    dep = next(r for r in hist if r["kind"] == "deploy")
    assert dep["status"] == "rejected" and dep["verdict"] == "INTERRUPTED", dep
    assert dep["reason"].endswith(f"interrupted by {name}"), dep
    if step == "baseline-start":
        # no baseline was verified yet: kctl stops what it started, restores nothing
        assert "nothing served before this deploy, so nothing was restored" in run.err
        case.assert_serves(None)
        code, st = case.status()
        assert code == 0 and not st["interrupted"] and st["lock"] is None, st
        assert case.servers() == []
        # the host is usable at once: the same deploy, uninterrupted, goes through
        r = case.run("deploy", case.cand)
        assert r.code == 0, str(r)
        case.assert_serves(CAND_NAME)
    else:
        assert "restored and verified" in run.err, str(run)
        case.assert_serves(BASE_NAME)
        assert len(case.servers()) == 1
    case.check_store(hist)


@pytest.mark.parametrize(("step", "sigs"), TWO, ids=_ids(TWO))
def test_second_signal_aborts_the_revert(slow_case: Case, step: str, sigs: tuple[int, int]) -> None:
    case = slow_case
    # the records before the fault (the aborted deploy's own record is checked by the
    # known_defect("2") cases)
    before = case.history()
    run = _at(case, DEPLOY_STEPS[step], sigs)
    second = signal.Signals(sigs[1]).name
    assert run.code == 4, str(run)
    assert f"revert aborted by a second {second}" in run.err, str(run)
    assert "DEGRADED" in run.err and "kctl rollback" in run.err, str(run)
    code, st = case.status()
    assert code == 4 and st["degraded"] and "kctl rollback" in st["degraded"], st
    r = case.run("rollback")
    assert r.code == 0, str(r)
    case.assert_serves(BASE_NAME)
    case.check_store(before)
    assert len(case.servers()) == 1


ROLLBACK_SIGNALS = [(ROLLBACK[0], TERM), (ROLLBACK[1], INT)]


@pytest.mark.parametrize(
    ("step", "sig"), ROLLBACK_SIGNALS, ids=[f"{s[0]}-{g.name}" for s, g in ROLLBACK_SIGNALS]
)
def test_signal_during_rollback(slow_case: Case, step: Step, sig: int) -> None:
    """A rollback is itself the way back: a signal aborts it loudly (exit 4); running
    `rollback` again finishes the job."""
    case = slow_case
    case.promote()
    before = case.history()
    _, pattern, nth, journal = step
    run = act_at(case, ("rollback",), pattern, nth, journal, signals=(sig,))
    assert run.code == 4, str(run)
    assert "was interrupted; the host is not verified serving" in run.err, str(run)
    assert "kctl rollback" in run.err
    code, st = case.status()
    assert code == 4, st
    r = case.run("rollback")
    assert r.code == 0, str(r)
    case.assert_serves(BASE_NAME)
    case.check_store(before)
    assert len(case.servers()) == 1


def test_sigterm_during_bench(slow_case: Case) -> None:
    """bench changes nothing: SIGTERM ends it with the signal's default action; nothing
    is stored, the candidate serves on; the lock it held is left stale."""
    case = slow_case
    case.promote()
    before = case.history()
    run = act_at(case, ("bench",), r"kctl: bench: ", 1, None, signals=(TERM,))
    assert run.code == -TERM, str(run)
    code, st = case.status()
    assert code == 0 and (st["lock"] is None or st["lock"]["stale"] is True), st
    case.assert_serves(CAND_NAME)
    case.check_store(before)


# -- issue 33 (defects numbered as in its list; F: found by this suite) ---------------------


def _revert_ids(steps: list[Step], sigs: list[tuple[int, ...]]) -> list[str]:
    return [f"{s[0]}-{'+'.join(signal.Signals(g).name for g in gs)}" for s in steps for gs in sigs]


ONE_SIG = [(TERM,), (INT,)]


@pytest.mark.known_defect("2")
@pytest.mark.parametrize(
    ("step", "sigs"),
    [(s, g) for s in REVERT_STEPS for g in ONE_SIG],
    ids=_revert_ids(REVERT_STEPS, ONE_SIG),
)
def test_one_signal_during_revert(slow_case: Case, step: Step, sigs: tuple[int, ...]) -> None:
    case = slow_case
    case.establish()
    before = case.history()
    slow = case.candidate("slow.yaml", KCTL_SIM_SLOWDOWN="4")
    _, pattern, nth, journal = step
    run = act_at(case, ("deploy", slow), pattern, nth, journal, signals=sigs)
    assert run.code == 3, str(run)
    assert "restored and verified" in run.err, str(run)
    case.assert_serves(BASE_NAME)
    case.check_store(before)


@pytest.mark.known_defect("2")
@pytest.mark.parametrize("step", REVERT_STEPS, ids=[s[0] for s in REVERT_STEPS])
def test_second_signal_during_revert(slow_case: Case, step: Step) -> None:
    case = slow_case
    case.establish()
    before = case.history()
    slow = case.candidate("slow.yaml", KCTL_SIM_SLOWDOWN="4")
    _, pattern, nth, journal = step
    run = act_at(
        case, ("deploy", slow), pattern, nth, journal, signals=(TERM, TERM), then=("restore", 1)
    )
    assert run.code == 4 and "DEGRADED" in run.err, str(run)
    r = case.run("rollback")
    assert r.code == 0, str(r)
    case.assert_serves(BASE_NAME)
    case.check_store(before)


@pytest.mark.known_defect("2")
def test_rollback_keeps_the_aborted_record(slow_case: Case) -> None:
    """Two signals abort a revert (exit 4); the rollback after it adds its own record and
    leaves the aborted one's status and reason as they were."""
    case = slow_case
    gate = next(s for s in FIRST_DEPLOY if s[0] == "gate")
    # a gate of several seconds: the first signal must land inside it, on a loaded machine too
    prof = cand_profile(case.port, slow_gate=True)
    prof["gate"]["output_tokens"] = 256
    run = act_at(
        case,
        ("deploy", case.write("cand-long.yaml", prof)),
        gate[1],
        gate[2],
        gate[3],
        signals=(TERM, TERM),
        then=("restore", 1),
    )
    assert run.code == 4, str(run)
    aborted = case.history()
    assert case.run("rollback").code == 0
    case.check_store(aborted)


@pytest.mark.known_defect("F3")
@pytest.mark.parametrize("sig", [TERM, INT], ids=["SIGTERM", "SIGINT"])
def test_signal_while_replacing_the_baseline(slow_case: Case, sig: int) -> None:
    case = slow_case
    stop = next(s for s in FIRST_DEPLOY if s[0] == "baseline-stop")
    run = act_at(case, ("deploy", case.cand), stop[1], stop[2], stop[3], signals=(sig,))
    assert run.code == 3, str(run)
    assert "restored and verified" in run.err, str(run)
    case.assert_serves(BASE_NAME)


@pytest.mark.known_defect("F6")
def test_sigint_during_bench(slow_case: Case) -> None:
    case = slow_case
    case.promote()
    before = case.history()
    for _ in range(3):  # the swallowed SIGINT does not happen every time
        run = act_at(case, ("bench",), r"kctl: bench: ", 1, None, signals=(INT,))
        assert run.code == 130, str(run)
    case.check_store(before)
    case.assert_serves("faults-cand")
