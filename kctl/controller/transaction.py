"""The journal-backed transaction every host-changing command runs in.

Each step is written to the store *before* it runs (:meth:`Transaction.step`), so a kctl
killed at any point leaves a record of what it was doing; ``kctl status`` reports it and
``kctl rollback`` / ``kctl deploy`` reconcile it with what actually runs
(:func:`kctl.controller.recover.reconcile`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kctl.controller.context import Context
    from kctl.controller.steps import Step
    from kctl.store import Store


class Transaction:
    """One command's journal: its id is the deployment id (or a stop's own id)."""

    def __init__(self, ctx: Context, store: Store, txn_id: str) -> None:
        self.ctx = ctx
        self.store = store
        self.id = txn_id

    @contextlib.contextmanager
    def step(self, step: Step) -> Iterator[None]:
        """Journal ``step`` (its :meth:`~kctl.controller.steps.Step.to_dict`), run the
        block, and close the step as done, or as failed with the cause."""
        seq = self.store.begin_step(self.id, step.name, step.to_dict())
        try:
            yield
        except BaseException as exc:
            # a failed or interrupted step stays visible in the journal with its cause
            with contextlib.suppress(Exception):
                self.store.finish_step(self.id, seq, state="failed", note=str(exc) or repr(exc))
            raise
        self.store.finish_step(self.id, seq, state="done")

    def end(self, outcome: str) -> None:
        self.store.end_transaction(self.id, outcome)
