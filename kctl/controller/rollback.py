"""``kctl rollback [--to ID]``: restore the known-good baseline (or a named earlier
deployment), health-checked, after reconciling any interrupted transaction. Its plan
(:func:`kctl.controller.planner.plan_rollback`) has no revert: a failed rollback is
DEGRADED, and a signal aborts it at once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from kctl import secrets
from kctl.controller import common
from kctl.controller.executor import Executor
from kctl.controller.host import changing_host
from kctl.controller.planner import plan_rollback
from kctl.controller.recover import adopt, serving_now
from kctl.controller.runstate import RunState
from kctl.errors import (
    Degraded,
    HealthFailed,
    Interrupted,
    KctlError,
    PreconditionFailed,
    RevertAborted,
)

if TYPE_CHECKING:
    from kctl.controller.context import Context
    from kctl.controller.host import HostChange
    from kctl.profile.model import Profile
    from kctl.runtime.base import Instance, Runtime
    from kctl.store import Store
    from kctl.store.records import Deployment


class RollbackResult(BaseModel):
    """The result of ``rollback``."""

    deployment_id: str = Field(description="the rollback's own record")
    target: str = Field(description="the deployment restored; none when cleared")
    profile: str
    outcome: Literal["restored", "already-serving", "cleared"] = Field(
        description="cleared: no known-good was ever verified; what a killed command left "
        "was stopped, nothing serves"
    )
    reason: str
    timings: dict[str, float] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)


def rollback(
    ctx: Context, to: str | None = None, *, runtime_kind: str | None = None
) -> RollbackResult:
    if not (ctx.state_dir / "kctl.db").is_file():
        # a mistyped --state-dir must not become a new, empty state dir
        raise PreconditionFailed(
            f"no kctl state in {ctx.state_dir}: nothing was ever deployed from it, "
            "so there is nothing to roll back to",
            hint="check --state-dir (or XDG_STATE_HOME); `kctl status` shows the state dir in use",
        )
    store = ctx.open_store()
    try:
        target = store.get_deployment(to) if to is not None else store.last_known_good()
        if target is None and _left_over(ctx, store, runtime_kind):
            return _clear(ctx, store, runtime_kind)
        if target is None:
            raise PreconditionFailed(
                "no known-good baseline is recorded yet, so there is nothing to roll back to",
                hint="deploy a baseline profile first, "
                "e.g. `kctl deploy profiles/triton-graphs.yaml`",
            )
        profile = common.profile_of(target)
        runtime = ctx.runtime(runtime_kind or ctx.runtime_kind(profile))
        command = "kctl rollback" + (f" --to {to}" if to else "")
        with changing_host(ctx, command, target.id, store=store) as host:
            host.reconcile(runtime, resolver="rollback")
            runtime.check_available()
            secrets.check_available(profile)  # before anything stops
            return _restore(host, runtime, target, profile)
    finally:
        store.close()


def _newest_runtime(ctx: Context, store: Store, runtime_kind: str | None) -> Runtime:
    """The runtime of the newest record (no known-good names one)."""
    newest = store.list_deployments(limit=1)
    kind = runtime_kind or ctx.backend.runtime_kind(newest[0].runtime if newest else "local")
    return ctx.runtime(kind)


def _left_over(ctx: Context, store: Store, runtime_kind: str | None) -> bool:
    """Whether a command that never verified a known-good left something behind: an open
    transaction, an unfinished record, or a server of kctl's that runs."""
    from kctl.store.records import TERMINAL_STATUSES

    if store.open_transactions():
        return True
    if any(d.status not in TERMINAL_STATUSES for d in store.list_deployments(limit=200)):
        return True
    try:
        return bool(_newest_runtime(ctx, store, runtime_kind).running())
    except KctlError:
        return False


def _clear(ctx: Context, store: Store, runtime_kind: str | None) -> RollbackResult:
    """No known-good was ever verified, but a killed command left something: reconcile,
    stop every server of kctl's and record that nothing serves (a clean state)."""
    from kctl.controller.host import new_txn_id
    from kctl.controller.planner import plan_stop

    runtime = _newest_runtime(ctx, store, runtime_kind)
    with changing_host(ctx, "kctl rollback", store=store) as host:
        host.reconcile(runtime, resolver="rollback")
        runtime.check_available()
        txn = host.transaction(new_txn_id("r"))
        state = RunState(txn_id=txn.id)
        ex = Executor(ctx, store, runtime, txn, state)
        with ex.guard:
            ex.run_steps(plan_stop("rollback").steps)
        txn.end("cleared")
    reason = (
        "no known-good baseline was ever verified, so there is none to restore; "
        + (f"stopped {', '.join(state.stopped)}; " if state.stopped else "")
        + "nothing serves now"
    )
    return RollbackResult(
        deployment_id=txn.id,
        target="none",
        profile="none",
        outcome="cleared",
        reason=reason,
        warnings=host.warnings,
    )


def _restore(
    host: HostChange, runtime: Runtime, target: Deployment, profile: Profile
) -> RollbackResult:
    ctx, store = host.ctx, host.store
    t0 = ctx.monotonic()
    serving = serving_now(store, runtime)
    if serving is not None and serving[0].id == target.id and _restart(host, runtime, serving):
        serving = None
    if serving is not None and serving[0].id == target.id:
        adopt(store, serving)
        store.set_serving(target.id)
        # the rollback's own record: the newest transaction now says the host is verified,
        # while an earlier DEGRADED or aborted record keeps its status and reason
        reason = f"{target.id} ({profile.name}) already serves; health verified"
        record = store.new_deployment(
            kind="rollback", profile=target.profile, runtime=runtime.name, parent_id=target.id
        )
        timings = {"total": round(ctx.monotonic() - t0, 3)}
        store.update_deployment(
            record.id, status="promoted", reason=reason, exit_code=0, timings=timings
        )
        return RollbackResult(
            deployment_id=record.id,
            target=target.id,
            profile=profile.name,
            outcome="already-serving",
            reason=reason,
            timings=timings,
            warnings=host.warnings,
        )
    common.check_startable(
        target,
        profile,
        why="the rollback would start it",
        hint="`kctl rollback --to ID` to an earlier deployment that starts (`kctl history`)",
    )
    record = store.new_deployment(
        kind="rollback", profile=target.profile, runtime=runtime.name, parent_id=target.id
    )
    txn = host.transaction(record.id)
    state = RunState(txn_id=record.id, target=(target, profile), original=serving, serving=serving)
    ex = Executor(ctx, store, runtime, txn, state)
    with ex.guard:
        ex.guard.begin_revert(tolerate=0)  # a rollback is itself the way back
        try:
            ex.run_steps(plan_rollback(profile.name).steps)
        except (RevertAborted, Interrupted) as exc:
            _degraded(host, record.id, f"rollback interrupted: {exc}")
            raise Degraded(
                f"rollback to {target.id} was interrupted; the host is not verified serving",
                hint="run `kctl rollback` again",
            ) from exc
        except Exception as exc:  # noqa: BLE001
            _degraded(host, record.id, f"rollback failed: {exc}")
            raise Degraded(
                f"DEGRADED: rollback to {target.id} ({profile.name}) failed: {exc}",
                hint="inspect `kctl logs " + target.id + "`, fix the host, then run "
                "`kctl rollback` again",
            ) from exc
    timings = {"total": round(ctx.monotonic() - t0, 3)}
    reason = f"{target.id} ({profile.name}) restored, health verified"
    store.update_deployment(
        record.id, status="promoted", reason=reason, exit_code=0, timings=timings
    )
    txn.end("restored")
    return RollbackResult(
        deployment_id=record.id,
        target=target.id,
        profile=profile.name,
        outcome="restored",
        reason=reason,
        timings=timings,
        warnings=host.warnings,
    )


def _restart(host: HostChange, runtime: Runtime, serving: tuple[Deployment, Instance]) -> bool:
    """Whether the target, which runs, must be restarted: it is verified healthy if it
    answers within its health deadline; one that never does (hung, stuck loading) is
    stopped here, so the rollback's plan starts it afresh."""
    dep, inst = serving
    profile = common.profile_of(dep)
    try:
        common.wait_healthy(host.ctx, runtime, inst, profile)
    except HealthFailed as exc:
        host.warn(f"{dep.id} runs but is not healthy ({exc.message}); restarting it")
        host.ctx.reporter.event(f"stopping {dep.id} (rollback: not healthy)")
        runtime.stop(inst, profile.runtime.stop_timeout_s)
        host.store.set_serving(None)
        return True
    return False


def _degraded(host: HostChange, dep_id: str, reason: str) -> None:
    host.store.set_serving(None)
    host.store.update_deployment(dep_id, status="degraded", reason=reason, exit_code=4)
