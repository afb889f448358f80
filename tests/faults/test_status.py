"""What ``kctl status`` says after a fault: its first line names what really serves, a
server that runs but does not answer is a problem with the way out (exit 4), and a
candidate that never became ready is reported with the server's own log lines.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

import pytest

from tests.faults.harness import BASE_NAME, CAND_NAME, Case, cand_profile
from tests.faults.test_kill import FIRST_DEPLOY, act_at

pytestmark = pytest.mark.slow


def test_first_line_names_the_server_a_killed_deploy_left(slow_case: Case) -> None:
    case = slow_case
    gate = next(s for s in FIRST_DEPLOY if s[0] == "gate")
    run = act_at(case, ("deploy", case.cand), gate[1], gate[2], gate[3])
    assert run.code == -signal.SIGKILL, str(run)
    assert case.serving() == CAND_NAME
    code, st = case.status()
    cand_id = st["interrupted"][0]["id"]
    r = case.run("status")
    assert r.code == 4, str(r)
    first, health = r.out.splitlines()[:2]
    assert first.startswith(f"serving: {cand_id}  profile cand on port {case.port}"), r.out
    assert "NOT verified" in first and "kctl rollback" in first, r.out
    assert health == f"health: healthy ({cand_id}, not verified)", r.out
    r = case.run("rollback")
    assert r.code == 0, str(r)
    case.assert_serves(BASE_NAME)


def test_first_line_names_a_foreign_listener(case: Case) -> None:
    case.establish()
    r = case.run("stop", "--yes")
    assert r.code == 0, str(r)
    import http.server
    import threading

    server = http.server.HTTPServer(("127.0.0.1", case.port), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        r = case.run("status")
        assert r.out.splitlines()[0] == (
            f"serving: nothing of kctl's; something else listens on port {case.port}"
        ), r.out
    finally:
        server.shutdown()
        server.server_close()


def test_hung_server_is_exit_4_and_rollback_restarts_it(case: Case) -> None:
    case.establish()
    (pid,) = case.servers()
    os.kill(pid, signal.SIGSTOP)
    try:
        r = case.run("status")
        assert r.code == 4, str(r)
        assert r.out.splitlines()[0].startswith("serving: d-"), r.out
        assert "health: unreachable" in r.out, r.out
        problem = next(line for line in r.out.splitlines() if "does not answer /health" in line)
        assert "hung" in problem and "`kctl rollback`" in problem, r.out
        # the fix status names: the hung server is stopped and the known-good started again
        r = case.run("rollback", timeout=120)
        assert r.code == 0, str(r)
        assert "is not healthy" in r.err and "restarting it" in r.err, str(r)
        case.assert_serves(BASE_NAME)
        assert pid not in case.servers()
    finally:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGCONT)


def test_never_ready_log_tail_is_the_servers_own(case: Case) -> None:
    case.establish()
    p = cand_profile(case.port, KCTL_SIM_FAULT="never_ready")
    p["health"]["deadline_s"] = 200  # 4 s of wall time at 50x: about 80 polls
    t0 = time.monotonic()
    r = case.run("deploy", case.write("never.yaml", p), timeout=120)
    assert r.code == 3, str(r)
    assert time.monotonic() - t0 < 60
    tail = r.err.split("last log lines:\n", 1)[1]
    assert '"GET /health HTTP' not in tail, tail  # no access line of kctl's polls
    assert "access lines of kctl's health probes left out" in tail.splitlines()[0], tail
    assert "Uvicorn running on" in tail, tail  # the server's own lines
    case.assert_serves(BASE_NAME)
