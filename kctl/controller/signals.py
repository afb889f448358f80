"""SIGINT/SIGTERM during a transaction become exceptions at the point the main thread is
at, so every wait and request unwinds through the transaction's revert path.

The first signal raises :class:`~kctl.errors.Interrupted`. While the revert runs, a
second signal raises :class:`RevertAborted`: the user insisted, so kctl stops reverting,
records the abort and leaves the journal open for ``kctl rollback``.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

from kctl.errors import Interrupted


class RevertAborted(Exception):
    """A second interrupt arrived while the baseline was being restored."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(f"revert aborted by a second {signal_name}")
        self.signal_name = signal_name


class InterruptGuard:
    """Context manager installing the handlers (main thread only; elsewhere it is inert)."""

    _SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.reverting = False
        self.received: list[str] = []
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> InterruptGuard:
        if threading.current_thread() is threading.main_thread():
            for sig in self._SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        self.received.append(name)
        if self.reverting:
            raise RevertAborted(name)
        raise Interrupted(name)
