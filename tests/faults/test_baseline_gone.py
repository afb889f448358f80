"""The known-good baseline is gone when it is needed: it fails to start when a rejected
candidate's revert (or a rollback) brings it back, or its process is killed under kctl.

On the simulated runtime a server inherits kctl's environment under the profile's own
variables, so a ``KCTL_SIM_FAULT`` in kctl's environment reaches the baseline (whose
profile sets none) and not the candidate (whose profile sets its own): the baseline
restarts into that fault, as a real one would after its model files or GPU went away.
The Docker variants (image deleted, container removed) are in test_docker.py.
"""

from __future__ import annotations

import os
import signal

import pytest

from tests.faults.harness import BASE_NAME, CAND_NAME, Case

pytestmark = pytest.mark.slow

#: how the baseline fails when it is started again. Faults that leave a fatal line in the
#: baseline's log (crash_while_loading, fatal_log) are marked ``known_defect``: the
#: rollback afterwards must not trip over the old line.
BROKEN = {
    "crashes-at-start": {"KCTL_SIM_FAULT": "crash_at_start"},
    "calibration-gone": {"KCTL_SIM_CALIBRATION": "/nonexistent/calibration.json"},
    "bad-environment": {"KCTL_SIM_SEED": "not-a-number"},
}


@pytest.mark.parametrize("env", BROKEN.values(), ids=BROKEN.keys())
def test_revert_cannot_restart_the_baseline(case: Case, env: dict[str, str]) -> None:
    case.establish()
    before = case.history()
    wrong = case.candidate("wrong.yaml", KCTL_SIM_FAULT="wrong_output")
    r = case.run("deploy", wrong, env=env)
    assert r.code == 4, str(r)
    assert "DEGRADED" in r.err and "restoring the known-good baseline failed too" in r.err
    assert "kctl rollback" in r.err, str(r)
    # nothing serves, and status says so loudly
    assert case.serving() is None
    code, st = case.status()
    assert code == 4 and st["degraded"] and "kctl rollback" in st["degraded"], st
    assert case.servers() == []
    # once the baseline can start again, rollback restores it
    r = case.run("rollback")
    assert r.code == 0, str(r)
    case.assert_serves(BASE_NAME)
    case.check_store(before)


def test_rollback_cannot_start_the_baseline(case: Case) -> None:
    case.promote()
    before = case.history()
    r = case.run("rollback", env={"KCTL_SIM_FAULT": "crash_at_start"})
    assert r.code == 4, str(r)
    assert "DEGRADED: rollback to" in r.err and "failed" in r.err, str(r)
    assert case.serving() is None
    code, st = case.status()
    assert code == 4 and st["degraded"], st
    r = case.run("rollback")
    assert r.code == 0, str(r)
    case.assert_serves(BASE_NAME)
    case.check_store(before)


@pytest.mark.parametrize("who", ["baseline", "candidate"])
def test_serving_process_killed_under_kctl(case: Case, who: str) -> None:
    """What serves is killed behind kctl's back: status says it is down (exit 4) and
    names the remedy; rollback restores the known-good baseline."""
    if who == "baseline":
        case.establish()
    else:
        case.promote()
    before = case.history()
    (pid,) = case.servers()
    os.kill(pid, signal.SIGKILL)
    case.wait_port(want_open=False)
    code, st = case.status()
    assert code == 4 and st["health"] == "down", st
    assert any("kctl rollback" in p for p in st["problems"]), st
    r = case.run("rollback")
    assert r.code == 0, str(r)
    case.assert_serves(BASE_NAME)
    case.check_store(before)
    assert CAND_NAME not in (case.serving() or "")


# -- issue 33 (defects numbered as in its list; F: found by this suite) ---------------------


@pytest.mark.known_defect("F4")
@pytest.mark.parametrize("fault", ["crash_while_loading", "fatal_log"])
def test_rollback_after_baseline_fatal_line(case: Case, fault: str) -> None:
    case.establish()
    wrong = case.candidate("wrong.yaml", KCTL_SIM_FAULT="wrong_output")
    r = case.run("deploy", wrong, env={"KCTL_SIM_FAULT": fault})
    assert r.code == 4, str(r)
    r = case.run("rollback")
    assert r.code == 0, str(r)
    case.assert_serves(BASE_NAME)
