"""Bad candidates: never ready, crashing at start, while loading or during the gate, slow
to load or to answer, wrong answers, hanging requests, a frozen process, a declined kernel.

Each is gated against a known-good baseline that serves when the deploy starts; each must
be rejected (exit 3) with the reason named, the baseline restored and verified serving,
and the store's earlier records kept.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from tests.faults.harness import BASE_NAME, Case, cand_profile

pytestmark = pytest.mark.slow


def _with(case: Case, env: dict[str, str], **sections: dict[str, Any]) -> str:
    p = cand_profile(case.port, **env)
    for name, values in sections.items():
        p[name].update(values)
    return case.write("bad.yaml", p)


def _rejected(case: Case, profile: str, *expected: str) -> str:
    """Deploy ``profile`` over the established baseline: rejected, baseline restored."""
    before = case.history()
    r = case.run("deploy", profile)
    assert r.code == 3, str(r)
    for text in expected:
        assert text in r.text, f"{text!r} not in\n{r}"
    assert "restored and verified" in r.err, str(r)
    case.assert_serves(BASE_NAME)
    after = case.check_store(before)
    dep = after[0]
    assert dep["kind"] == "deploy" and dep["status"] == "rejected", dep
    assert len(case.servers()) == 1
    return r.text


# 150 simulated seconds: 3 s of wall time at the profiles' 50x
SHORT = {"deadline_s": 150, "poll_interval_s": 0.05, "request_timeout_s": 2}

CASES: list[tuple[str, dict[str, str], dict[str, dict[str, Any]], tuple[str, ...]]] = [
    (
        "never-ready",
        {"KCTL_SIM_FAULT": "never_ready"},
        {"health": SHORT},
        ("not healthy after 150 s: stuck in phase 'health'",),
    ),
    (
        "crash-at-start",
        {"KCTL_SIM_FAULT": "crash_at_start"},
        {},
        ("the server process exited during", "exited with code 1", "simulated crash at start"),
    ),
    (
        "crash-while-loading",
        {"KCTL_SIM_FAULT": "crash_while_loading"},
        {},
        ("health failed", "simulated crash while loading weights"),
    ),
    ("fatal-log", {"KCTL_SIM_FAULT": "fatal_log"}, {}, ("health failed", "CUDA out of memory")),
    (
        "slow-to-load",
        {},
        {"health": SHORT, "simulator": {"load_s": 5000}},
        ("not healthy after 150 s: stuck in phase 'port'",),
    ),
    ("slow-answers", {"KCTL_SIM_SLOWDOWN": "4"}, {}, ("gate FAIL", "FAIL")),
    ("wrong-answers", {"KCTL_SIM_FAULT": "wrong_output"}, {}, ("correctness",)),
    (
        "hangs-every-request",
        {"KCTL_SIM_FAULT": "hang", "SGLANG_HEALTH_CHECK_TIMEOUT": "20"},
        {"health": SHORT},
        ("not healthy after 150 s",),
    ),
    (
        "answers-http-500",
        {"KCTL_SIM_FAULT": "generate_error"},
        {"health": SHORT},
        ("the server is up but failing", "HTTP 500", "simulated generation failure"),
    ),
    ("kernel-declined", {"KCTL_SIM_FAULT": "kernel_declined"}, {}, ("kdtree-verify: declined",)),
]


@pytest.mark.parametrize(
    ("env", "sections", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_candidate_is_rejected(
    case: Case,
    env: dict[str, str],
    sections: dict[str, dict[str, Any]],
    expected: tuple[str, ...],
) -> None:
    case.establish()
    _rejected(case, _with(case, env, **sections), *expected)


def _candidate_pid(case: Case, old: set[int]) -> int:
    pids = [p for p in case.servers() if p not in old]
    assert len(pids) == 1, pids
    return pids[0]


@pytest.mark.parametrize(
    ("sig", "expected"),
    [
        (signal.SIGKILL, "gate"),  # crashes during the gate
        (signal.SIGTERM, "gate"),  # exits cleanly during the gate
        (signal.SIGSTOP, "gate"),  # frozen mid-request: the request timeout ends it
    ],
    ids=["crashes-during-gate", "exits-during-gate", "frozen-mid-request"],
)
def test_candidate_dies_during_the_gate(case: Case, sig: int, expected: str) -> None:
    case.slow_gate = True
    prof = cand_profile(case.port, slow_gate=True)
    prof["gate"]["request_timeout_s"] = 1
    prof["gate"]["policy"]["stop_at_first_fail"] = True
    cand = case.write("cand-gate.yaml", prof)
    case.establish()
    before = case.history()
    base_pids = set(case.servers())
    old = {row[0] for row in case.journal()}
    proc = case.spawn("deploy", cand)
    case.wait_journal("gate", 1, old)
    os.kill(_candidate_pid(case, base_pids), sig)
    r = proc.finish()
    assert r.code == 3, str(r)
    assert expected in r.err and "restored and verified" in r.err, str(r)
    case.assert_serves(BASE_NAME)
    case.check_store(before)
    assert len(case.servers()) == 1


# -- issue 33 (defects numbered as in its list; F: found by this suite) ---------------------


@pytest.mark.known_defect("3")
def test_crashed_candidate_verdict_names_the_exit(slow_case: Case) -> None:
    case = slow_case
    case.establish()
    base_pids = set(case.servers())
    old = {row[0] for row in case.journal()}
    proc = case.spawn("deploy", case.cand)
    case.wait_journal("gate", 1, old)
    (pid,) = [p for p in case.servers() if p not in base_pids]
    os.kill(pid, signal.SIGKILL)
    r = proc.finish()
    assert r.code == 3, str(r)
    assert "probes differ" not in r.text and "ConnectionRefused" not in r.text, str(r)
    assert "signal 9" in r.text or "SIGKILL" in r.text, str(r)
    case.assert_serves(BASE_NAME)


@pytest.mark.known_defect("4")
def test_never_ready_is_rejected_in_seconds(case: Case) -> None:
    case.establish()
    p = cand_profile(case.port, KCTL_SIM_FAULT="never_ready")
    p["health"]["deadline_s"] = 900
    t0 = time.monotonic()
    r = case.run("deploy", case.write("never.yaml", p), timeout=120)
    assert r.code == 3, str(r)
    assert time.monotonic() - t0 < 30
    case.assert_serves(BASE_NAME)


@pytest.mark.known_defect("5")
def test_http_500_fails_fast(case: Case) -> None:
    case.establish()
    p = cand_profile(case.port, KCTL_SIM_FAULT="generate_error")
    p["health"]["deadline_s"] = 300
    t0 = time.monotonic()
    r = case.run("deploy", case.write("e500.yaml", p), timeout=120)
    assert r.code == 3, str(r)
    assert time.monotonic() - t0 < 30
    assert "simulated generation failure" in r.err, str(r)
    case.assert_serves(BASE_NAME)


@pytest.mark.known_defect("8")
def test_reason_names_the_exception(case: Case) -> None:
    case.establish()
    r = case.run("deploy", case.candidate("crash.yaml", KCTL_SIM_FAULT="crash_while_loading"))
    assert r.code == 3, str(r)
    error = next(line for line in r.err.splitlines() if line.startswith("kctl: error:"))
    assert "RuntimeError: simulated crash while loading weights" in error, error


@pytest.mark.known_defect("8")
def test_declined_kernel_not_phase_port(case: Case) -> None:
    case.establish()
    r = case.run("deploy", case.candidate("declined.yaml", KCTL_SIM_FAULT="kernel_declined"))
    assert r.code == 3, str(r)
    assert "phase port" not in r.err, str(r)
