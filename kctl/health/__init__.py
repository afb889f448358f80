"""Waiting for a serving process to become healthy, and failing fast when it will not.

:func:`wait_healthy` walks the phases in order, each retried with backoff (tenacity,
with an injected sleep) under one overall deadline::

    process   the runtime reports the process running
    port      a TCP connect to host:port succeeds (SGLang keeps it closed while loading)
    health    GET /health answers 200 (503 until SGLang's own warm-up has passed)
    generate  a real generation answers (POST /generate, 4 greedy tokens), because a
              server can be "up" yet unable to serve
    kernel    only with verify_kernel "kdtree": the kernel's activation line was logged

Before every attempt it checks the process and scans the new log lines. It stops at once,
raising :class:`~kctl.errors.HealthFailed` with the matched line and the last log lines,
when the process exited (or was OOM-killed, or restarted), when a line matches a fatal
pattern (:data:`FATAL_PATTERNS` plus the profile's ``health.fatal_patterns``), or when the
kernel activation contract is broken: ``verify_kernel: kdtree`` fails on a
``kdtree-verify: declined`` line, ``verify_kernel: none`` fails on a
``kdtree-verify: active`` line. Only the :class:`~kctl.runtime.base.Runtime` protocol is
used, so local processes and docker containers are watched the same way.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kctl.errors import HealthFailed, KctlError, ServerBadStatus, ServerError
from kctl.health.log import (
    FATAL_PATTERNS,
    KERNEL_ACTIVE,
    KERNEL_DECLINED,
    LOG_TAIL_LINES,
    READY_LINE,
    RUNTIME_LINE_PREFIX,
    RUNTIME_START_PREFIX,
    TRACEBACK,
    LogWatch,
)
from kctl.health.server_phase import server_phase
from kctl.profile.model import HealthSpec, VerifyKernel
from kctl.runtime.base import Instance, Runtime
from kctl.sglang.client import SGLangClient, short

__all__ = [
    "FATAL_PATTERNS",
    "KERNEL_ACTIVE",
    "KERNEL_DECLINED",
    "LOG_TAIL_LINES",
    "READY_LINE",
    "RUNTIME_LINE_PREFIX",
    "RUNTIME_START_PREFIX",
    "TRACEBACK",
    "HealthProgress",
    "HealthReport",
    "wait_healthy",
]

#: the prompt of the generation probe: a few ordinary ids, valid in any real vocabulary
GENERATION_PROBE_IDS = (1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000)
GENERATION_PROBE_TOKENS = 4
#: a server that is up but answers this many HTTP 5xx errors in a row (other than 503, which
#: SGLang answers while it warms up) is failing, not starting: the wait stops there
SERVER_ERRORS_MAX = 5
#: after a successful generation, how long the activation line may still take to show up
#: in the log (the runtime's log capture can lag the process a little)
KERNEL_LINE_GRACE_S = 5.0

_STARTING = re.compile(r"\b(created|starting)\b")

Clock = Callable[[], float]
Sleep = Callable[[float], None]


@dataclass(frozen=True)
class HealthProgress:
    """A progress event: the phase being tried, elapsed and total budget, and why the
    previous attempt did not pass (``detail``)."""

    phase: str
    elapsed_s: float
    deadline_s: float
    attempt: int
    detail: str = ""
    #: what the server's own log says it is doing ("loading weights" ...; see
    #: :mod:`kctl.health.server_phase`), "" before it says
    log_phase: str = ""

    def summary(self, unit: str = "s") -> str:
        """The phase, time spent of the deadline (in ``unit``) and the try, without why
        the previous try missed."""
        return (
            f"{self.phase} ({self.elapsed_s:.0f}/{self.deadline_s:.0f} {unit}, try {self.attempt})"
        )

    def __str__(self) -> str:
        text = self.summary()
        return f"{text}: {self.detail}" if self.detail else text


@dataclass(frozen=True)
class PhaseTiming:
    phase: str
    seconds: float
    attempts: int


@dataclass(frozen=True)
class HealthReport:
    """How the server became healthy."""

    phases: tuple[PhaseTiming, ...]
    total_s: float
    #: the kernel activation (or decline) line, when one was logged
    kernel_line: str | None = None
    ready_line_seen: bool = False

    def timings(self) -> tuple[tuple[str, float], ...]:
        """(name, seconds) pairs for a verdict's timings: ``health.<phase>`` and ``health``."""
        return (*((f"health.{p.phase}", p.seconds) for p in self.phases), ("health", self.total_s))

    def to_dict(self) -> dict[str, Any]:
        return {
            "phases": [[p.phase, p.seconds, p.attempts] for p in self.phases],
            "total_s": self.total_s,
            "kernel_line": self.kernel_line,
            "ready_line_seen": self.ready_line_seen,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HealthReport:
        return cls(
            phases=tuple(PhaseTiming(str(p), float(s), int(n)) for p, s, n in d["phases"]),
            total_s=float(d["total_s"]),
            kernel_line=d.get("kernel_line"),
            ready_line_seen=bool(d.get("ready_line_seen", False)),
        )


class _NotYet(KctlError):
    """An attempt did not pass; retried until the deadline."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class _ServerFailing(_NotYet):
    """An attempt got an HTTP error that a starting server does not answer (5xx but 503)."""

    def __init__(self, exc: ServerBadStatus) -> None:
        super().__init__(exc.message)
        self.status = exc.status
        self.body = exc.body


def _not_yet(exc: ServerError) -> _NotYet:
    if isinstance(exc, ServerBadStatus) and exc.status >= 500 and exc.status != 503:
        return _ServerFailing(exc)
    return _NotYet(exc.message)


def _probe_host(host: str) -> str:
    """Where to connect for a server bound to ``host``: a wildcard bind is probed on loopback."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def _port_open(host: str, port: int, timeout_s: float) -> None:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        raise _NotYet(f"port {port} not open ({exc.strerror or exc})") from None


def _health_ok(client: SGLangClient, timeout_s: float) -> None:
    try:
        client.health(timeout_s)
    except ServerError as exc:
        raise _not_yet(exc) from None


def _generation_ok(client: SGLangClient, timeout_s: float) -> None:
    payload = {
        "input_ids": list(GENERATION_PROBE_IDS),
        "sampling_params": {"max_new_tokens": GENERATION_PROBE_TOKENS, "temperature": 0.0},
    }
    try:
        obj = client.generate(payload, timeout_s)
    except ServerError as exc:
        raise _not_yet(exc) from None
    meta = obj.get("meta_info") or {}
    if not obj.get("output_ids") and not meta.get("completion_tokens"):
        raise _NotYet(f"POST /generate: no tokens generated: {short(json.dumps(obj))}")


def wait_healthy(
    runtime: Runtime,
    instance: Instance,
    profile_health: HealthSpec,
    *,
    host: str,
    port: int,
    verify_kernel: VerifyKernel,
    api_key: str | None = None,
    clock: Clock = time.monotonic,
    sleep: Sleep = time.sleep,
    progress: Callable[[HealthProgress], None] | None = None,
) -> HealthReport:
    """Wait until the server of ``instance`` serves, under ``profile_health.deadline_s``.

    Raises :class:`~kctl.errors.HealthFailed` (``phase``, ``matched_line``, ``log_tail``)
    at once when the process exits, a fatal line is logged or the kernel activation
    contract is broken, or when the deadline passes (naming the phase it was stuck in).
    ``api_key``: the server's API key, sent with every request.
    """
    spec = profile_health
    wait = _Wait(runtime, instance, spec, verify_kernel, clock, sleep, progress)
    client = SGLangClient(_probe_host(host), port, api_key=api_key)

    def kernel_logged(_timeout: float) -> None:
        if wait.watch.kernel_line is None:
            raise _NotYet("no kdtree-verify line in the log yet")

    phases: list[tuple[str, Callable[[float], None]]] = [
        ("process", lambda _t: None),  # check_process raises _NotYet while it is not running
        ("port", lambda t: _port_open(client.host, port, t)),
        ("health", lambda t: _health_ok(client, t)),
    ]
    if spec.require_generation:
        phases.append(("generate", lambda t: _generation_ok(client, t)))
    timings = [wait.phase(name, probe, wait.deadline) for name, probe in phases]
    if verify_kernel == "kdtree":
        grace_end = min(wait.deadline, clock() + KERNEL_LINE_GRACE_S)
        timings.append(wait.phase("kernel", kernel_logged, max(grace_end, clock())))
    else:
        with contextlib.suppress(_NotYet):
            wait.check_process("generate" if spec.require_generation else "health")
    return HealthReport(
        phases=tuple(timings),
        total_s=clock() - wait.start,
        kernel_line=wait.watch.kernel_line,
        ready_line_seen=wait.watch.ready,
    )


class _Wait:
    """One wait for health: the process and log checks made before every attempt, and
    the phases, each retried with backoff (tenacity, injected clock and sleep)."""

    def __init__(
        self,
        runtime: Runtime,
        instance: Instance,
        spec: HealthSpec,
        verify_kernel: VerifyKernel,
        clock: Clock,
        sleep: Sleep,
        progress: Callable[[HealthProgress], None] | None,
    ) -> None:
        self.runtime = runtime
        self.instance = instance
        self.spec = spec
        self.clock = clock
        self.sleep = sleep
        self.progress = progress
        self.start = clock()
        self.deadline = self.start + spec.deadline_s
        self.poll = max(spec.poll_interval_s, 0.01)
        self.watch = LogWatch(runtime, instance, spec.fatal_patterns, verify_kernel)
        #: the restart count seen first; a later increase is a crash
        self.restarts: int | None = None
        #: HTTP errors of a failing server in a row (see SERVER_ERRORS_MAX)
        self.server_errors = 0
        #: the last phase the server's log named (kept when its line leaves the recent lines)
        self.log_phase = ""

    def check_process(self, phase: str) -> None:
        state = self.runtime.state(self.instance)
        # scan the log first: a crash's own fatal line explains it better than its exit code
        self.watch.scan(phase, final=not state.running)
        if self.restarts is None:
            self.restarts = state.restart_count
        if state.running:
            if state.restart_count > self.restarts:
                raise HealthFailed(
                    f"the server was restarted by the runtime during {phase} "
                    f"(restart count {state.restart_count}): it crashed",
                    phase=phase,
                    log_tail=self.watch.tail(),
                )
            return
        # a container that is created but not yet started is worth waiting for; anything
        # else that is not running (exited, killed, gone, restarting) is not
        if phase == "process" and not state.oom_killed and _STARTING.search(state.detail):
            raise _NotYet(f"not running yet ({state.detail})")
        what = "was killed for running out of memory" if state.oom_killed else "exited"
        detail = f" ({state.detail})" if state.detail else ""
        raise HealthFailed(
            f"the server process {what} during {phase}{detail}",
            phase=phase,
            log_tail=self.watch.tail(),
            hint="the log tail below shows why; `kctl logs` shows all of it",
        )

    def phase(self, phase: str, probe: Callable[[float], None], until: float) -> PhaseTiming:
        """Retry ``probe`` until it passes or ``until``; HealthFailed when it never did."""
        from tenacity import RetryCallState, Retrying, retry_if_exception_type

        t0 = self.clock()
        tries = [0]
        last = [""]

        def attempt() -> None:
            tries[0] += 1
            if self.progress is not None:
                elapsed = self.clock() - self.start
                self.log_phase = server_phase(self.watch.recent) or self.log_phase
                self.progress(
                    HealthProgress(
                        phase, elapsed, self.spec.deadline_s, tries[0], last[0], self.log_phase
                    )
                )
            self.check_process(phase)
            remaining = max(until - self.clock(), 0.01)
            try:
                probe(min(self.spec.request_timeout_s, remaining))
            except _NotYet as exc:
                last[0] = exc.detail
                self.count_error(phase, exc)
                raise
            self.server_errors = 0

        def wait(rs: RetryCallState) -> float:
            # backoff from poll/8 doubling to poll, never sleeping past the deadline
            backoff = min(self.poll, self.poll / 8 * 2.0 ** (rs.attempt_number - 1))
            return max(min(backoff, until - self.clock()), 0.0)

        retrying = Retrying(
            retry=retry_if_exception_type(_NotYet),
            stop=lambda rs: self.clock() >= until,
            wait=wait,
            sleep=self.sleep,
            reraise=True,
        )
        try:
            retrying(attempt)
        except _NotYet as exc:
            raise self._stuck(phase, exc.detail) from None
        return PhaseTiming(phase, self.clock() - t0, tries[0])

    def count_error(self, phase: str, exc: _NotYet) -> None:
        """Count a failing server's answers; HealthFailed once there were too many in a row."""
        if not isinstance(exc, _ServerFailing):
            self.server_errors = 0
            return
        self.server_errors += 1
        if self.server_errors < SERVER_ERRORS_MAX:
            return
        raise HealthFailed(
            f"the server is up but failing: {self.server_errors} HTTP {exc.status} answers "
            f"in a row during {phase}: {exc.detail}",
            phase=phase,
            log_tail=self.watch.tail(),
            hint="the answer's body above and the log tail below say why; `kctl logs` shows all",
        )

    def _stuck(self, phase: str, detail: str) -> HealthFailed:
        if phase == "kernel":
            return HealthFailed(
                "the server serves but never logged the kdtree kernel activation line "
                "(`kdtree-verify: active ...`) although the profile sets "
                "server.verify_kernel: kdtree",
                phase=phase,
                log_tail=self.watch.tail(),
                hint="is KDTREE_VERIFY=1 in server.env and the kernel package installed in "
                "the image? `kctl logs` shows the startup log",
            )
        return HealthFailed(
            f"not healthy after {self.spec.deadline_s:g} s: stuck in phase '{phase}' ({detail})",
            phase=phase,
            log_tail=self.watch.tail(),
            hint="a slow model load needs a longer health.deadline_s",
        )
