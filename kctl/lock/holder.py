"""Who holds the deploy lock: the holder file's record, and how it reads in messages."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from datetime import datetime, timezone


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


def iso_utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, owned by another user
    return pid > 0


@dataclass(frozen=True)
class LockInfo:
    """Who holds the deploy lock, and whether its holder died. An unreadable holder file
    has ``readable=False`` and only ``path`` and its modification time are real."""

    path: str
    started_at: str
    started_ts: float
    pid: int = 0
    host: str = "?"
    command: str = "?"
    deployment_id: str | None = None
    kctl_version: str = "?"
    #: True when it was taken on this host
    local: bool = True
    #: True when its holder died holding it (the flock is free; only for a local lock)
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

    def to_file(self) -> bytes:
        fields = ("pid", "host", "started_at", "started_ts", "command", "deployment_id")
        data = {k: getattr(self, k) for k in (*fields, "kctl_version")}
        return (json.dumps(data, indent=2) + "\n").encode()


def dead(info: LockInfo) -> LockInfo:
    return replace(info, stale=True, stale_reason=f"pid {info.pid} exited without releasing it")


def takeover_warning(previous: LockInfo) -> str:
    dep = f" (deployment {previous.deployment_id})" if previous.deployment_id else ""
    return (
        f"took over a stale deploy lock: {previous.stale_reason}; it was held by "
        f"`{previous.command}`{dep} since {previous.started_at}. That kctl did not finish: "
        "run `kctl status` to check for an interrupted deploy"
    )
