"""Typed errors for kctl. Every exception kctl raises derives from :class:`KctlError` and
carries the process exit code that the CLI returns for it; an error's data are declared
fields, never attributes attached later.

Hierarchy (exit code in brackets)::

    KctlError [1]
    ├── InvalidInput [2]                 the user's input is wrong; nothing was touched
    │   ├── ProfileError [2]             a profile or fleet file failed validation (file, field, fix)
    │   └── UsageError [2]               bad flags or arguments
    ├── CandidateRejected [3]            gate/health failed; the baseline was restored and verified
    │                                    (``result``: the deploy's result, ``log_tail``)
    ├── Degraded [4]                     a revert or rollback failed; the host needs a human
    ├── FleetPaused [4]                  a fleet rollout stopped for a node that went Down
    ├── PreconditionFailed [5]           nothing was changed
    │   ├── LockHeld [5]                 another kctl holds the deploy lock
    │   ├── RuntimeUnavailable [5]       docker/local runtime cannot be reached
    │   ├── PreflightFailed [5]          image archs, port, paths ... checked before any stop
    │   ├── BuildFailed [5]              the serving image did not build
    │   ├── PendingTransaction [5]       an interrupted deploy must be resolved first
    │   ├── SecretUnavailable [5]        a secret reference names no readable value
    │   ├── UnsafeState [5]              the state dir or a file in it is not kctl's alone
    │   └── StoreError [5]               the state store is corrupt, newer, or unwritable
    │       ├── StoreCorrupt [5]
    │       └── DeploymentNotFound [2]   no deployment has the id a user named (also a UsageError)
    ├── HealthFailed [1]                 internal to a deploy: the server never became healthy
    │   └── ServerExited [1]             the server exited after it was healthy (during the gate)
    ├── GateError [1]                    internal to a deploy: the gate could not run
    ├── GateRejected [3]                 internal to a deploy: the verdict says do not promote
    ├── ServerError [1]                  an SGLang server did not answer as asked (kctl.sglang.client)
    │   ├── ServerUnreachable [1]        no connection, reset, or no answer in time
    │   │   └── ServerTimeout [1]
    │   ├── ServerBadStatus [1]          an HTTP status other than 200 (``status``, ``body``)
    │   └── ServerBadBody [1]            a 200 whose body is not what was asked for (``body``)
    ├── Interrupted [130]                SIGINT/SIGTERM during a transaction
    └── RevertAborted [4]                a second signal while the baseline was being restored

``HealthFailed``, ``GateError``, ``GateRejected``, ``ServerError`` and ``Interrupted`` are
caught by the deploy executor, which reverts and re-raises them as :class:`CandidateRejected`
or :class:`Degraded`. They only reach the user from commands that have nothing to revert
(``kctl bench``).
"""

from __future__ import annotations

from typing import Any


class KctlError(Exception):
    """Root of every error kctl raises."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\n  hint: {self.hint}"
        return self.message


class InvalidInput(KctlError):
    exit_code = 2


class ProfileError(InvalidInput):
    """A profile failed validation. ``problems`` holds one line per problem:
    ``<file>: <field.path>: <what is wrong> (got <value>)``."""

    def __init__(self, problems: list[str], *, noun: str = "profile") -> None:
        self.problems = list(problems)
        head = problems[0] if len(problems) == 1 else f"{len(problems)} problems in {noun}"
        body = "" if len(problems) == 1 else "\n" + "\n".join(f"  {p}" for p in problems)
        super().__init__(head + body)


class UsageError(InvalidInput):
    pass


class CandidateRejected(KctlError):
    """The candidate failed health or the gate; the baseline runs again, verified.
    ``result`` is the deploy's result model (``--json`` prints its dump); ``log_tail`` the
    candidate's last log lines when its health failed."""

    exit_code = 3

    def __init__(
        self,
        message: str,
        *,
        result: Any = None,
        log_tail: str = "",
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.result = result
        self.log_tail = log_tail


class Degraded(KctlError):
    """A revert or rollback failed. The host is not known to serve; a human must act."""

    exit_code = 4


class FleetPaused(KctlError):
    """A fleet rollout stopped because a node of the fleet went Down: not the candidate's
    fault, so nothing was rolled back; the journal stays open for ``status``/``rollback``."""

    exit_code = 4


class PreconditionFailed(KctlError):
    """Checked before anything changed; nothing was changed."""

    exit_code = 5


class LockHeld(PreconditionFailed):
    pass


class RuntimeUnavailable(PreconditionFailed):
    pass


class PreflightFailed(PreconditionFailed):
    pass


class BuildFailed(PreconditionFailed):
    pass


class PendingTransaction(PreconditionFailed):
    pass


class SecretUnavailable(PreconditionFailed):
    """A secret reference (``<secret:env NAME>``, ``<secret:file PATH>``) names no readable
    value. The message names the reference and the field, never a value."""


class UnsafeState(PreconditionFailed):
    """The state dir, or a path in it, is a symlink, not a regular file, owned or
    writable by another user: kctl refuses it rather than follow it."""


class StoreError(PreconditionFailed):
    pass


class StoreCorrupt(StoreError):
    pass


class DeploymentNotFound(StoreError, UsageError):
    """No deployment has the id (or unique id prefix) a user named."""

    exit_code = 2

    def __init__(self, deployment_id: str, *, ambiguous: bool = False) -> None:
        if ambiguous:
            message = f"deployment id {deployment_id!r} is ambiguous; see `kctl history`"
        else:
            message = f"no deployment {deployment_id}; see `kctl history`"
        super().__init__(message)
        self.deployment_id = deployment_id
        self.ambiguous = ambiguous


class HealthFailed(KctlError):
    """The server did not become healthy. ``matched_line`` is the fatal log line that
    ended the wait early, when there was one; ``log_tail`` the last log lines."""

    def __init__(
        self,
        message: str,
        *,
        phase: str,
        matched_line: str | None = None,
        log_tail: str = "",
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.phase = phase
        self.matched_line = matched_line
        self.log_tail = log_tail


class ServerExited(HealthFailed):
    """A server that had become healthy exited (during the gate or a measurement).
    ``detail`` is how it ended (``killed by signal 9``, ``exited with code 1``)."""

    def __init__(self, deployment_id: str, detail: str, *, phase: str, log_tail: str = "") -> None:
        super().__init__(
            f"the server of {deployment_id} exited during the {phase} ({detail})",
            phase=phase,
            log_tail=log_tail,
            hint="the log tail below shows why; `kctl logs` shows all of it",
        )
        self.deployment_id = deployment_id
        self.detail = detail


class GateError(KctlError):
    pass


class GateRejected(KctlError):
    """The gate's verdict does not allow promotion. ``gate`` is the stored gate result,
    ``table`` its rendering."""

    exit_code = 3

    def __init__(self, verdict: str, reason: str, gate: dict[str, Any], table: str) -> None:
        super().__init__(f"gate {verdict}: {reason}")
        self.verdict = verdict
        self.reason = reason
        self.gate = gate
        self.table = table


class ServerError(KctlError):
    """An SGLang server did not answer a request as asked. ``request`` names it
    (``GET /health``)."""

    def __init__(self, message: str, *, request: str) -> None:
        super().__init__(message)
        self.request = request


class ServerUnreachable(ServerError):
    """No connection, the connection broke, or no answer in time. ``cause`` names the
    underlying error (``ConnectionRefusedError: ...``)."""

    def __init__(self, request: str, cause: str) -> None:
        super().__init__(f"{request}: {cause}", request=request)
        self.cause = cause


class ServerTimeout(ServerUnreachable):
    def __init__(self, request: str, timeout_s: float) -> None:
        super().__init__(request, f"timed out after {timeout_s:g} s")
        self.timeout_s = timeout_s


class ServerBadStatus(ServerError):
    """The server answered with an HTTP status other than 200; ``body`` is its start."""

    def __init__(self, request: str, status: int, body: str) -> None:
        super().__init__(
            f"{request}: HTTP {status}" + (f" {body}" if body else ""), request=request
        )
        self.status = status
        self.body = body


class ServerBadBody(ServerError):
    """The server answered 200 with a body that is not what was asked for."""

    def __init__(self, request: str, problem: str, body: str) -> None:
        text = f"{request}: {problem}" + (f": {body}" if body else "")
        super().__init__(text, request=request)
        self.problem = problem
        self.body = body


class Interrupted(KctlError):
    exit_code = 130

    def __init__(self, signal_name: str) -> None:
        super().__init__(f"interrupted by {signal_name}")
        self.signal_name = signal_name


class RevertAborted(KctlError):
    """A second interrupt arrived while the baseline was being restored."""

    exit_code = 4

    def __init__(self, signal_name: str) -> None:
        super().__init__(f"revert aborted by a second {signal_name}")
        self.signal_name = signal_name
