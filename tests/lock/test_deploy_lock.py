"""The deploy lock, with real second processes holding it, killing it and racing for it."""

from __future__ import annotations

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
from kctl.lock import DeployLock, format_age

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
            if len(sys.argv) > 4:  # a long-lived child, as a server kctl starts
                import subprocess
                child = subprocess.Popen(["sleep", "60"])
                print(child.pid, flush=True)
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

    def __init__(
        self, state_dir: Path, command: str, deployment_id: str = "", *, child: bool = False
    ) -> None:
        extra = ["child"] if child else []
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(state_dir), command, deployment_id, *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env(),
        )
        assert self.proc.stdout is not None
        self.child_pid = int(self.proc.stdout.readline()) if child else None
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
        "  hint: wait for it to finish; the lock is free the moment that process exits "
        f"(if it hangs: kill {holder.pid})"
    )
    assert err.value.exit_code == 5
    # the holder's lock is intact, and a live lock is not released, not even by force
    assert DeployLock(state_dir).inspect() == info
    for force in (False, True):
        with pytest.raises(LockHeld, match="refusing to release a live deploy lock"):
            lock.release(force=force)
    assert DeployLock(state_dir).inspect() == info
    assert holder.let_go() == "released"
    assert lock.inspect() is None
    with lock.acquire("kctl deploy profiles/kdtree-graphs.yaml") as held:
        assert held.takeover_warning is None


def test_sigkill_of_the_holder_frees_the_lock_at_once(
    state_dir: Path, holders: list[Holder]
) -> None:
    holder = Holder(state_dir, "kctl deploy profiles/kdtree-eager.yaml", "d-20261129-102407-abcd")
    holders.append(holder)
    old = DeployLock(state_dir).inspect()
    assert old is not None and not old.stale
    holder.proc.kill()  # killed outright: its holder file stays behind, its flock does not
    holder.proc.wait()
    lock = DeployLock(state_dir)
    info = lock.inspect()
    assert info is not None and info.stale and info.pid == holder.pid
    assert info.stale_reason == f"pid {holder.pid} exited without releasing it"
    # no waiting, no retry: the first attempt takes it
    with lock.acquire("kctl rollback") as held:
        assert held.takeover_warning == (
            f"took over a stale deploy lock: pid {holder.pid} exited without releasing it; "
            "it was held by `kctl deploy profiles/kdtree-eager.yaml` (deployment "
            f"d-20261129-102407-abcd) since {old.started_at}. That kctl did not finish: run "
            "`kctl status` to check for an interrupted deploy"
        )
        assert lock.last_warning == held.takeover_warning
        now = lock.inspect()
        assert now is not None and now.pid == os.getpid() and now.command == "kctl rollback"
        assert not now.stale
    assert lock.inspect() is None
    with lock.acquire("kctl status") as held:  # the warning is given once
        assert held.takeover_warning is None


def test_a_killed_holder_is_free_before_it_is_reaped(
    state_dir: Path, holders: list[Holder]
) -> None:
    holder = Holder(state_dir, "kctl deploy x.yaml")
    holders.append(holder)
    os.kill(holder.pid, signal.SIGKILL)
    # not reaped yet: the pid still exists, as a zombie, and it still looks alive to kill(0)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{holder.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.kill(holder.pid, 0)
    with DeployLock(state_dir).acquire("kctl rollback") as held:
        assert held.takeover_warning is not None
        assert f"pid {holder.pid} exited without releasing it" in held.takeover_warning


def test_a_child_of_the_holder_does_not_keep_the_lock(
    state_dir: Path, holders: list[Holder]
) -> None:
    # a server kctl started outlives a kctl killed mid-deploy; the lock must not
    holder = Holder(state_dir, "kctl deploy x.yaml", child=True)
    holders.append(holder)
    assert holder.child_pid is not None
    try:
        holder.proc.kill()
        holder.proc.wait()
        os.kill(holder.child_pid, 0)  # still running
        info = DeployLock(state_dir).inspect()
        assert info is not None and info.stale
        with DeployLock(state_dir).acquire("kctl rollback") as held:
            assert held.takeover_warning is not None
    finally:
        os.kill(holder.child_pid, signal.SIGKILL)


def test_a_live_pid_without_the_flock_is_not_a_holder(state_dir: Path) -> None:
    # no guessing from pids: the pid in the holder file runs (it is our parent), but it
    # does not hold the flock, so that file is a dead holder's
    write_lock(state_dir, pid=os.getppid())
    info = DeployLock(state_dir).inspect()
    assert info is not None and info.stale and info.local
    with DeployLock(state_dir).acquire("kctl deploy x.yaml") as held:
        assert held.takeover_warning is not None
        assert held.takeover_warning.startswith(
            f"took over a stale deploy lock: pid {os.getppid()} exited without releasing it; "
            "it was held by `kctl deploy profiles/kdtree-graphs.yaml` (deployment "
            "d-20261129-100000-0001) since 2026-11-29T10:00:00Z."
        )


def test_a_lock_file_of_an_older_kctl_reads(state_dir: Path) -> None:
    # the holder file keeps the fields an older kctl wrote; its extra ones are ignored
    write_lock(state_dir, pid_start=123, token="t0")
    info = DeployLock(state_dir).inspect()
    assert info is not None and info.readable and info.stale
    assert info.command == "kctl deploy profiles/kdtree-graphs.yaml"


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
    write_lock(state_dir, pid=999_999_999)  # its holder died: released without force
    released = lock.release()
    assert released is not None and released.stale
    assert lock.inspect() is None
    with lock.acquire("kctl deploy x.yaml"):
        own = lock.release()  # this process's own holder file
        assert own is not None and own.pid == os.getpid()
        assert lock.inspect() is None
        # the flock is still this process's: nobody else gets the lock meanwhile
        with (
            pytest.raises(LockHeld, match="has not written its holder file"),
            DeployLock(state_dir).acquire("kctl deploy y.yaml"),
        ):
            pytest.fail("acquired twice")
    assert lock.inspect() is None


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
            print(f"won {os.getpid()} {held.takeover_warning is not None}", flush=True)
            sys.stdin.readline()
    except LockHeld as exc:
        print(f"lost {exc.exit_code} {exc.message}", flush=True)
    """
)


@pytest.mark.parametrize("stale", [False, True], ids=["free", "dead-holder"])
def test_exactly_one_of_several_racers_wins(state_dir: Path, tmp_path: Path, stale: bool) -> None:
    if stale:
        write_lock(state_dir, pid=999_999_999)
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
        won = [r for r in results if r.startswith("won ")]
        assert len(won) == 1, results
        _, winner, took_over = won[0].split()
        assert took_over == str(stale)
        # each loser gets the typed error (exit 5) naming the winner, never the dead holder
        lost = [r for r in results if r.startswith("lost ")]
        assert len(lost) == 3, results
        for line in lost:
            assert line.startswith(
                f"lost 5 the deploy lock is held by another kctl: pid {winner} on {HOST} "
                "running `kctl deploy race.yaml`, for "
            ), line
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


def kctl(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kctl", "--state-dir", str(state_dir), *args],
        capture_output=True,
        text=True,
        env=env(),
        timeout=60,
    )


def test_the_cli_on_a_live_and_a_dead_holder(state_dir: Path, holders: list[Holder]) -> None:
    holder = Holder(state_dir, "kctl deploy profiles/kdtree-eager.yaml", "d-20261129-102407-abcd")
    holders.append(holder)
    shown = json.loads(kctl(state_dir, "--json", "lock", "show").stdout)["result"]
    assert (shown["pid"], shown["stale"]) == (holder.pid, False)
    # the flock is the lock: not even --force takes it from a live kctl
    for force in ([], ["--force"]):
        run = kctl(state_dir, "lock", "release", *force)
        assert run.returncode == 5, run.stdout + run.stderr
        assert f"refusing to release a live deploy lock: pid {holder.pid}" in run.stderr
        assert f"kill {holder.pid}" in run.stderr
    holder.proc.kill()
    holder.proc.wait()
    shown = json.loads(kctl(state_dir, "--json", "lock", "show").stdout)["result"]
    assert (shown["pid"], shown["stale"]) == (holder.pid, True)
    status = kctl(state_dir, "status")
    assert (
        f"lock: free; kctl pid {holder.pid} died holding it "
        "(`kctl deploy profiles/kdtree-eager.yaml` since "
    ) in status.stdout
    run = kctl(state_dir, "lock", "release")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith(f"lock released (was pid {holder.pid} on {HOST} running ")
    assert kctl(state_dir, "lock", "show").stdout.strip() == "lock is free"
