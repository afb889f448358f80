"""``kctl build`` and ``kctl gc``, and the retention prune after a deploy."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kctl.controller import common
from kctl.errors import UsageError

if TYPE_CHECKING:
    from kctl.controller.context import Context
    from kctl.runtime.base import Runtime
    from kctl.store import Store


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


def gc(ctx: Context, retain: int | None, runtime_kind: str = "docker") -> dict[str, Any]:
    runtime = ctx.runtime(runtime_kind)
    if getattr(runtime, "prune", None) is None:
        raise UsageError(f"the {runtime_kind} runtime keeps nothing to collect")
    store = ctx.open_store()
    try:
        keep = retain if retain is not None else 3
        return {"removed": prune(ctx, store, runtime, keep), "retain": keep}
    finally:
        store.close()


def build(ctx: Context, profile_path: str) -> dict[str, Any]:
    profile = common.load(profile_path)
    if ctx.runtime_kind(profile) != "docker":
        raise UsageError(
            f"{profile.source}: runtime.kind is {profile.runtime.kind!r}"
            + (" (and --simulate runs locally)" if ctx.simulate else "")
            + ": there is no image to build"
        )
    tag = common.image_for(ctx, profile)
    return {"profile": profile.name, "image": tag}


def stop(ctx: Context, *, yes: bool) -> dict[str, Any]:
    """``kctl stop --yes``: take the service down (every server kctl runs here). The
    known-good record stays, so ``kctl rollback`` brings it back."""
    from kctl.controller.recover import reconcile
    from kctl.lock import DeployLock

    if not yes:
        raise UsageError(
            "kctl stop takes the serving deployment down", hint="pass --yes to confirm"
        )
    store = ctx.open_store()
    try:
        serving = store.serving()
        kind = "local" if ctx.simulate else (serving.runtime if serving else "docker")
        runtime = ctx.runtime(kind)
        with DeployLock(ctx.state_dir).acquire("kctl stop") as held:
            if held.takeover_warning:
                ctx.reporter.warn(held.takeover_warning)
            for note in reconcile(ctx, store, runtime, resolver="stop"):
                ctx.reporter.warn(note)
            stopped = []
            for inst in runtime.running():
                ctx.reporter.event(f"stopping {inst.deployment_id}")
                try:
                    dep = store.get_deployment(inst.deployment_id)
                    timeout_s = common.profile_of(dep).runtime.stop_timeout_s
                except UsageError:  # a server this store never recorded: default timeout
                    timeout_s = 60.0
                runtime.stop(inst, timeout_s)
                stopped.append(inst.deployment_id)
            store.set_serving(None)
        return {"stopped": stopped}
    finally:
        store.close()
