"""Log lines in SGLang's shape (``[YYYY-MM-DD HH:MM:SS TP0] message``), written whole and
flushed one at a time so a log follower never sees half a line."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

#: SGLang prints this once the warm-up generation succeeded (shared contract)
READY_LINE = "The server is fired up and ready to roll!"


class Log:
    """A thread-safe line writer (stderr by default, like SGLang's logging)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def _write(self, line: str) -> None:
        stream = self._stream or sys.stderr
        with self._lock:
            try:
                stream.write(line + "\n")
                stream.flush()
            except (OSError, ValueError):
                # the reader went away (closed pipe): logging must never kill the server
                pass

    @staticmethod
    def _stamp() -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S")

    def scheduler(self, message: str) -> None:
        """A line from the TP0 scheduler process."""
        self._write(f"[{self._stamp()} TP0] {message}")

    def main(self, message: str) -> None:
        """A line from the main (tokenizer/HTTP) process."""
        self._write(f"[{self._stamp()}] {message}")

    def raw(self, line: str) -> None:
        """A line exactly as given (tracebacks, uvicorn lines)."""
        self._write(line)
