"""wait_healthy against real processes started by the real LocalRuntime: a process that
never opens its port, one that logs an OOM line and exits, one that serves after a while,
and the kernel activation contract. No server is mocked."""

from __future__ import annotations

import socket
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kctl.errors import HealthFailed
from kctl.health import HealthProgress, HealthReport, wait_healthy
from kctl.profile.model import HealthSpec, VerifyKernel
from kctl.runtime.base import Instance, LaunchSpec
from kctl.runtime.local import LocalRuntime, _proc_state

FAST = HealthSpec(deadline_s=20.0, poll_interval_s=0.05, request_timeout_s=2.0)

#: a tiny HTTP server: port closed for LOAD_S, /health 503 for the first UNREADY calls,
#: then 200; /generate answers 4 ids. Prints the lines given in PRINT at start.
SERVER = textwrap.dedent(
    """
    import json, os, sys, time
    from http.server import BaseHTTPRequestHandler, HTTPServer
    for line in os.environ.get("PRINT", "").split("|"):
        if line:
            print(line, flush=True)
    time.sleep(float(os.environ.get("LOAD_S", "0")))
    calls = {"health": 0}
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass
        def _send(self, status, body=b""):
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def do_GET(self):
            calls["health"] += 1
            ok = calls["health"] > int(os.environ.get("UNREADY", "0"))
            self._send(200 if ok else 503)
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            if os.environ.get("GEN_FAIL"):
                self._send(500, b'{"error": {"message": "boom"}}')
            else:
                self._send(200, json.dumps({"output_ids": [1, 2, 3, 4]}).encode())
    print("The server is fired up and ready to roll!", flush=True)
    HTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Started:
    def __init__(self, runtime: LocalRuntime, instance: Instance, port: int) -> None:
        self.runtime, self.instance, self.port = runtime, instance, port

    def wait(
        self,
        spec: HealthSpec = FAST,
        verify_kernel: VerifyKernel = "none",
        **kw: object,
    ) -> HealthReport:
        return wait_healthy(
            self.runtime,
            self.instance,
            spec,
            host="127.0.0.1",
            port=self.port,
            verify_kernel=verify_kernel,
            **kw,  # type: ignore[arg-type]
        )


@pytest.fixture
def start(tmp_path: Path) -> Iterator:
    runtime = LocalRuntime(tmp_path)
    started: list[Instance] = []

    def _start(script: str, **env: str) -> Started:
        port = free_port()
        path = tmp_path / f"server{len(started)}.py"
        path.write_text(script)
        spec = LaunchSpec(
            deployment_id=f"d{len(started)}",
            profile_name="test",
            profile_hash="h",
            argv=(sys.executable, str(path)),
            env=tuple({"PORT": str(port), **env}.items()),
            host="127.0.0.1",
            port=port,
        )
        inst = runtime.start(spec)
        started.append(inst)
        return Started(runtime, inst, port)

    yield _start
    for inst in started:
        runtime.stop(inst, timeout_s=5)


def test_never_opens_port_hits_the_deadline_naming_the_phase(start) -> None:  # type: ignore[no-untyped-def]
    s = start("import time; print('loading weights', flush=True); time.sleep(60)")
    spec = HealthSpec(deadline_s=0.8, poll_interval_s=0.05)
    t0 = time.monotonic()
    with pytest.raises(HealthFailed) as err:
        s.wait(spec)
    assert time.monotonic() - t0 < 5
    assert err.value.phase == "port"
    assert "not healthy after 0.8 s: stuck in phase 'port' (port" in err.value.message
    assert err.value.matched_line is None
    assert "loading weights" in err.value.log_tail


def test_oom_line_then_exit_fails_fast_with_the_line(start) -> None:  # type: ignore[no-untyped-def]
    s = start(
        "import sys; print('loading', flush=True); "
        "print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB', flush=True);"
        " sys.exit(1)"
    )
    t0 = time.monotonic()
    with pytest.raises(HealthFailed) as err:
        s.wait(HealthSpec(deadline_s=60, poll_interval_s=0.05))
    assert time.monotonic() - t0 < 10
    assert err.value.matched_line == (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"
    )
    assert err.value.message.startswith("fatal log line during ")
    assert "loading" in err.value.log_tail


def test_silent_exit_reports_the_exit_code(start) -> None:  # type: ignore[no-untyped-def]
    s = start("import sys, time; time.sleep(0.3); sys.exit(3)")
    with pytest.raises(HealthFailed) as err:
        s.wait(HealthSpec(deadline_s=60, poll_interval_s=0.05))
    assert "the server process exited during" in err.value.message
    assert "exited with code 3" in err.value.message
    assert err.value.matched_line is None


def test_exit_code_kept_when_the_child_exits_between_two_checks(start) -> None:  # type: ignore[no-untyped-def]
    # state() once polled the child (running), then checked liveness, whose own poll had just
    # reaped it: "pid ... is gone" instead of the exit code (a flaky deploy-flow test). Here the
    # first poll says "running" although the process has already exited.
    s = start("import sys; sys.exit(1)")
    pid = int(s.instance.ref.split(":")[1])
    deadline = time.monotonic() + 10
    while _proc_state(pid) not in ("Z", None) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _proc_state(pid) == "Z"  # exited, not yet reaped
    child = s.runtime._children[pid]
    real_poll, polls = child.poll, []

    def poll_late() -> int | None:
        polls.append(None)
        return None if len(polls) == 1 else real_poll()

    child.poll = poll_late  # type: ignore[method-assign]
    state = s.runtime.state(s.instance)
    assert (state.running, state.exit_code, state.detail) == (False, 1, "exited with code 1")


def test_traceback_in_a_live_process_is_fatal(start) -> None:  # type: ignore[no-untyped-def]
    s = start(
        "import time; print('Traceback (most recent call last):', flush=True); "
        "print('  File \"x.py\", line 1', flush=True); time.sleep(60)"
    )
    with pytest.raises(HealthFailed) as err:
        s.wait(HealthSpec(deadline_s=60, poll_interval_s=0.05))
    assert err.value.matched_line == "Traceback (most recent call last):"


def test_profile_fatal_pattern(start) -> None:  # type: ignore[no-untyped-def]
    s = start(
        "import time; print('[2026] weird: disk quota XYZ exceeded', flush=True); time.sleep(60)"
    )
    spec = HealthSpec(deadline_s=60, poll_interval_s=0.05, fatal_patterns=(r"quota \w+ exceeded",))
    with pytest.raises(HealthFailed) as err:
        s.wait(spec)
    assert err.value.matched_line == "[2026] weird: disk quota XYZ exceeded"


def test_serves_after_loading_with_phase_timings_and_progress(start) -> None:  # type: ignore[no-untyped-def]
    s = start(SERVER, LOAD_S="0.4", UNREADY="3")
    events: list[HealthProgress] = []
    report = s.wait(progress=events.append)
    assert [p.phase for p in report.phases] == ["process", "port", "health", "generate"]
    port_phase = report.phases[1]
    assert port_phase.seconds >= 0.3 and port_phase.attempts > 1
    assert report.phases[2].attempts == 4  # three 503s, then 200
    assert report.ready_line_seen and report.kernel_line is None
    assert [p for p in events if p.phase == "health"][-1].detail == "GET /health: HTTP 503"
    assert report.total_s < FAST.deadline_s
    assert dict(report.timings())["health"] == report.total_s
    assert HealthReport.from_dict(report.to_dict()) == report


def test_generation_failure_keeps_it_unhealthy(start) -> None:  # type: ignore[no-untyped-def]
    s = start(SERVER, GEN_FAIL="1")
    with pytest.raises(HealthFailed) as err:
        s.wait(HealthSpec(deadline_s=1.0, poll_interval_s=0.05))
    assert err.value.phase == "generate"
    assert "POST /generate: HTTP 500" in err.value.message
    # without require_generation the same server is healthy
    spec = HealthSpec(deadline_s=5.0, poll_interval_s=0.05, require_generation=False)
    assert [p.phase for p in s.wait(spec).phases] == ["process", "port", "health"]


ACTIVE = (
    "2026-11-29 10:00:00 kdtree-verify: active kernel=kdtree_mla-0.1.0 arch=sm_120 sglang=0.5.10"
)
DECLINED = 'kdtree-verify: declined reason="sglang 0.5.5 is not supported" sglang=0.5.5'


def test_kdtree_requires_the_active_line(start) -> None:  # type: ignore[no-untyped-def]
    report = start(SERVER, PRINT=ACTIVE).wait(verify_kernel="kdtree")
    assert report.kernel_line == ACTIVE
    assert report.phases[-1].phase == "kernel"


def test_kdtree_declined_fails_at_once(start) -> None:  # type: ignore[no-untyped-def]
    s = start(SERVER, PRINT=DECLINED, LOAD_S="30")
    t0 = time.monotonic()
    with pytest.raises(HealthFailed) as err:
        s.wait(verify_kernel="kdtree")
    assert time.monotonic() - t0 < 10
    assert err.value.matched_line == DECLINED
    assert "declined to activate" in err.value.message


def test_kdtree_without_any_line_fails_after_serving(start, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr("kctl.health.KERNEL_LINE_GRACE_S", 0.3)
    with pytest.raises(HealthFailed) as err:
        start(SERVER).wait(verify_kernel="kdtree")
    assert err.value.phase == "kernel"
    assert "never logged the kdtree kernel activation line" in err.value.message


def test_none_fails_when_the_kernel_is_active(start) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(HealthFailed) as err:
        start(SERVER, PRINT=ACTIVE, LOAD_S="30").wait(verify_kernel="none")
    assert err.value.matched_line == ACTIVE
    assert "server.verify_kernel: none" in err.value.message
    # and a declined line is fine for a profile that does not want the kernel
    report = start(SERVER, PRINT=DECLINED).wait(verify_kernel="none")
    assert report.kernel_line == DECLINED
