"""The :class:`DeployLock` of a state directory: taking, inspecting and releasing it."""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    retry_if_result,
    stop_after_delay,
    wait_fixed,
)

from kctl import __version__
from kctl.errors import LockHeld, StoreError
from kctl.lock.holder import LockInfo, alive, dead, iso_utc, takeover_warning
from kctl.statedir import ensure_dir, open_fd, write_new

LOCK_NAME = "lock"
GUARD_NAME = "lock.guard"
#: how long to keep trying a busy flock: ``inspect`` holds it shared for a moment
BUSY_WAIT_S = 0.5
#: how long to wait for a new holder to write its holder file, for the message
HOLDER_WAIT_S = 2.0

Clock = Callable[[], float]


@dataclass(frozen=True)
class HeldLock:
    """What :meth:`DeployLock.acquire` yields."""

    lock: DeployLock
    info: LockInfo
    #: set when an earlier kctl died holding the lock: the caller prints it
    takeover_warning: str | None = None

    def set_deployment_id(self, deployment_id: str) -> HeldLock:
        """Record the deployment id once it is known (the lock is taken before the
        deployment is created); the holder file is replaced atomically."""
        info = replace(self.info, deployment_id=deployment_id)
        self.lock._write_holder(info)  # only the flock's holder writes the file
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
        self.guard_path = self.state_dir / GUARD_NAME
        self.clock = clock
        self.host = host or socket.gethostname()
        #: the takeover warning of the last acquire, if any
        self.last_warning: str | None = None

    # -- reading --------------------------------------------------------------------

    def _read_holder(self) -> LockInfo | None:
        """The holder file as it is, None when there is none; not checked against the
        flock."""
        try:
            with os.fdopen(open_fd(self.path, os.O_RDONLY), "rb") as fh:  # no symlink
                raw = fh.read()
                mtime = os.fstat(fh.fileno()).st_mtime
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
                deployment_id=str(data["deployment_id"]) if data.get("deployment_id") else None,
                kctl_version=str(data.get("kctl_version", "?")),
            )
        except (ValueError, KeyError, TypeError):
            return LockInfo(str(self.path), iso_utc(mtime), mtime, local=False, readable=False)
        return info if info.host == self.host else replace(info, local=False)

    def _flock_is_held(self) -> bool:
        """Whether some process holds the flock; takes it shared for an instant to see."""
        try:
            fd = open_fd(self.guard_path, os.O_RDONLY)  # a symlink: UnsafeState
        except FileNotFoundError:
            return False
        except OSError:
            return True  # cannot tell: never call a holder dead on a guess
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing drops the shared flock
        return False

    def inspect(self) -> LockInfo | None:
        """The current holder, None when the lock is free. A holder file whose holder died
        comes back with ``stale=True``. Creates nothing."""
        info = self._read_holder()
        if info is None or not info.local or self._flock_is_held():
            return info
        return dead(info)

    # -- acquiring ------------------------------------------------------------------

    @contextmanager
    def acquire(self, command: str, deployment_id: str | None = None) -> Iterator[HeldLock]:
        """Hold the deploy lock for the ``with`` block; released when the block ends,
        also by an exception or KeyboardInterrupt, and by the kernel when the process
        dies. ``command`` is the command line as the user typed it (``kctl deploy
        profiles/x.yaml``). Raises :class:`LockHeld` when another kctl holds it, or a
        holder file of another host or an unreadable one is in the way; when an earlier
        kctl died holding it, says so in ``HeldLock.takeover_warning``."""
        fd = self._open_guard()
        try:
            held = self._take(fd, command, deployment_id)
        except BaseException:
            os.close(fd)
            raise
        try:
            yield held
        finally:
            try:
                self.path.unlink(missing_ok=True)  # no holder file ever outlives the flock
            finally:
                os.close(fd)  # closing drops the flock

    def _open_guard(self) -> int:
        try:
            ensure_dir(self.state_dir)
        except OSError as exc:
            raise StoreError(
                f"{self.state_dir}: cannot create the state directory ({exc.strerror})",
                hint="pass a writable --state-dir",
            ) from exc
        try:
            # 0600, never through a symlink (a planted one would create its target)
            return open_fd(self.guard_path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            raise _unwritable(self.guard_path, exc) from exc

    def _take(self, fd: int, command: str, deployment_id: str | None) -> HeldLock:
        now = float(self.clock())
        self.last_warning = None
        if not _flock(fd, self.guard_path, BUSY_WAIT_S):
            raise self._held_error(self._holder_of_busy_lock(), now)
        previous = self._read_holder()
        if previous is not None and not (previous.readable and previous.local):
            raise self._held_error(previous, now)
        info = LockInfo(
            path=str(self.path),
            pid=os.getpid(),
            host=self.host,
            started_at=iso_utc(now),
            started_ts=now,
            command=command,
            deployment_id=deployment_id,
            kctl_version=__version__,
        )
        self._write_holder(info)
        if previous is None:
            return HeldLock(self, info)
        self.last_warning = takeover_warning(dead(previous))
        return HeldLock(self, info, takeover_warning=self.last_warning)

    def _holder_of_busy_lock(self) -> LockInfo | None:
        """The holder file of a held flock. A new holder writes it right after taking the
        flock: until then it is missing or still the file of a holder that died."""

        def settled(info: LockInfo | None) -> bool:
            return info is not None and not (info.local and info.readable and not alive(info.pid))

        retrying = Retrying(
            stop=stop_after_delay(HOLDER_WAIT_S),
            wait=wait_fixed(0.01),
            retry=retry_if_result(lambda info: not settled(info)),
            retry_error_callback=_last_result,
        )
        holder: LockInfo | None = retrying(self._read_holder)
        return holder

    def _held_error(self, existing: LockInfo | None, now: float) -> LockHeld:
        if existing is None:
            return LockHeld(
                f"the deploy lock {self.guard_path} is held by another kctl that is "
                "just starting (it has not written its holder file yet)",
                hint="wait for it to finish, then try again; `kctl lock show` names it",
            )
        if not existing.readable:
            return LockHeld(
                f"the deploy lock {self.path} is unreadable",
                hint="if no kctl is running, remove it with `kctl lock release --force`",
            )
        message = f"the deploy lock is held by another kctl: {existing.describe(now)}"
        if existing.local:
            hint = (
                "wait for it to finish; the lock is free the moment that process exits "
                f"(if it hangs: kill {existing.pid})"
            )
        else:
            hint = (
                "it runs on another host, so kctl never breaks it itself; wait for it, "
                "or if you are sure it is gone: kctl lock release --force"
            )
        return LockHeld(message, hint=hint)

    # -- the holder file ------------------------------------------------------------

    def _write_holder(self, info: LockInfo) -> None:
        """Replace the holder file atomically: a reader sees the old or the new, whole. It
        is not fsynced: it only serves messages, and no flock survives a power loss."""
        tmp = self.state_dir / f".lock.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            write_new(tmp, info.to_file())  # 0600, O_EXCL
            os.replace(tmp, self.path)  # a symlink there is replaced, not followed
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise _unwritable(self.path, exc) from exc

    # -- releasing ------------------------------------------------------------------

    def release(self, force: bool = False) -> LockInfo | None:
        """Remove the holder file (``kctl lock release``) and return what it said; None
        when there was none. Removed without ``force``: the file of a holder that died,
        or this process's own. With ``force`` also another host's file and an unreadable
        one. A live holder's lock is refused with :class:`LockHeld` either way: its flock
        is the lock, and it is free when that process exits."""
        info = self.inspect()
        if info is None:
            return None
        if info.local and not info.stale and info.pid == os.getpid():
            self.path.unlink(missing_ok=True)
            return info
        now = float(self.clock())
        fd = self._open_guard()
        try:
            if not _flock(fd, self.guard_path, BUSY_WAIT_S):
                live = self._read_holder() or info
                raise LockHeld(
                    f"refusing to release a live deploy lock: {live.describe(now)}",
                    hint="the lock is free the moment that kctl exits; wait for it, or stop "
                    f"it (kill {live.pid})",
                )
            current = self._read_holder()
            if current is None:
                return None
            if not (force or (current.local and current.readable)):
                raise _refused(current, now)
            self.path.unlink(missing_ok=True)
        finally:
            os.close(fd)
        return info


def _last_result(state: RetryCallState) -> Any:
    return None if state.outcome is None else state.outcome.result()


def _refused(info: LockInfo, now: float) -> LockHeld:
    if not info.readable:
        why = f"the deploy lock {info.path} is unreadable"
    else:
        why = f"refusing to release another host's deploy lock: {info.describe(now)}"
    return LockHeld(why, hint="if you are sure no kctl is running: kctl lock release --force")


def _flock(fd: int, path: Path, wait_s: float) -> bool:
    """Take the exclusive flock on ``fd``, trying for ``wait_s``; False when it stays busy."""
    retrying = Retrying(
        stop=stop_after_delay(wait_s),
        wait=wait_fixed(0.01),
        retry=retry_if_exception_type(BlockingIOError),
        reraise=True,
    )
    try:
        retrying(fcntl.flock, fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as exc:  # e.g. ENOLCK: a filesystem without locks
        raise StoreError(
            f"{path}: cannot take the deploy lock ({exc.strerror or exc})",
            hint="put the --state-dir on a local filesystem",
        ) from exc
    return True


def _unwritable(path: Path, exc: OSError) -> StoreError:
    return StoreError(
        f"{path}: cannot write the deploy lock ({exc.strerror or exc})",
        hint="pass a writable --state-dir, or fix the directory's permissions",
    )
