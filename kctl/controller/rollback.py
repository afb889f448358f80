"""``kctl rollback [--to ID]``: restore the known-good baseline (or a named earlier
deployment), health-checked, after reconciling any interrupted transaction."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kctl.controller import common
from kctl.controller.recover import reconcile, serving_now
from kctl.controller.signals import InterruptGuard, RevertAborted
from kctl.controller.transaction import Transaction
from kctl.errors import Degraded, Interrupted, PreconditionFailed

if TYPE_CHECKING:
    from kctl.controller.context import Context


@dataclass
class RollbackResult:
    deployment_id: str
    target: str
    profile: str
    outcome: str  # restored | already-serving
    reason: str
    timings: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def rollback(
    ctx: Context, to: str | None = None, *, runtime_kind: str | None = None
) -> RollbackResult:
    from kctl.lock import DeployLock

    store = ctx.open_store()
    target = store.get_deployment(to) if to is not None else store.last_known_good()
    if target is None:
        raise PreconditionFailed(
            "no known-good baseline is recorded yet, so there is nothing to roll back to",
            hint="deploy a baseline profile first, e.g. `kctl deploy profiles/triton-graphs.yaml`",
        )
    profile = common.profile_of(target)
    runtime = ctx.runtime(runtime_kind or ctx.runtime_kind(profile))
    warnings: list[str] = []
    command = "kctl rollback" + (f" --to {to}" if to else "")
    with DeployLock(ctx.state_dir).acquire(command, target.id) as held:
        if held.takeover_warning:
            warnings.append(held.takeover_warning)
        warnings += reconcile(ctx, store, runtime, resolver="rollback")
        for note in warnings:
            ctx.reporter.warn(note)
        runtime.check_available()
        t0 = ctx.monotonic()
        serving = serving_now(store, runtime)
        if serving is not None and serving[0].id == target.id:
            common.wait_healthy(ctx, runtime, serving[1], profile)
            return RollbackResult(
                target.id,
                target.id,
                profile.name,
                "already-serving",
                f"{target.id} already serves and is healthy",
                warnings=warnings,
            )
        record = store.new_deployment(
            kind="rollback",
            profile=target.profile,
            runtime=runtime.name,
            parent_id=target.id,
        )
        txn = Transaction(ctx, store, record.id)
        guard = InterruptGuard()
        with guard:
            guard.reverting = True  # a rollback is itself the way back: interrupts abort it
            try:
                for inst in runtime.running():
                    if inst.deployment_id != target.id:
                        txn.stop(runtime, inst, profile.runtime.stop_timeout_s, why="rollback")
                store.set_serving(None)
                common.bring_up(
                    txn, runtime, profile, target.id, common.image_for(ctx, profile), why="rollback"
                )
            except (RevertAborted, Interrupted) as exc:
                _degraded(store, record.id, f"rollback interrupted: {exc}")
                raise Degraded(
                    f"rollback to {target.id} was interrupted; the host is not verified serving",
                    hint="run `kctl rollback` again",
                ) from exc
            except Exception as exc:  # noqa: BLE001
                _degraded(store, record.id, f"rollback failed: {exc}")
                raise Degraded(
                    f"DEGRADED: rollback to {target.id} ({profile.name}) failed: {exc}",
                    hint="inspect `kctl logs " + target.id + "`, fix the host, then run "
                    "`kctl rollback` again",
                ) from exc
        store.set_serving(target.id)
        timings = {"total": round(ctx.monotonic() - t0, 3)}
        reason = f"{target.id} ({profile.name}) restored, health verified"
        store.update_deployment(
            record.id, status="promoted", reason=reason, exit_code=0, timings=timings
        )
        store.end_transaction(record.id, "restored")
        return RollbackResult(
            record.id,
            target.id,
            profile.name,
            "restored",
            reason,
            timings=timings,
            warnings=warnings,
        )


def _degraded(store: Any, dep_id: str, reason: str) -> None:
    store.set_serving(None)
    store.update_deployment(dep_id, status="degraded", reason=reason, exit_code=4)
