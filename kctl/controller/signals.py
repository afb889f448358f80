"""SIGINT/SIGTERM during a transaction become exceptions at the point the main thread is
at, so every wait and request unwinds through the executor's revert path.

Outside a revert, a signal raises :class:`~kctl.errors.Interrupted`. During a revert it
depends on how many signals the revert tolerates (:meth:`InterruptGuard.begin_revert`):
a revert that a signal started tolerates none, so the next one raises
:class:`~kctl.errors.RevertAborted`: the user insisted, so kctl stops reverting, records
the abort and leaves the journal open for ``kctl rollback``. A revert that a failure
started (a rejected gate, an unhealthy candidate) tolerates one: a service manager's single
SIGTERM lets it finish with the baseline serving, and only a second one aborts it.
A rollback tolerates none.

An exception raised by a signal handler is lost when the signal lands while Python runs a
finalizer (a garbage-collected connection pool closing its sockets, say): Python prints
"Exception ignored in ..." and goes on. So the guard also keeps what it received: a signal
whose :class:`~kctl.errors.Interrupted` never reached the executor is raised again at the
next step boundary (:meth:`InterruptGuard.check`), and a revert that begins after any signal
counts as one a signal started.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from kctl.errors import Interrupted, RevertAborted

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class InterruptGuard:
    """Context manager installing the handlers (main thread only; elsewhere it is inert).
    ``on_deferred`` is told of a signal that a revert tolerates (to say so on stderr)."""

    def __init__(
        self,
        on_deferred: Callable[[str], None] | None = None,
        signals: tuple[signal.Signals, ...] = _SIGNALS,
    ) -> None:
        self.signals = signals
        self.reverting = False
        self.tolerate = 0
        self.received: list[str] = []
        self.on_deferred = on_deferred
        self._previous: dict[int, Any] = {}

    def begin_revert(self, *, tolerate: int) -> None:
        """From now on signals abort the revert, after ``tolerate`` of them; after none when a
        signal already came (its exception may have been lost in a finalizer)."""
        self.reverting = True
        self.tolerate = 0 if self.received else tolerate

    @property
    def pending(self) -> str | None:
        """The signal that interrupted outside a revert, until the revert begins: once its
        Interrupted has reached the executor, a revert has begun (or the command ended)."""
        return self.received[-1] if self.received and not self.reverting else None

    def check(self) -> None:
        """Raise the :class:`Interrupted` of a signal whose exception was lost, if any."""
        if self.pending is not None:
            raise Interrupted(self.pending)

    def __enter__(self) -> InterruptGuard:
        if threading.current_thread() is threading.main_thread():
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        self.received.append(name)
        if not self.reverting:
            raise Interrupted(name)
        if self.tolerate > 0:
            self.tolerate -= 1
            if self.on_deferred is not None:
                self.on_deferred(name)
            return
        raise RevertAborted(name)
