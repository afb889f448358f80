"""The local runtime's stop on a fake clock: SIGTERM, a look every 50 ms until the
process is gone or ``timeout_s`` has passed, then SIGKILL and up to 5 s more. The process
table is faked; nothing is started or signalled."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from kctl.runtime.base import Instance
from kctl.runtime.local import KILL_WAIT_S, LocalRuntime


class Host:
    """A fake clock and one process that goes ``gone_after_s`` after a given signal."""

    def __init__(self, gone_after: dict[signal.Signals, float]) -> None:
        self.now = 0.0
        self.gone_after = gone_after
        self.gone_at: float | None = None
        self.signals: list[tuple[float, signal.Signals]] = []
        self.reaped: list[int] = []

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def alive(self, pid: int, ticks: int) -> bool:
        return self.gone_at is None or self.now < self.gone_at

    def signal(self, pid: int, sig: signal.Signals) -> None:
        self.signals.append((self.now, sig))
        if sig in self.gone_after and self.gone_at is None:
            self.gone_at = self.now + self.gone_after[sig]


def _runtime(tmp_path: Path, host: Host, monkeypatch: pytest.MonkeyPatch) -> LocalRuntime:
    rt = LocalRuntime(tmp_path, sleep=host.sleep, clock=lambda: host.now)
    monkeypatch.setattr(rt, "_alive", host.alive)
    monkeypatch.setattr(rt, "_signal_group", host.signal)
    monkeypatch.setattr(rt, "_reap", host.reaped.append)
    return rt


INSTANCE = Instance(runtime="local", deployment_id="d-1", ref="pid:4242:7")


def test_a_process_that_leaves_on_sigterm_is_reaped_without_sigkill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = Host({signal.SIGTERM: 1.2})
    _runtime(tmp_path, host, monkeypatch).stop(INSTANCE, timeout_s=10)
    assert host.signals == [(0.0, signal.SIGTERM)]
    assert host.reaped == [4242]
    assert 1.2 <= host.now <= 1.25 + 1e-9  # seen gone at the first look after it left


def test_a_process_that_ignores_sigterm_gets_sigkill_after_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = Host({signal.SIGKILL: 0.3})
    _runtime(tmp_path, host, monkeypatch).stop(INSTANCE, timeout_s=2)
    (t_term, term), (t_kill, kill) = host.signals
    assert (term, kill) == (signal.SIGTERM, signal.SIGKILL)
    assert t_term == 0.0 and 2.0 < t_kill <= 2.0 + 0.05 + 1e-9
    assert t_kill + 0.3 <= host.now <= t_kill + 0.35 + 1e-9
    assert host.reaped == [4242]


def test_a_process_that_outlives_sigkill_is_given_up_on_after_its_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = Host({})
    _runtime(tmp_path, host, monkeypatch).stop(INSTANCE, timeout_s=1)
    assert [sig for _, sig in host.signals] == [signal.SIGTERM, signal.SIGKILL]
    t_kill = host.signals[1][0]
    assert KILL_WAIT_S < host.now - t_kill <= KILL_WAIT_S + 0.05 + 1e-9
    assert host.reaped == [4242]
