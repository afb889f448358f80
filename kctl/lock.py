"""The deploy lock: at most one kctl changes the serving host at a time.

The lock is the file ``<state_dir>/lock`` holding JSON about its holder (pid, host,
process start time, command, deployment id, kctl version). It is created atomically and
never seen half-written: the JSON is written and fsynced to a private temporary file,
which is then hard-linked to ``lock``; ``link`` fails when ``lock`` exists, which gives
the same exclusivity as ``O_CREAT | O_EXCL``.

A lock whose holder is gone is *stale*: same host, and the pid is not running (or is a
zombie), or the pid now belongs to another process (its start time, read from
``/proc/<pid>/stat``, differs from the one recorded). A stale lock is taken over
automatically with a warning for the caller to print. A lock from another host is never
broken automatically: kctl cannot see that host's processes.

Replacing a stale lock and releasing are serialised by ``flock`` on ``lock.guard`` (the
kernel drops it if its holder dies), so two kctls that find the same stale lock cannot
both take it, and a release never removes a lock that changed hands.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kctl import __version__
from kctl.errors import LockHeld, StoreError

LOCK_NAME = "lock"
GUARD_NAME = "lock.guard"
#: filesystems without hard links answer link() with one of these
_NO_LINK = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EXDEV}

Clock = Callable[[], float]


def format_age(seconds: float) -> str:
    """``45s``, ``3m12s``, ``2h05m``, ``1d03h``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _iso_utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _optional(convert: Callable[[Any], Any], value: Any) -> Any:
    return None if value is None else convert(value)


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks since boot) from /proc; None where
    /proc is not available or the process is gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # comm (field 2) may contain spaces and parentheses; it ends at the last ')'
    fields = data.rsplit(b")", 1)[-1].split()
    try:
        return fields[0].decode(), int(fields[19])  # fields 3 (state) and 22 (starttime)
    except (IndexError, ValueError):
        return None


def process_start_ticks(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot (Linux); None elsewhere."""
    stat = _proc_stat(pid)
    return None if stat is None else stat[1]


def _why_dead(pid: int, recorded_start: int | None) -> str | None:
    """Why a process of this host that held the lock is gone; None while it runs."""
    if pid <= 0:
        return f"pid {pid} is not a process"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return f"pid {pid} is no longer running"
    except PermissionError:
        pass  # it exists, owned by another user
    stat = _proc_stat(pid)
    if stat is not None:
        state, start = stat
        if state in ("Z", "X"):
            return f"pid {pid} has exited"
        if recorded_start is not None and start != recorded_start:
            return f"pid {pid} is now a different process (its start time differs)"
    return None


@dataclass(frozen=True)
class LockInfo:
    """Who holds the deploy lock, and whether it is stale. An unreadable lock file has
    ``readable=False`` and only ``path`` and its modification time are real."""

    path: str
    started_at: str
    started_ts: float
    pid: int = 0
    host: str = "?"
    command: str = "?"
    deployment_id: str | None = None
    kctl_version: str = "?"
    #: /proc start time of ``pid`` when the lock was taken; None off Linux
    pid_start: int | None = None
    #: random per acquisition; tells this holder's lock from a later one
    token: str = ""
    #: True when it was taken on this host
    local: bool = True
    #: True when its holder is certainly gone (only ever for a local lock)
    stale: bool = False
    stale_reason: str | None = None
    readable: bool = True

    def age_s(self, now: float) -> float:
        return now - self.started_ts

    def describe(self, now: float) -> str:
        """``pid 4242 on node-1 running `kctl deploy x.yaml` (deployment d-...), for 3m12s``"""
        if not self.readable:
            return f"an unreadable lock file {self.path}, written {format_age(self.age_s(now))} ago"
        dep = f" (deployment {self.deployment_id})" if self.deployment_id else ""
        return (
            f"pid {self.pid} on {self.host} running `{self.command}`{dep}, "
            f"for {format_age(self.age_s(now))}"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class HeldLock:
    """What :meth:`DeployLock.acquire` yields."""

    lock: DeployLock
    info: LockInfo
    #: set when a stale lock was taken over: the caller prints it
    takeover_warning: str | None = None

    def set_deployment_id(self, deployment_id: str) -> HeldLock:
        """Record the deployment id once it is known (the lock is taken before the
        deployment is created); the file is replaced atomically."""
        info = self.lock._rewrite(self.info, deployment_id)
        return replace(self, info=info)


class DeployLock:
    """The deploy lock of one state directory."""

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        *,
        clock: Clock = time.time,
        host: str | None = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / LOCK_NAME
        self.clock = clock
        self.host = host or socket.gethostname()
        #: the takeover warning of the last acquire, if any
        self.last_warning: str | None = None

    # -- reading --------------------------------------------------------------------

    def inspect(self) -> LockInfo | None:
        """The current lock, None when free. Creates nothing."""
        try:
            raw = self.path.read_bytes()
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot read the deploy lock ({exc.strerror})") from exc
        try:
            data = json.loads(raw)
            info = LockInfo(
                path=str(self.path),
                started_at=str(data["started_at"]),
                started_ts=float(data["started_ts"]),
                pid=int(data["pid"]),
                host=str(data["host"]),
                command=str(data["command"]),
                deployment_id=_optional(str, data.get("deployment_id")),
                kctl_version=str(data.get("kctl_version", "?")),
                pid_start=_optional(int, data.get("pid_start")),
                token=str(data["token"]),
            )
        except (ValueError, KeyError, TypeError):
            return LockInfo(str(self.path), _iso_utc(mtime), mtime, local=False, readable=False)
        if info.host != self.host:
            return replace(info, local=False)
        why = _why_dead(info.pid, info.pid_start)
        return replace(info, stale=why is not None, stale_reason=why)

    # -- acquiring ------------------------------------------------------------------

    @contextmanager
    def acquire(self, command: str, deployment_id: str | None = None) -> Iterator[HeldLock]:
        """Hold the deploy lock for the ``with`` block; released when the block ends,
        also by an exception or KeyboardInterrupt. ``command`` is the command line as the
        user typed it (``kctl deploy profiles/x.yaml``). Raises :class:`LockHeld` when a
        live kctl, another host's kctl, or an unreadable file holds it; takes over a stale
        lock of this host and reports it in ``HeldLock.takeover_warning``."""
        try:
            held = self._acquire(command, deployment_id)
        except OSError as exc:
            raise StoreError(
                f"{self.path}: cannot write the deploy lock ({exc.strerror or exc})",
                hint="pass a writable --state-dir, or fix the directory's permissions",
            ) from exc
        try:
            yield held
        finally:
            self._release_token(held.info.token)

    def _acquire(self, command: str, deployment_id: str | None) -> HeldLock:
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"{self.state_dir}: cannot create the state directory ({exc.strerror})",
                hint="pass a writable --state-dir",
            ) from exc
        now = float(self.clock())
        pid = os.getpid()
        info = LockInfo(
            path=str(self.path),
            pid=pid,
            host=self.host,
            started_at=_iso_utc(now),
            started_ts=now,
            command=command,
            deployment_id=deployment_id,
            kctl_version=__version__,
            pid_start=process_start_ticks(pid),
            token=secrets.token_hex(8),
        )
        self.last_warning = None
        for _ in range(5):
            if self._create(info):
                return HeldLock(self, info)
            existing = self.inspect()
            if existing is None:
                continue  # released between our attempt and the read
            if not existing.stale:
                raise self._held_error(existing, now)
            with self._guard():
                current = self.inspect()
                # someone else may have replaced it since we looked
                took = current is not None and current.token == existing.token and current.stale
                if took:
                    self.path.unlink(missing_ok=True)
                    took = self._create(info)
            if took:
                warning = (
                    f"took over a stale deploy lock: {existing.stale_reason}; it was held by "
                    f"`{existing.command}`"
                    + (f" (deployment {existing.deployment_id})" if existing.deployment_id else "")
                    + f" since {existing.started_at}. That kctl did not finish: "
                    "run `kctl status` to check for an interrupted deploy"
                )
                self.last_warning = warning
                return HeldLock(self, info, takeover_warning=warning)
        raise LockHeld(
            f"could not take the deploy lock {self.path}: it kept changing hands",
            hint="another kctl is starting at the same time; try again",
        )

    def _held_error(self, existing: LockInfo, now: float) -> LockHeld:
        if not existing.readable:
            return LockHeld(
                f"the deploy lock {self.path} is unreadable",
                hint="if no kctl is running, remove it with `kctl lock release --force`",
            )
        message = f"the deploy lock is held by another kctl: {existing.describe(now)}"
        if existing.local:
            hint = (
                "wait for it to finish, or if you are sure it is not running: "
                "kctl lock release --force"
            )
        else:
            hint = (
                "it runs on another host, so kctl never breaks it itself; wait for it, "
                "or if you are sure it is gone: kctl lock release --force"
            )
        return LockHeld(message, hint=hint)

    @staticmethod
    def _write_new(path: Path, info: LockInfo) -> None:
        """Create ``path`` exclusively with the whole JSON, fsynced; FileExistsError if
        it exists."""
        fields = ("pid", "host", "started_at", "started_ts", "command", "deployment_id")
        data = {k: getattr(info, k) for k in (*fields, "kctl_version", "pid_start", "token")}
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write((json.dumps(data, indent=2) + "\n").encode())
            f.flush()
            os.fsync(f.fileno())

    def _write_temp(self, info: LockInfo) -> Path:
        tmp = self.state_dir / f".lock.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        self._write_new(tmp, info)
        return tmp

    def _create(self, info: LockInfo) -> bool:
        """Atomically create the lock file with complete content; False if it exists."""
        tmp = self._write_temp(info)
        try:
            os.link(tmp, self.path)
        except FileExistsError:
            return False
        except OSError as exc:
            if exc.errno not in _NO_LINK:
                raise
            return self._create_in_place(info)
        finally:
            tmp.unlink(missing_ok=True)
        self._sync_dir()
        return True

    def _create_in_place(self, info: LockInfo) -> bool:
        # Without hard links: O_EXCL on the lock itself. A reader may briefly see it
        # empty; it then reports it unreadable rather than breaking it.
        try:
            self._write_new(self.path, info)
        except FileExistsError:
            return False
        self._sync_dir()
        return True

    def _rewrite(self, info: LockInfo, deployment_id: str) -> LockInfo:
        new = replace(info, deployment_id=deployment_id)
        with self._guard():
            current = self.inspect()
            if current is None or current.token != info.token:
                raise LockHeld(
                    f"the deploy lock {self.path} is no longer held by this kctl",
                    hint="someone released it with --force; stop and check `kctl status`",
                )
            tmp = self._write_temp(new)
            try:
                os.replace(tmp, self.path)
            finally:
                tmp.unlink(missing_ok=True)
        self._sync_dir()
        return new

    def _sync_dir(self) -> None:
        try:
            fd = os.open(self.state_dir, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass  # some filesystems refuse fsync on a directory; the link itself is atomic
        finally:
            os.close(fd)

    @contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            import fcntl
        except ImportError:  # not POSIX: no guard, the link/O_EXCL create still protects
            yield
            return
        fd = os.open(self.state_dir / GUARD_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing drops the flock

    # -- releasing ------------------------------------------------------------------

    def _release_token(self, token: str) -> None:
        with self._guard():
            current = self.inspect()
            if current is not None and current.token == token:
                self.path.unlink(missing_ok=True)

    def release(self, force: bool = False) -> LockInfo | None:
        """Remove the lock (``kctl lock release``) and return what it was; None when
        there was none. Without ``force`` only a stale lock, or this process's own, is
        removed: a live lock of this host, another host's lock (kctl cannot tell
        whether it lives) and an unreadable one are refused with :class:`LockHeld`."""
        info = self.inspect()
        if info is None:
            return None
        now = float(self.clock())
        own = info.local and info.pid == os.getpid()
        if not force and not (info.stale or own):
            if not info.readable:
                why = f"the deploy lock {self.path} is unreadable"
            elif info.local:
                why = f"refusing to release a live deploy lock: {info.describe(now)}"
            else:
                why = f"refusing to release another host's deploy lock: {info.describe(now)}"
            raise LockHeld(
                why, hint="if you are sure no kctl is running: kctl lock release --force"
            )
        with self._guard():
            current = self.inspect()
            if current is None:
                return None
            if current.token != info.token:
                raise LockHeld(
                    f"the deploy lock {self.path} changed hands while releasing it",
                    hint="inspect it again with `kctl lock show`",
                )
            self.path.unlink(missing_ok=True)
        return info
