"""The deploy lock: at most one kctl changes the serving host at a time.

Two files in the state directory:

- ``lock.guard`` is the lock. Its holder keeps an exclusive ``flock`` on it for as long as
  it runs, and the kernel drops that flock when the holder exits in any way (SIGKILL too).
  Whether the lock is held is therefore never guessed from pids: a dead holder's lock is
  simply free.
- ``lock`` is the holder file: JSON about the holder (pid, host, command, start time,
  deployment id, kctl version), written atomically once the flock is held and removed
  when it is let go. It only serves the messages. Finding one while the flock is free
  means the kctl that wrote it died holding the lock: the lock is taken all the same, with
  a warning that the earlier run did not finish (``kctl status`` then shows what it left).

A holder file from another host is never taken over (a state directory on a network
filesystem may not carry that host's flock here), nor an unreadable one: both wait for
``kctl lock release --force``. A live holder cannot be forced out at all: the lock is free
the moment it exits.
"""

from kctl.lock.deploy_lock import GUARD_NAME, LOCK_NAME, DeployLock, HeldLock
from kctl.lock.holder import LockInfo, format_age

__all__ = ["GUARD_NAME", "LOCK_NAME", "DeployLock", "HeldLock", "LockInfo", "format_age"]
