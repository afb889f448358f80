"""The journal-backed transaction every host-changing command runs in.

Each step that changes the host is written to the store *before* it runs
(:meth:`Transaction.step`), so a kctl killed at any point leaves a record of what it was
doing; ``kctl status`` reports it and ``kctl rollback`` / ``kctl deploy`` reconcile it
with what actually runs (:func:`kctl.controller.recover.reconcile`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from kctl.runtime.base import Instance, LaunchSpec

if TYPE_CHECKING:
    from kctl.controller.context import Context
    from kctl.runtime.base import Runtime
    from kctl.store import Store


class Transaction:
    """One deploy/rollback: the journal id is the deployment id."""

    def __init__(self, ctx: Context, store: Store, txn_id: str) -> None:
        self.ctx = ctx
        self.store = store
        self.id = txn_id

    @contextlib.contextmanager
    def step(self, name: str, **intent: Any) -> Iterator[None]:
        seq = self.store.begin_step(self.id, name, intent)
        try:
            yield
        except BaseException as exc:
            # a failed or interrupted step stays visible in the journal with its cause
            with contextlib.suppress(Exception):
                self.store.finish_step(self.id, seq, state="failed", note=str(exc) or repr(exc))
            raise
        self.store.finish_step(self.id, seq, state="done")

    def stop(self, runtime: Runtime, instance: Instance, timeout_s: float, why: str) -> None:
        self.ctx.reporter.event(f"stopping {instance.deployment_id} ({why})")
        with self.step("stop", instance=dataclasses.asdict(instance), why=why):
            runtime.stop(instance, timeout_s)

    def start(self, runtime: Runtime, spec: LaunchSpec, why: str) -> Instance:
        self.ctx.reporter.event(f"starting {spec.deployment_id} [{spec.profile_name}] ({why})")
        with self.step("start", deployment_id=spec.deployment_id, argv=list(spec.argv), why=why):
            instance = runtime.start(spec)
        self.store.update_deployment(spec.deployment_id, instance=instance)
        return instance
