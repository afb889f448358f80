"""The deploy lock, with real second processes holding it."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kctl.errors import LockHeld, StoreError
from kctl.lock import DeployLock, format_age, process_start_ticks

REPO = Path(__file__).resolve().parents[2]
HOST = socket.gethostname()

HOLDER = textwrap.dedent(
    """
    import signal, sys
    from kctl.errors import KctlError, Interrupted
    from kctl.lock import DeployLock

    def on_sigint(signum, frame):
        raise Interrupted("SIGINT")

    signal.signal(signal.SIGINT, on_sigint)
    try:
        with DeployLock(sys.argv[1]).acquire(sys.argv[2], sys.argv[3] or None):
            print("held", flush=True)
            sys.stdin.readline()
    except KctlError as exc:
        print(f"error: {exc}", flush=True)
        sys.exit(exc.exit_code)
    print("released", flush=True)
    """
)


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), e.get("PYTHONPATH")]))
    return e


class Holder:
    """A real kctl-like process holding the lock until told to let go."""

    def __init__(self, state_dir: Path, command: str, deployment_id: str = "") -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(state_dir), command, deployment_id],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env(),
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line == "held", line

    @property
    def pid(self) -> int:
        return self.proc.pid

    def let_go(self) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        out = self.proc.stdout.read().strip()
        self.proc.wait(timeout=10)
        return out

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


@pytest.fixture
def holders() -> Iterator[list[Holder]]:
    started: list[Holder] = []
    yield started
    for h in started:
        h.close()


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


def lock_files(state_dir: Path) -> list[str]:
    return sorted(p.name for p in state_dir.iterdir() if p.name != "lock.guard")


def write_lock(state_dir: Path, **fields: object) -> None:
    data: dict[str, object] = {
        "pid": 999_999_999,
        "host": HOST,
        "started_at": "2026-11-29T10:00:00Z",
        "started_ts": time.time() - 600,
        "command": "kctl deploy profiles/kdtree-graphs.yaml",
        "deployment_id": "d-20261129-100000-0001",
        "kctl_version": "0.1.0",
        "pid_start": None,
        "token": "t0",
    }
    data.update(fields)
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "lock").write_text(json.dumps(data))


def test_acquire_writes_the_holder_and_releases(state_dir: Path) -> None:
    lock = DeployLock(state_dir, clock=lambda: 1795947847.0)
    assert lock.inspect() is None
    with lock.acquire("kctl deploy profiles/kdtree-eager.yaml") as held:
        data = json.loads((state_dir / "lock").read_text())
        assert data["pid"] == os.getpid() and data["host"] == HOST
        assert data["started_at"] == "2026-11-29T10:24:07Z"
        assert data["command"] == "kctl deploy profiles/kdtree-eager.yaml"
        assert data["deployment_id"] is None
        assert data["kctl_version"]
        assert data["pid_start"] == process_start_ticks(os.getpid())
        assert held.takeover_warning is None
        held = held.set_deployment_id("d-20261129-102407-abcd")
        assert lock.inspect() == held.info
        assert held.info.deployment_id == "d-20261129-102407-abcd"
        assert lock_files(state_dir) == ["lock"]  # no temporary file left behind
    assert lock.inspect() is None
    assert lock_files(state_dir) == []


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_released_when_the_block_raises(state_dir: Path, exc: BaseException) -> None:
    lock = DeployLock(state_dir)
    with pytest.raises(type(exc)), lock.acquire("kctl deploy x.yaml"):
        raise exc
    assert lock.inspect() is None


def test_inspect_creates_nothing(tmp_path: Path) -> None:
    assert DeployLock(tmp_path / "missing").inspect() is None
    assert not (tmp_path / "missing").exists()


def test_contention_with_a_real_process(state_dir: Path, holders: list[Holder]) -> None:
    holder = Holder(state_dir, "kctl deploy profiles/kdtree-eager.yaml", "d-20261129-102407-abcd")
    holders.append(holder)
    info = DeployLock(state_dir).inspect()
    assert info is not None and info.pid == holder.pid and not info.stale
    lock = DeployLock(state_dir, clock=lambda: info.started_ts + 192)
    with pytest.raises(LockHeld) as err, lock.acquire("kctl deploy profiles/kdtree-graphs.yaml"):
        pytest.fail("acquired a held lock")
    assert str(err.value) == (
        f"the deploy lock is held by another kctl: pid {holder.pid} on {HOST} running "
        "`kctl deploy profiles/kdtree-eager.yaml` (deployment d-20261129-102407-abcd), "
        "for 3m12s\n"
        "  hint: wait for it to finish, or if you are sure it is not running: "
        "kctl lock release --force"
    )
    assert err.value.exit_code == 5
    # the holder's lock is intact, and a live lock is not released without force
    assert DeployLock(state_dir).inspect() == info
    with pytest.raises(LockHeld, match="refusing to release a live deploy lock"):
        lock.release()
    assert holder.let_go() == "released"
    with lock.acquire("kctl deploy profiles/kdtree-graphs.yaml") as held:
        assert held.takeover_warning is None


def test_stale_lock_of_a_dead_process_is_taken_over(state_dir: Path, holders: list[Holder]) -> None:
    holder = Holder(state_dir, "kctl deploy profiles/kdtree-eager.yaml", "d-20261129-102407-abcd")
    holders.append(holder)
    old = DeployLock(state_dir).inspect()
    assert old is not None
    holder.proc.kill()  # killed outright: its lock stays behind
    holder.proc.wait()
    info = DeployLock(state_dir).inspect()
    assert info is not None and info.stale
    assert info.stale_reason == f"pid {holder.pid} is no longer running"
    lock = DeployLock(state_dir)
    with lock.acquire("kctl rollback") as held:
        assert held.takeover_warning == (
            f"took over a stale deploy lock: pid {holder.pid} is no longer running; it was held "
            "by `kctl deploy profiles/kdtree-eager.yaml` (deployment d-20261129-102407-abcd) "
            f"since {old.started_at}. That kctl did not finish: run `kctl status` to check "
            "for an interrupted deploy"
        )
        assert lock.last_warning == held.takeover_warning
        now = lock.inspect()
        assert now is not None and now.pid == os.getpid() and now.command == "kctl rollback"
    assert lock.inspect() is None


def test_a_zombie_holder_is_stale(state_dir: Path, holders: list[Holder]) -> None:
    holder = Holder(state_dir, "kctl deploy x.yaml")
    holders.append(holder)
    os.kill(holder.pid, signal.SIGKILL)
    # not reaped yet: the pid still exists, as a zombie
    deadline = time.monotonic() + 10
    while Path(f"/proc/{holder.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    info = DeployLock(state_dir).inspect()
    assert info is not None and info.stale
    assert info.stale_reason == f"pid {holder.pid} has exited"


def test_a_reused_pid_is_stale(state_dir: Path) -> None:
    # our own pid is alive, but it started at another time than the recorded holder
    ticks = process_start_ticks(os.getpid())
    assert ticks is not None
    write_lock(state_dir, pid=os.getpid(), pid_start=ticks + 1)
    info = DeployLock(state_dir).inspect()
    assert info is not None and info.stale
    assert (
        info.stale_reason
        == f"pid {os.getpid()} is now a different process (its start time differs)"
    )


def test_a_live_pid_with_the_same_start_is_not_stale(state_dir: Path) -> None:
    write_lock(state_dir, pid=os.getppid(), pid_start=process_start_ticks(os.getppid()))
    info = DeployLock(state_dir).inspect()
    assert info is not None and not info.stale and info.local


def test_another_hosts_lock_is_never_broken(state_dir: Path) -> None:
    write_lock(state_dir, host="gpu-node-7", pid=999_999_999)
    before = (state_dir / "lock").read_bytes()
    lock = DeployLock(state_dir, clock=lambda: 1795947847.0)
    info = lock.inspect()
    assert info is not None and not info.local and not info.stale
    with pytest.raises(LockHeld) as err, lock.acquire("kctl deploy x.yaml"):
        pytest.fail("broke a foreign lock")
    assert err.value.message.startswith(
        "the deploy lock is held by another kctl: pid 999999999 on gpu-node-7 running "
        "`kctl deploy profiles/kdtree-graphs.yaml` (deployment d-20261129-100000-0001), for "
    )
    assert "runs on another host, so kctl never breaks it itself" in (err.value.hint or "")
    with pytest.raises(LockHeld, match="refusing to release another host's deploy lock"):
        lock.release()
    assert (state_dir / "lock").read_bytes() == before
    released = lock.release(force=True)
    assert released is not None and released.host == "gpu-node-7"
    assert lock.inspect() is None


def test_unreadable_lock_is_held_until_forced(state_dir: Path) -> None:
    state_dir.mkdir()
    (state_dir / "lock").write_text("{half a lo")
    lock = DeployLock(state_dir)
    info = lock.inspect()
    assert info is not None and not info.readable and not info.stale
    with pytest.raises(LockHeld, match="is unreadable"), lock.acquire("kctl deploy x.yaml"):
        pytest.fail("took an unreadable lock")
    with pytest.raises(LockHeld, match="is unreadable"):
        lock.release()
    assert lock.release(force=True) is not None
    assert lock.inspect() is None


def test_release_rules(state_dir: Path) -> None:
    lock = DeployLock(state_dir)
    assert lock.release() is None  # nothing to release
    write_lock(state_dir, pid=999_999_999)  # stale: released without force
    released = lock.release()
    assert released is not None and released.stale
    with lock.acquire("kctl deploy x.yaml"):
        own = lock.release()  # this process's own lock
        assert own is not None and own.pid == os.getpid()
    assert lock.inspect() is None


def test_a_lock_released_by_force_is_not_removed_from_its_new_holder(state_dir: Path) -> None:
    first = DeployLock(state_dir)
    second = DeployLock(state_dir)
    second_cm = second.acquire("kctl deploy b.yaml")
    with first.acquire("kctl deploy a.yaml") as held:
        first.release(force=True)  # someone forced it away...
        second_held = second_cm.__enter__()  # ...and another kctl took it
        with pytest.raises(LockHeld, match="no longer held by this kctl"):
            held.set_deployment_id("d-1")
    # leaving the first block did not remove the second holder's lock
    info = second.inspect()
    assert info is not None and info.token == second_held.info.token
    second_cm.__exit__(None, None, None)
    assert second.inspect() is None


def test_sigint_handler_in_the_holder_releases(state_dir: Path, holders: list[Holder]) -> None:
    holder = Holder(state_dir, "kctl deploy x.yaml")
    holders.append(holder)
    holder.proc.send_signal(signal.SIGINT)
    assert holder.proc.wait(timeout=10) == 130
    assert holder.proc.stdout is not None
    assert holder.proc.stdout.read().strip() == "error: interrupted by SIGINT"
    assert DeployLock(state_dir).inspect() is None
    assert lock_files(state_dir) == []


RACER = textwrap.dedent(
    """
    import os, sys, time
    from kctl.errors import LockHeld
    from kctl.lock import DeployLock
    go = sys.argv[2]
    while not os.path.exists(go):
        time.sleep(0.001)
    try:
        with DeployLock(sys.argv[1]).acquire("kctl deploy race.yaml") as held:
            print("won" if held.takeover_warning else "won-without-takeover", flush=True)
            sys.stdin.readline()
    except LockHeld:
        print("lost", flush=True)
    """
)


def test_only_one_of_several_racers_takes_a_stale_lock(state_dir: Path, tmp_path: Path) -> None:
    write_lock(state_dir, pid=999_999_999)  # stale
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(state_dir), str(go)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env(),
        )
        for _ in range(4)
    ]
    try:
        time.sleep(0.5)  # let them all import and wait at the line
        go.touch()
        results = []
        for p in procs:
            assert p.stdout is not None
            results.append(p.stdout.readline().strip())
        # exactly one holds it; usually by takeover, or by slipping in between the
        # takeover's unlink and link (then the taker backs off)
        assert sorted(results)[:3] == ["lost", "lost", "lost"]
        assert results.count("won") + results.count("won-without-takeover") == 1
    finally:
        for p in procs:
            assert p.stdin is not None and p.stdout is not None
            p.stdin.close()
            p.wait(timeout=10)
            p.stdout.close()
    assert DeployLock(state_dir).inspect() is None


def test_format_age() -> None:
    assert [format_age(s) for s in (-3, 0, 59.9, 60, 192, 3599, 3600, 7500, 86400, 97200)] == [
        "0s",
        "0s",
        "59s",
        "1m00s",
        "3m12s",
        "59m59s",
        "1h00m",
        "2h05m",
        "1d00h",
        "1d03h",
    ]


def test_unwritable_state_dir_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    lock = DeployLock(blocker / "state")
    with (
        pytest.raises(StoreError, match="cannot create the state directory"),
        lock.acquire("kctl deploy x.yaml"),
    ):
        pytest.fail("acquired in an unusable directory")


def test_filesystems_without_hard_links(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_links(src: object, dst: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    lock = DeployLock(state_dir)
    with lock.acquire("kctl deploy x.yaml"):
        info = lock.inspect()
        assert info is not None and info.pid == os.getpid() and info.readable
        with pytest.raises(LockHeld), DeployLock(state_dir).acquire("kctl deploy y.yaml"):
            pytest.fail("acquired twice")
        assert lock_files(state_dir) == ["lock"]
    assert lock.inspect() is None
