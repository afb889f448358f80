"""The one way a command changes the host: :func:`changing_host`.

It takes the deploy lock (warning when it takes over a stale one), opens the store, and
reconciles interrupted transactions with what runs; :meth:`HostChange.transaction` then
opens the journal transaction each step of the command is recorded in. ``deploy``,
``rollback``, ``bench`` and ``stop`` all run inside it.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kctl.controller.recover import reconcile
from kctl.controller.transaction import Transaction

if TYPE_CHECKING:
    from kctl.controller.context import Context
    from kctl.runtime.base import Runtime
    from kctl.store import Store


@dataclass
class HostChange:
    """A command holding the lock, with its store open."""

    ctx: Context
    store: Store
    held: Any
    warnings: list[str] = field(default_factory=list)

    def warn(self, message: str) -> None:
        self.ctx.reporter.warn(message)
        self.warnings.append(message)

    def reconcile(self, runtime: Runtime, resolver: str) -> None:
        """Close transactions a killed kctl left open against what really runs."""
        for note in reconcile(self.ctx, self.store, runtime, resolver=resolver):
            self.warn(note)

    def transaction(self, txn_id: str) -> Transaction:
        """The journal transaction ``txn_id`` (a deployment id, or a fresh id from
        :func:`new_txn_id` for a command that records no deployment); the lock names it."""
        if self.held is not None and hasattr(self.held, "set_deployment_id"):
            self.held = self.held.set_deployment_id(txn_id)
        return Transaction(self.ctx, self.store, txn_id)


def new_txn_id(prefix: str) -> str:
    """An id for a journal transaction that has no deployment record (``kctl stop``)."""
    return f"{prefix}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(2)}"


@contextlib.contextmanager
def changing_host(
    ctx: Context, command: str, deployment_id: str | None = None, *, store: Store | None = None
) -> Iterator[HostChange]:
    """Lock, warn on a takeover, open the store (unless given); closes what it opened."""
    from kctl.lock import DeployLock

    own = store is None
    opened = ctx.open_store() if store is None else store
    try:
        with DeployLock(ctx.state_dir).acquire(command, deployment_id) as held:
            change = HostChange(ctx, opened, held)
            if held.takeover_warning:
                change.warn(held.takeover_warning)
            yield change
    finally:
        if own:
            opened.close()
