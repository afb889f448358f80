"""Reconciling the store with what actually runs.

A kctl killed outright (SIGKILL, power loss) leaves an open journal transaction and,
maybe, a server the store does not call serving. The next ``deploy`` or ``rollback``
calls :func:`reconcile` under the lock: it reads what the runtime really runs, points the
store's serving pointer at it, and closes the interrupted transaction with a note.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from kctl.controller import common
from kctl.errors import DeploymentNotFound

if TYPE_CHECKING:
    from kctl.controller.context import Context
    from kctl.profile.model import Profile
    from kctl.runtime.base import Instance, Runtime
    from kctl.store import Store
    from kctl.store.records import Deployment


def serving_now(store: Store, runtime: Runtime) -> tuple[Any, Instance] | None:
    """The deployment that really serves now with its instance, or None.

    The store's pointer is trusted only when the runtime confirms the process runs; a
    running instance of ours that the store does not point at is adopted when the store
    knows its deployment."""
    dep = store.serving()
    if dep is not None:
        inst = dep.instance_obj()
        if inst is not None and runtime.state(inst).running:
            return dep, inst
    for inst in runtime.running():
        try:
            known = store.get_deployment(inst.deployment_id)
        except DeploymentNotFound:  # a process the store never recorded
            continue
        recorded = known.instance_obj()
        if recorded is not None and recorded.port:
            inst = recorded if recorded.ref == inst.ref else inst
        return known, inst
    return None


def adopt(store: Store, serving: tuple[Any, Instance] | None) -> None:
    """Record the live instance of what serves when its record names another one: a start
    whose result never reached the store (kctl interrupted or killed in the middle of it)."""
    if serving is None:
        return
    dep, inst = serving
    recorded = dep.instance_obj()
    if recorded is None or recorded.ref != inst.ref:
        store.update_deployment(dep.id, instance=inst)


def reconcile(ctx: Context, store: Store, runtime: Runtime, *, resolver: str) -> list[str]:
    """Close interrupted transactions against reality; returns notes for the user.

    A server whose record this closes (a candidate or a baseline a killed kctl started and
    never verified) is stopped: it may still be loading, and nothing may take it for a
    known-good one, measure it or call it ALREADY-SERVING."""
    notes, closed = [], set()
    for txn in store.open_transactions():
        last = txn.last_step
        where = f" during step {last.step!r} ({last.state})" if last else ""
        with contextlib.suppress(DeploymentNotFound):  # a stop records no deployment
            if _close_record(store, txn.txn, f"kctl was interrupted{where}", resolver):
                closed.add(txn.txn)
        store.end_transaction(txn.txn, f"interrupted; reconciled by {resolver}")
        notes.append(f"deployment {txn.txn} was interrupted{where}")
    more, unfinished = _close_unjournalled(store, resolver)
    notes += more
    closed |= unfinished
    if not notes:
        return notes
    stopped = _stop_unverified(ctx, store, runtime, closed)
    serving = serving_now(store, runtime)
    adopt(store, serving)
    store.set_serving(serving[0].id if serving else None)
    now = f"{serving[0].id} runs now" if serving else "nothing of kctl's runs now"
    if stopped:
        now = f"stopped {', '.join(stopped)} (never verified); {now}"
    return [f"{note}; {now}" for note in notes]


def _stop_unverified(ctx: Context, store: Store, runtime: Runtime, closed: set[str]) -> list[str]:
    """Stop the running servers of the records just closed as interrupted."""
    stopped = []
    for inst in runtime.running():
        if inst.deployment_id not in closed:
            continue
        try:
            timeout = common.profile_of(store.get_deployment(inst.deployment_id)).runtime
            stop_s = timeout.stop_timeout_s
        except Exception:  # noqa: BLE001 - an unreadable record still gets its server stopped
            stop_s = 60.0
        ctx.reporter.event(f"stopping {inst.deployment_id} (interrupted, never verified)")
        runtime.stop(inst, stop_s)
        stopped.append(inst.deployment_id)
    return stopped


#: how many recent records are checked for ones a killed kctl left unfinished
_UNFINISHED_LOOKBACK = 200


def _close_unjournalled(store: Store, resolver: str) -> tuple[list[str], set[str]]:
    """Close records still in progress that have no open transaction: a kctl killed after
    writing its record and before journalling its first step. Under the lock, no other
    command is running, so nothing in progress is alive. Returns the notes and the ids."""
    from kctl.store.records import TERMINAL_STATUSES

    notes, ids = [], set()
    for dep in store.list_deployments(limit=_UNFINISHED_LOOKBACK):
        if dep.status in TERMINAL_STATUSES:
            continue
        store.update_deployment(
            dep.id,
            status="interrupted",
            exit_code=4,
            reason=f"kctl was interrupted before its first step; reconciled by {resolver}",
        )
        notes.append(f"deployment {dep.id} was interrupted before its first step")
        ids.add(dep.id)
    return notes, ids


def _close_record(store: Store, txn_id: str, what: str, resolver: str) -> bool:
    """Mark the record of an interrupted transaction. One that already ended (a revert
    aborted or failed: DEGRADED) is left as it is (the resolver's own record says what it
    did; the journal says it was reconciled); one still in progress becomes interrupted.
    Returns whether it closed the record."""
    from kctl.store.records import TERMINAL_STATUSES

    dep = store.get_deployment(txn_id)
    if dep.status in TERMINAL_STATUSES:
        return False
    store.update_deployment(
        txn_id, status="interrupted", exit_code=4, reason=f"{what}; reconciled by {resolver}"
    )
    return True


def revert_target(
    store: Store, baseline: Profile | None, original: tuple[Deployment, Instance] | None
) -> tuple[Deployment, Profile] | None:
    """What a failed deploy goes back to: the verified known-good deployment of the
    candidate's baseline; for a baseline deploy (or when that baseline was never verified)
    whatever served before the deploy; else nothing."""
    if baseline is not None:
        known = store.known_good(baseline.content_hash)
        if known is not None:
            return known, common.profile_of(known)
    if original is not None:
        return original[0], common.profile_of(original[0])
    return None
