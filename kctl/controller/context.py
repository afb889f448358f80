"""What every command needs: the backend (where servers run, chosen once by the
CLI with :func:`kctl.backend.make_backend`), its state dir, the store, the runtime for a profile, a reporter for
progress, and clocks. Built once by the CLI; tests build it directly."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from kctl.backend import Backend, HostBackend
from kctl.runtime import create

if TYPE_CHECKING:
    from kctl.profile.model import Profile
    from kctl.runtime.base import Runtime
    from kctl.store import Store


class Reporter(Protocol):
    """Where the controller's human-facing output goes (the CLI draws it on stderr)."""

    def event(self, message: str) -> None: ...

    def warn(self, message: str) -> None: ...

    def progress(self, message: str, detail: str = "") -> None:
        """A progress line; ``detail`` is an expected miss (a poll that found the port
        still closed): shown live on a terminal, else only when asked for (--verbose)."""

    def task(
        self,
        key: str,
        description: str,
        *,
        completed: float,
        total: float | None = None,
        unit: str = "",
        status: str = "",
        detail: str = "",
        done: bool = False,
    ) -> None:
        """The progress of one long wait (the model load, a context of the gate, the
        revert): ``key`` names the wait, ``completed`` of ``total`` ``unit`` (None: no
        known end), ``status`` what it does now; ``done`` ends it. A terminal draws it as
        a bar, a pipe gets a plain line now and then."""


class NullReporter:
    def event(self, message: str) -> None:
        pass

    def warn(self, message: str) -> None:
        pass

    def progress(self, message: str, detail: str = "") -> None:
        pass

    def task(
        self,
        key: str,
        description: str,
        *,
        completed: float,
        total: float | None = None,
        unit: str = "",
        status: str = "",
        detail: str = "",
        done: bool = False,
    ) -> None:
        pass


#: the shortest wall-clock sleep between polls under compressed time
MIN_POLL_S = 0.02


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "kctl"


@dataclass
class Context:
    """``state_dir`` is the backend's own directory (see :meth:`Backend.state_dir`)."""

    state_dir: Path
    backend: Backend = field(default_factory=HostBackend)
    reporter: Reporter = field(default_factory=NullReporter)
    clock: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    #: the repository holding the kernel source; None: the one that holds the profile
    repo_root: Path | None = None
    rebuild: bool = False
    #: ``--set FIELD=VALUE`` items, applied to every profile the command loads from a file
    #: (the candidate and its baseline alike)
    overrides: tuple[str, ...] = ()
    _runtimes: dict[str, Runtime] = field(default_factory=dict)

    def gate_clock(self, profile: Profile) -> Callable[[], float]:
        """The clock the gate times requests with, at real-time scale (a backend that
        compresses time has its clock stretched back, so rates, TTFTs and gate timings are
        comparable with figures measured on a host)."""
        return self.scaled_clock(profile)

    def scaled_clock(self, profile: Profile) -> Callable[[], float]:
        """A monotonic clock at real-time scale while ``profile`` runs: deadlines (health)
        and timings (gate) read on it pass as fast as the backend's time does."""
        scale = self.backend.time_scale(profile)
        if scale == 1.0:
            return self.monotonic
        return lambda: self.monotonic() * scale

    def scaled_sleep(self, profile: Profile) -> Callable[[float], None]:
        """A sleep of real-time-scale seconds (the pair of :meth:`scaled_clock`); never
        shorter than :data:`MIN_POLL_S` of wall time for a wait that asked more, so a
        compressed poll interval does not spin."""
        scale = self.backend.time_scale(profile)
        if scale == 1.0:
            return self.sleep
        return lambda s: self.sleep(max(s / scale, min(s, MIN_POLL_S)))

    def open_store(self, *, read_only: bool = False) -> Store:
        from kctl.store import Store

        return Store.open(self.state_dir, read_only=read_only, clock=self.clock)

    def runtime_kind(self, profile: Profile) -> str:
        return self.backend.runtime_kind(profile.runtime.kind)

    def runtime(self, kind: str) -> Runtime:
        """The runtime of that kind, created once per command."""
        if kind not in self._runtimes:
            self._runtimes[kind] = create(kind, self.state_dir)
        return self._runtimes[kind]
