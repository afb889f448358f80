"""Typed errors for kctl. Every error a user can meet derives from :class:`KctlError`
and carries the process exit code that the CLI returns for it.

Hierarchy (exit code in brackets)::

    KctlError [1]
    ├── InvalidInput [2]                 the user's input is wrong; nothing was touched
    │   ├── ProfileError [2]             a profile file failed validation (file, field, fix)
    │   └── UsageError [2]               bad flags or arguments
    ├── CandidateRejected [3]            gate/health failed; the baseline was restored and verified
    ├── Degraded [4]                     a revert or rollback failed; the host needs a human
    ├── PreconditionFailed [5]           nothing was changed
    │   ├── LockHeld [5]                 another kctl holds the deploy lock
    │   ├── RuntimeUnavailable [5]       docker/local runtime cannot be reached
    │   ├── PreflightFailed [5]          image archs, port, paths ... checked before any stop
    │   ├── BuildFailed [5]              the serving image did not build
    │   ├── PendingTransaction [5]       an interrupted deploy must be resolved first
    │   └── StoreError [5]               the state store is corrupt, newer, or unwritable
    │       └── StoreCorrupt [5]
    ├── HealthFailed [1]                 internal to a deploy: the candidate never became healthy
    ├── GateError [1]                    internal to a deploy: the gate could not run
    └── Interrupted [130]                SIGINT/SIGTERM during a transaction

``HealthFailed``, ``GateError`` and ``Interrupted`` are caught by the deploy transaction,
which reverts and re-raises them as :class:`CandidateRejected` or :class:`Degraded`.
They only reach the user from commands that have nothing to revert (``kctl bench``).
"""

from __future__ import annotations


class KctlError(Exception):
    """Root of every error kctl reports to a user."""

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

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        head = problems[0] if len(problems) == 1 else f"{len(problems)} problems in profile"
        body = "" if len(problems) == 1 else "\n" + "\n".join(f"  {p}" for p in problems)
        super().__init__(head + body)


class UsageError(InvalidInput):
    pass


class CandidateRejected(KctlError):
    """The candidate failed health or the gate; the baseline runs again, verified."""

    exit_code = 3


class Degraded(KctlError):
    """A revert or rollback failed. The host is not known to serve; a human must act."""

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


class StoreError(PreconditionFailed):
    pass


class StoreCorrupt(StoreError):
    pass


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


class GateError(KctlError):
    pass


class Interrupted(KctlError):
    exit_code = 130

    def __init__(self, signal_name: str) -> None:
        super().__init__(f"interrupted by {signal_name}")
        self.signal_name = signal_name
