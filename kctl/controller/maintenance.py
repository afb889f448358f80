"""``kctl build`` and ``kctl gc``, and the retention prune after a deploy."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from kctl.controller import common
from kctl.errors import UsageError
from kctl.runtime import kind_of

if TYPE_CHECKING:
    from kctl.controller.context import Context
    from kctl.runtime.base import Runtime
    from kctl.store import Store


class GcResult(BaseModel):
    """The result of ``gc`` (docker runtime only)."""

    removed: list[str] = Field(description="the stopped containers removed")
    retain: int


class BuildResult(BaseModel):
    """The result of ``build`` (docker runtime only)."""

    profile: str
    image: str


class StopResult(BaseModel):
    """The result of ``stop``."""

    stopped: list[str] = Field(description="deployment ids stopped")


def protected_ids(store: Store, *extra: str | None) -> list[str]:
    """Deployments whose stopped containers must survive a prune: what serves, the
    known-good baselines, and any the caller names."""
    ids = [d.id for d in (store.serving(), store.last_known_good()) if d is not None]
    return ids + [e for e in extra if e]


def prune(
    ctx: Context, store: Store, runtime: Runtime, retain: int, *extra: str | None
) -> list[str]:
    """Remove old stopped containers beyond ``retain`` (docker only; a no-op elsewhere).
    Best effort after a deploy: a failed prune is a warning, never a failed deploy."""
    pruner = getattr(runtime, "prune", None)
    if pruner is None:
        return []
    try:
        removed: list[str] = pruner(retain, protect=protected_ids(store, *extra))
    except Exception as exc:  # noqa: BLE001 - housekeeping must not fail a finished deploy
        ctx.reporter.warn(f"pruning old containers failed: {exc}")
        return []
    if removed:
        ctx.reporter.event(f"pruned {len(removed)} old stopped container(s)")
    return removed


def gc(ctx: Context, retain: int | None, runtime_kind: str = "docker") -> GcResult:
    runtime = ctx.runtime(runtime_kind)
    if getattr(runtime, "prune", None) is None:
        raise UsageError(f"the {runtime_kind} runtime keeps nothing to collect")
    store = ctx.open_store()
    try:
        keep = retain if retain is not None else 3
        return GcResult(removed=prune(ctx, store, runtime, keep), retain=keep)
    finally:
        store.close()


def build(ctx: Context, profile_path: str) -> BuildResult:
    profile = common.load(profile_path)
    if not kind_of(ctx.runtime_kind(profile)).builds_images:
        raise UsageError(
            f"{profile.source}: runtime.kind is {profile.runtime.kind!r}"
            + ctx.backend.local_reason()
            + ": there is no image to build"
        )
    tag = common.image_for(ctx, profile)
    return BuildResult(profile=profile.name, image=str(tag))


def stop(ctx: Context, *, yes: bool) -> StopResult:
    """``kctl stop --yes``: take the service down (every server kctl runs here), journalled
    like any host change. The known-good record stays, so ``kctl rollback`` brings it back."""
    from kctl.controller.executor import Executor
    from kctl.controller.host import changing_host, new_txn_id
    from kctl.controller.planner import plan_stop
    from kctl.controller.runstate import RunState

    if not yes:
        raise UsageError(
            "kctl stop takes the serving deployment down", hint="pass --yes to confirm"
        )
    with changing_host(ctx, "kctl stop") as host:
        serving = host.store.serving()
        runtime = ctx.runtime(ctx.backend.runtime_kind(serving.runtime if serving else "docker"))
        host.reconcile(runtime, resolver="stop")
        txn = host.transaction(new_txn_id("s"))
        state = RunState(txn_id=txn.id)
        ex = Executor(ctx, host.store, runtime, txn, state)
        with ex.guard:
            ex.run_steps(plan_stop().steps)
        txn.end("stopped")
    return StopResult(stopped=state.stopped)
