"""Copies a server's output into its log file with the secrets taken out.

SGLang logs its whole ``ServerArgs`` at start (``server_args=ServerArgs(..., api_key=...)``),
so a log written straight from the server would hold the API key. The local runtime
starts this relay beside the server: it reads the server's stdout/stderr from a pipe and
appends each line to the log, every secret value replaced by ``<secret>``. The values come
in the relay's environment (``KCTL_LOG_SCRUB``, a JSON list), which only the owner can
read, never on its command line. It runs in its own session, ignores the signals a stop
sends the server's process group, and ends when the server's end of the pipe closes.

``python -m kctl.runtime.logrelay LOG_PATH`` (stdin: the server's output).
"""

from __future__ import annotations

import json
import os
import signal
import sys

#: the environment variable that carries the values to take out
SCRUB_ENV = "KCTL_LOG_SCRUB"
#: a line longer than this is written in pieces (a value split across two is not found)
MAX_LINE = 1 << 16


def scrub(line: bytes, values: list[bytes]) -> bytes:
    for value in values:
        line = line.replace(value, b"<secret>")
    return line


def main(argv: list[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    values = sorted(
        (v.encode() for v in json.loads(os.environ.pop(SCRUB_ENV, "[]")) if v),
        key=len,
        reverse=True,
    )
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(argv[0], flags)
    source = sys.stdin.buffer
    while True:
        line = source.readline(MAX_LINE)
        if not line:
            break
        os.write(fd, scrub(line, values))
    os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
