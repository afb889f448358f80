"""``kctl deploy PROFILE --fleet FLEET`` and ``kctl rollback --fleet FLEET``.

    lock (the fleet's) → reconcile interrupted rollouts → orchestrator reachable → build
    images → the images on every node that may run a replica (:mod:`kctl.fleet.images`)
    → plan → run: canary → gate → waves → promote; on any failure after the fleet
    changed (gate, health, a Swarm rollback, an error, SIGINT/SIGTERM): the plan's revert,
    every replica back on what served, verified (exit 3), or DEGRADED (exit 4)

A fleet keeps its own store, lock and journal in ``<state-dir>/fleets/<name>/``: two
fleets roll out independently, and the single-host state is never touched.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import TYPE_CHECKING, Any, NoReturn

from kctl import secrets
from kctl.controller import common
from kctl.controller.deploy import _describe, _verdict_of
from kctl.controller.host import changing_host
from kctl.errors import (
    CandidateRejected,
    Degraded,
    FleetPaused,
    Interrupted,
    PendingTransaction,
    PreconditionFailed,
    RevertAborted,
    UsageError,
)
from kctl.fleet.drivers import fleet_driver
from kctl.fleet.executor import FleetExecutor, FleetState, place_images
from kctl.fleet.loader import load_fleet
from kctl.fleet.plan import Observed, plan_fleet_deploy, plan_fleet_rollback
from kctl.fleet.results import FleetDeployResult, FleetRollbackResult
from kctl.profile.compare import gate_mismatches
from kctl.runtime import kind_of
from kctl.statedir import ensure_dir

if TYPE_CHECKING:
    from kctl.controller.context import Context
    from kctl.controller.host import HostChange
    from kctl.fleet.spec import FleetSpec
    from kctl.fleet.view import FleetDriver
    from kctl.store import Store


def fleet_context(ctx: Context, fleet: FleetSpec) -> Context:
    """The command's context with the fleet's own state dir (store, lock, journal)."""
    state = ensure_dir(ctx.state_dir / "fleets" / fleet.name)  # 0700, as the whole state dir
    return dataclasses.replace(ctx, state_dir=state, _runtimes={})


def driver_for(ctx: Context, fleet: FleetSpec) -> FleetDriver:
    """The fleet's orchestrator, as the backend chose it (Swarm; simulated under --simulate)."""
    return fleet_driver(ctx.backend, fleet, ctx.state_dir)


def reconcile(host: HostChange, driver: FleetDriver, *, resolver: str) -> list[str]:
    """Close the rollouts a killed kctl left open, saying what the service runs now.
    A deploy refuses to start over a fleet that is not back on its known-good."""
    store, notes = host.store, []
    serving = store.serving()
    view = driver.service("main")
    for txn in store.open_transactions():
        runs = (
            "no service" if view is None else f"the service runs {view.profile} ({view.deployment})"
        )
        settled = (view is None and serving is None) or (
            view is not None and serving is not None and view.settled_on(serving.id)
        )
        if resolver == "deploy" and not settled:
            raise PendingTransaction(
                f"an interrupted rollout ({txn.txn}) left the fleet off its known-good: {runs}",
                hint="run `kctl rollback --fleet FLEET` first (`kctl status --fleet FLEET` shows each replica)",
            )
        reason = f"interrupted (kctl stopped mid-rollout); reconciled by {resolver}: {runs}"
        with contextlib.suppress(Exception):
            dep = store.get_deployment(txn.txn)
            if not dep.ended:
                store.update_deployment(txn.txn, status="interrupted", reason=reason, exit_code=4)
        store.end_transaction(txn.txn, f"interrupted; {runs}")
        notes.append(f"closed interrupted rollout {txn.txn}: {runs}")
    for note in notes:
        host.warn(note)
    return notes


def deploy_fleet(
    ctx: Context, profile_path: str, fleet_path: str, *, force: bool = False
) -> FleetDeployResult:
    candidate, baseline = common.load_pair(profile_path, ctx.overrides)
    fleet = load_fleet(fleet_path)
    # the profile's own kind: under --simulate a docker profile runs as the simulator
    if not kind_of(candidate.runtime.kind).runs_images:
        raise UsageError(
            f"{candidate.source}: runtime.kind is {candidate.runtime.kind!r}; a fleet runs images",
            hint="set runtime.kind: docker in the profile",
        )
    for profile in (candidate, baseline):
        if profile is not None:  # every secret the rollout or its revert reads, before any change
            secrets.check_available(profile)
    fctx = fleet_context(ctx, fleet)
    driver = driver_for(fctx, fleet)
    with changing_host(fctx, f"kctl deploy {profile_path} --fleet {fleet_path}") as host:
        driver.check_available()
        reconcile(host, driver, resolver="deploy")
        store = host.store
        serving = store.serving()
        view = driver.service("main")
        if view is None or serving is None or view.deployment != serving.id:
            serving = None  # a service kctl did not record (or none): start from scratch
        if serving is not None and serving.profile_hash == candidate.content_hash and not force:
            return FleetDeployResult(fleet=fleet.name, deployment_id=serving.id, profile=candidate.name,
                    outcome="already-serving", serving=serving.id, warnings=host.warnings,
                    reason=f"{serving.id} already serves this profile on the fleet; use --force")  # fmt: skip
        if view is not None and serving is None:
            raise PreconditionFailed(
                f"service {view.name} exists but this state dir never recorded it serving",
                hint="remove it (`docker service rm`), or use the state dir that created it",
            )
        seen = Observed(
            serving.profile_name if serving else None, serving.profile_hash if serving else None
        )
        images = {candidate.content_hash: common.image_for(fctx, candidate)}
        if baseline is not None:
            images[baseline.content_hash] = common.image_for(fctx, baseline)
        if serving is not None:  # what a revert returns to must be on every node as well
            incumbent = common.profile_of(serving)
            images[incumbent.content_hash] = common.image_for(fctx, incumbent)
            for line in gate_mismatches(candidate, incumbent, "the incumbent"):
                host.warn(line)
        placed = place_images(fctx, driver, list(images.values()))
        dep = store.new_deployment(kind="deploy", profile=candidate, runtime=driver.name,
                                   parent_id=serving.id if serving else None)  # fmt: skip
        state = FleetState(dep.id, fleet, candidate, baseline, images=images, placed=placed)
        ex = FleetExecutor(fctx, store, driver, host.transaction(dep.id), state)
        plan = plan_fleet_deploy(fleet, candidate, baseline, seen)
        fctx.reporter.event(
            f"fleet rollout {dep.id}: {candidate.name} on {fleet.name} ({fleet.replicas} replicas)"
        )
        with ex.guard:
            try:
                ex.run_steps(plan.steps)
            except BaseException as exc:  # noqa: BLE001 - every failure path must roll back
                if isinstance(exc, SystemExit):
                    raise
                _fail(ex, store, plan.revert, exc)
        return _result(ex, "promoted" if baseline else "established", host.warnings)


def _result(ex: FleetExecutor, outcome: str, warnings: list[str]) -> FleetDeployResult:
    st = ex.state
    assert st.candidate is not None
    return FleetDeployResult.model_validate(
        {
            "fleet": st.fleet.name,
            "deployment_id": st.txn_id,
            "profile": st.candidate.name,
            "outcome": outcome,
            "reason": st.reason,
            "serving": st.restored if outcome == "rejected" else st.txn_id,
            "verdict": st.verdict,
            "table": st.table,
            "smoke": list(st.smoked),
            "timings": ex.timer.total(),
            "warnings": list(warnings),
        }
    )


def _fail(ex: FleetExecutor, store: Store, revert: tuple[Any, ...], exc: BaseException) -> NoReturn:
    st = ex.state
    reason, _gate, table = _describe(exc)
    timings = ex.timer.total()
    base = st.ids.get("baseline")
    if base is not None and store.serving() is None:  # the baseline never got to serve
        with contextlib.suppress(Exception):
            store.update_deployment(
                base, status="failed", reason=f"never verified: {reason}", exit_code=3
            )
    if isinstance(exc, FleetPaused):
        store.update_deployment(
            st.txn_id, status="aborted", reason=exc.message, exit_code=4, timings=timings
        )
        raise exc  # the journal stays open: status reports it, rollback resolves it
    if not st.changed:
        store.update_deployment(
            st.txn_id, status="failed", reason=reason, exit_code=5, timings=timings
        )
        store.end_transaction(st.txn_id, "failed before any change")
        if isinstance(exc, (Interrupted, PreconditionFailed, UsageError)):
            raise exc
        raise PreconditionFailed(f"{reason} (nothing was changed)") from exc
    ex.guard.begin_revert(tolerate=0 if isinstance(exc, Interrupted) else 1)
    ex.ctx.reporter.warn(f"{reason.partition(': ')[0]}; rolling the fleet back")
    try:
        ex.run_steps(revert)
    except BaseException as failed:  # noqa: BLE001 - any failure of the revert is DEGRADED
        why = str(failed) if not isinstance(failed, RevertAborted) else f"aborted by {failed}"
        with contextlib.suppress(Exception):
            store.set_serving(None)
            store.update_deployment(st.txn_id, status="degraded", reason=f"{reason}; rollback failed: {why}",
                                    exit_code=4, timings=ex.timer.total())  # fmt: skip
        raise Degraded(
            f"DEGRADED: the rollout failed ({reason}) and rolling the fleet back failed too: {why}",
            hint="`kctl status --fleet FLEET` shows each replica; then `kctl rollback --fleet FLEET`",
        ) from exc
    verdict = st.verdict or _verdict_of(exc)
    store.update_deployment(st.txn_id, status="rejected", verdict=verdict, reason=reason,
                            exit_code=3, timings=ex.timer.total())  # fmt: skip
    store.end_transaction(st.txn_id, "rolled back")
    st.reason, st.verdict = reason, verdict
    result = _result(ex, "rejected", [])
    result.table = table or st.table
    restored = st.restored or "nothing (no service before)"
    raise CandidateRejected(
        f"candidate {result.profile} rejected on fleet {st.fleet.name}: {reason}; "
        f"every replica back on {restored}, verified",
        result=result,
        log_tail=getattr(exc, "log_tail", "") or "",
    ) from exc


def rollback_fleet(ctx: Context, fleet_path: str) -> FleetRollbackResult:
    """Every replica back to the fleet's known-good baseline, each verified."""
    fleet = load_fleet(fleet_path)
    fctx = fleet_context(ctx, fleet)
    if not (fctx.state_dir / "kctl.db").is_file():
        raise PreconditionFailed(
            f"no state for fleet {fleet.name} in {ctx.state_dir}: nothing was rolled out to it",
            hint="check --state-dir and the fleet file",
        )
    driver = driver_for(fctx, fleet)
    with changing_host(fctx, f"kctl rollback --fleet {fleet_path}") as host:
        driver.check_available()
        reconcile(host, driver, resolver="rollback")
        store = host.store
        target = store.last_known_good()
        if target is None:
            raise PreconditionFailed("the fleet has no known-good deployment to roll back to")
        profile = common.profile_of(target)
        secrets.check_available(profile)  # before anything changes
        image = common.image_for(fctx, profile)
        placed = place_images(fctx, driver, [image])
        record = store.new_deployment(
            kind="rollback", profile=target.profile, runtime=driver.name, parent_id=target.id
        )
        state = FleetState(record.id, fleet, target=(target, profile),
                           images={profile.content_hash: image}, placed=placed)  # fmt: skip
        ex = FleetExecutor(fctx, store, driver, host.transaction(record.id), state)
        with ex.guard:
            ex.guard.begin_revert(tolerate=0)
            try:
                ex.run_steps(plan_fleet_rollback(target.profile_name).steps)
            except BaseException as exc:  # noqa: BLE001
                if isinstance(exc, SystemExit):
                    raise
                with contextlib.suppress(Exception):
                    store.update_deployment(
                        record.id, status="degraded", reason=str(exc), exit_code=4
                    )
                raise Degraded(
                    f"DEGRADED: rolling fleet {fleet.name} back to {target.id} failed: {exc}",
                    hint="`kctl status --fleet FLEET` shows each replica; fix, then rollback again",
                ) from exc
        store.set_serving(target.id)
        reason = f"every replica on {target.id} ({target.profile_name}), verified"
        store.update_deployment(
            record.id, status="promoted", reason=reason, exit_code=0, timings=ex.timer.total()
        )
        host.transaction(record.id).end("restored")
        return FleetRollbackResult(fleet=fleet.name, deployment_id=record.id, target=target.id,
                profile=target.profile_name, outcome="restored", reason=reason,
                timings=ex.timer.total(), warnings=host.warnings)  # fmt: skip
