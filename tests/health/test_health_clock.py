"""wait_healthy's backoff, deadline and process checks, driven by an injected clock and
sleep, against a scripted test-only Runtime (states the local runtime cannot produce:
OOM kill, docker restarts, a container still being created). The port probed is a real,
closed local port."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

import pytest

from kctl.errors import HealthFailed
from kctl.health import HealthProgress, wait_healthy
from kctl.profile.model import HealthSpec
from kctl.runtime.base import Instance, InstanceState, LaunchSpec


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the socket closes


@dataclass
class ScriptedRuntime:
    """States are served in order (the last one repeats); logs grow by one chunk per call."""

    states: list[InstanceState]
    log_chunks: list[str] = field(default_factory=list)
    name: str = "scripted"
    log: str = ""
    state_calls: int = 0

    def check_available(self) -> None:
        pass

    def start(self, spec: LaunchSpec) -> Instance:
        raise NotImplementedError

    def stop(self, instance: Instance, timeout_s: float) -> None:
        pass

    def state(self, instance: Instance) -> InstanceState:
        self.state_calls += 1
        return self.states[min(self.state_calls, len(self.states)) - 1]

    def logs(self, instance: Instance, tail: int | None = None) -> str:
        if tail is None and self.log_chunks:
            self.log += self.log_chunks.pop(0)
        return "\n".join(self.log.splitlines()[-tail:]) if tail else self.log

    def running(self) -> list[Instance]:
        return []

    def port_holder(self, port: int) -> str | None:
        return None


INST = Instance(runtime="scripted", deployment_id="d1", ref="x")
RUNNING = InstanceState(running=True, detail="running")


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def test_backoff_doubles_to_the_poll_interval_and_stops_at_the_deadline() -> None:
    t = FakeTime()
    events: list[HealthProgress] = []
    rt = ScriptedRuntime([RUNNING])
    spec = HealthSpec(deadline_s=10.0, poll_interval_s=2.0, request_timeout_s=0.5)
    with pytest.raises(HealthFailed) as err:
        wait_healthy(rt, INST, spec, host="127.0.0.1", port=closed_port(), verify_kernel="none",
                     clock=t.clock, sleep=t.sleep, progress=events.append)  # fmt: skip
    assert t.sleeps[:5] == [0.25, 0.5, 1.0, 2.0, 2.0]
    assert sum(t.sleeps) == pytest.approx(10.0)  # never sleeps past the deadline
    assert err.value.phase == "port"
    assert err.value.message.startswith("not healthy after 10 s: stuck in phase 'port'")
    assert [e.phase for e in events[:2]] == ["process", "port"]
    assert events[-1].elapsed_s == pytest.approx(10.0) and events[-1].deadline_s == 10.0
    assert "port" in str(events[-1]) and "not open" in events[-1].detail


def test_created_container_is_waited_for_then_exit_fails() -> None:
    t = FakeTime()
    created = InstanceState(running=False, exit_code=None, detail="created, never started")
    exited = InstanceState(running=False, exit_code=137, detail="exited with code 137")
    rt = ScriptedRuntime([created, created, exited], ["starting\n", "", "Killed\n"])
    with pytest.raises(HealthFailed) as err:
        wait_healthy(rt, INST, HealthSpec(), host="127.0.0.1", port=closed_port(),
                     verify_kernel="none", clock=t.clock, sleep=t.sleep)  # fmt: skip
    assert err.value.phase == "process"
    assert err.value.message == "the server process exited during process (exited with code 137)"
    assert err.value.log_tail == "starting\nKilled"
    assert len(t.sleeps) == 2


def test_oom_killed_container() -> None:
    t = FakeTime()
    oom = InstanceState(running=False, exit_code=137, oom_killed=True, detail="OOM killed")
    rt = ScriptedRuntime([RUNNING, oom])
    with pytest.raises(HealthFailed) as err:
        wait_healthy(rt, INST, HealthSpec(), host="127.0.0.1", port=closed_port(),
                     verify_kernel="none", clock=t.clock, sleep=t.sleep)  # fmt: skip
    assert err.value.phase == "port"
    assert "was killed for running out of memory during port" in err.value.message


def test_restart_by_the_runtime_is_a_crash() -> None:
    t = FakeTime()
    again = InstanceState(running=True, restart_count=1, detail="running, restarted 1 times")
    rt = ScriptedRuntime([RUNNING, RUNNING, again])
    with pytest.raises(HealthFailed, match="restarted by the runtime during port"):
        wait_healthy(rt, INST, HealthSpec(), host="127.0.0.1", port=closed_port(),
                     verify_kernel="none", clock=t.clock, sleep=t.sleep)  # fmt: skip


def test_half_written_line_is_scanned_once_complete() -> None:
    t = FakeTime()
    rt = ScriptedRuntime([RUNNING], ["loading\nCUDA out of ", "memory\n"])
    with pytest.raises(HealthFailed) as err:
        wait_healthy(rt, INST, HealthSpec(), host="127.0.0.1", port=closed_port(),
                     verify_kernel="none", clock=t.clock, sleep=t.sleep)  # fmt: skip
    assert err.value.matched_line == "CUDA out of memory"
