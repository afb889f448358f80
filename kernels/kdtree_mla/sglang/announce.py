"""Prints the activation or decline line, at most once per distinct line in a process.

The line goes to stderr (where SGLang's own logging goes) and is flushed at once, because
kctl's health check reads the log while the server is still loading.
"""

from __future__ import annotations

import sys
import threading
from typing import TextIO

from kdtree_mla.sglang.loglines import format_active, format_declined

_lock = threading.Lock()
_printed: list[str] = []


def active(
    kernel_version: str,
    arch: int,
    sglang_version: str,
    *,
    path: str = "startup-hook",
    stream: TextIO | None = None,
) -> str:
    """Print the activation line (once per process) and return it."""
    return _emit(format_active(kernel_version, arch, sglang_version, path), stream)


def declined(reason: str, sglang_version: str, *, stream: TextIO | None = None) -> str:
    """Print a decline line (once per distinct reason per process) and return it."""
    return _emit(format_declined(reason, sglang_version), stream)


def printed() -> tuple[str, ...]:
    """The lines this process printed so far, oldest first."""
    with _lock:
        return tuple(_printed)


def decided() -> bool:
    """True once this process printed an activation or a decline line."""
    with _lock:
        return bool(_printed)


def reset_for_tests() -> None:
    """Forget what was printed (tests run several decisions in one process)."""
    with _lock:
        _printed.clear()


def _emit(line: str, stream: TextIO | None) -> str:
    with _lock:
        if line in _printed:
            return line
        _printed.append(line)
    out = stream if stream is not None else sys.stderr
    try:
        out.write(line + "\n")
        out.flush()
    except (OSError, ValueError):
        # A closed stderr must not take the server down; the health check will then time out
        # waiting for the line, which names the problem well enough.
        pass
    return line
