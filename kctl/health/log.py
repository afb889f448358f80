"""Reading a serving process's log while it starts: fatal lines (:data:`FATAL_PATTERNS`
plus the profile's own), a traceback reported by the exception it ends with, SGLang's
readiness line, and the kdtree kernel's activation contract (``kdtree-verify: active`` /
``declined``), incrementally and from the runtime's last start banner on."""

from __future__ import annotations

import re
from collections import deque

from kctl.errors import HealthFailed, KctlError
from kctl.profile.model import VerifyKernel
from kctl.runtime.base import Instance, Runtime

#: log lines that end the wait at once: the server cannot recover from these
FATAL_PATTERNS: tuple[str, ...] = (
    r"CUDA out of memory",
    r"OutOfMemoryError",
    r"no kernel image is available",
    r"NCCL error",
    r"Traceback \(most recent call last\):",
)
#: the start of a Python traceback: the exception it ends with says more than this line
TRACEBACK = re.compile(r"Traceback \(most recent call last\):")
#: the kernel activation contract (issue 5): one line each, anywhere in a log line
KERNEL_ACTIVE = re.compile(r"kdtree-verify: active\b")
KERNEL_DECLINED = re.compile(r"kdtree-verify: declined\b")
#: lines a runtime writes into the log itself (the local runtime's start banner quotes the
#: whole command line, which must not be mistaken for the server's output)
RUNTIME_LINE_PREFIX = "--- kctl:"
#: the line a runtime writes before each start: a log appended to by several starts of one
#: deployment is read from its last one
RUNTIME_START_PREFIX = RUNTIME_LINE_PREFIX + " starting "
#: SGLang's readiness line, recorded in the report when seen
READY_LINE = "The server is fired up and ready to roll!"
#: how many log lines a HealthFailed carries
LOG_TAIL_LINES = 30
#: how far back the tail looks for the server's own lines among kctl's probes
LOG_TAIL_SCAN = 3000
#: an access-log line (uvicorn's format, as SGLang writes it) of one of kctl's own probes:
#: left out of the tail, which must show what the server said, not how often it was asked
PROBE_LINE = re.compile(
    r'"(?:GET|HEAD) /(?:health|health_generate|get_model_info|model_info|get_server_info|'
    r'server_info|v1/models)(?:\?[^" ]*)? HTTP/[\d.]+" \d{3}'
)


def server_lines(text: str, keep: int = LOG_TAIL_LINES) -> str:
    """The last ``keep`` lines of a log without the access lines of kctl's probes; a
    first line says how many probe lines were left out, when any were."""
    lines = text.rstrip("\n").split("\n") if text.strip() else []
    own = [line for line in lines if not PROBE_LINE.search(line)]
    dropped = len(lines) - len(own)
    out = own[-keep:]
    if dropped:
        out.insert(0, f"({dropped} access lines of kctl's health probes left out)")
    return "\n".join(out)


def _last_start(lines: list[str]) -> int:
    """The index of the runtime's last start banner in ``lines`` (0 when there is none)."""
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith(RUNTIME_START_PREFIX):
            return i
    return 0


class LogWatch:
    """Scans a runtime's log incrementally for fatal lines and the kernel contract."""

    def __init__(
        self,
        runtime: Runtime,
        instance: Instance,
        extra_patterns: tuple[str, ...],
        verify_kernel: VerifyKernel,
    ) -> None:
        self.runtime = runtime
        self.instance = instance
        self.fatal = re.compile("|".join(f"(?:{p})" for p in (*FATAL_PATTERNS, *extra_patterns)))
        self.verify_kernel = verify_kernel
        #: complete lines already scanned
        self.scanned = 0
        self.kernel_line: str | None = None
        self.ready = False
        self.recent: deque[str] = deque(maxlen=LOG_TAIL_SCAN)
        #: a traceback's first line, until the exception line that ends it is logged
        self.traceback: str | None = None

    def tail(self) -> str:
        try:
            return server_lines(self.runtime.logs(self.instance, tail=LOG_TAIL_SCAN))
        except KctlError:
            return server_lines("\n".join(self.recent))

    def scan(self, phase: str, *, final: bool = False) -> None:
        """Scan lines logged since the last scan. A trailing line without its newline is
        left for the next scan (it may be half written) unless ``final``."""
        lines = self.runtime.logs(self.instance).split("\n")
        if lines and lines[-1] == "":
            lines.pop()
            complete = len(lines)
        else:
            complete = len(lines) if final else max(len(lines) - 1, 0)
        if complete < self.scanned:  # the log was truncated or rotated: start over
            self.scanned = 0
        if self.scanned == 0:
            # a log that earlier starts appended to: only this start's lines count
            self.scanned = _last_start(lines[:complete])
        pending = self.traceback
        for line in lines[self.scanned : complete]:
            self.recent.append(line)
            self.scanned += 1
            if not line.startswith(RUNTIME_LINE_PREFIX):
                self._check(line.rstrip("\r"), phase)
        # a traceback whose exception line never came (the process ended, or one more scan
        # went by) is reported by its first line
        if self.traceback is not None and (final or pending is not None):
            line = self.traceback
            raise self._fail(f"fatal log line during {phase}: {line.strip()}", phase, line)

    def _fail(self, message: str, phase: str, line: str, hint: str | None = None) -> HealthFailed:
        return HealthFailed(
            message, phase=phase, matched_line=line, log_tail=self.tail(), hint=hint
        )

    def _check(self, line: str, phase: str) -> None:
        if self.traceback is not None and line[:1] not in (" ", "\t", ""):
            # the first unindented line after a traceback is its exception: report that
            raise self._fail(f"fatal log line during {phase}: {line.strip()}", phase, line)
        if TRACEBACK.search(line):
            self.traceback = line
            return
        if self.fatal.search(line):
            raise self._fail(f"fatal log line during {phase}: {line.strip()}", phase, line)
        if READY_LINE in line:
            self.ready = True
        if KERNEL_DECLINED.search(line):
            self.kernel_line = line.strip()
            if self.verify_kernel == "kdtree":
                raise self._fail(
                    f"the kdtree verify kernel declined to activate: {line.strip()}",
                    phase,
                    line,
                    hint="the profile sets server.verify_kernel: kdtree; the line says why "
                    "(SGLang version, attention backend, KV cache dtype ...)",
                )
        elif KERNEL_ACTIVE.search(line):
            self.kernel_line = line.strip()
            if self.verify_kernel == "none":
                raise self._fail(
                    "the kdtree verify kernel is active but the profile sets "
                    f"server.verify_kernel: none: {line.strip()}",
                    phase,
                    line,
                    hint="remove KDTREE_VERIFY from server.env, or set server.verify_kernel: kdtree",
                )
