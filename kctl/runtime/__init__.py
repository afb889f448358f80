"""Runtimes: where serving processes run (local processes or docker containers).

:data:`KINDS` says what each kind means to the rest of kctl before one is started (whether
a deploy builds an image for it, what its preflight checks), and :func:`create` makes one:
callers ask these instead of comparing kind names.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kctl.errors import UsageError

if TYPE_CHECKING:
    from kctl.runtime.base import Runtime


@dataclass(frozen=True)
class RuntimeKind:
    """One runtime kind, as the planner and the commands see it."""

    name: str
    #: a deploy builds (or finds) a serving image for it before anything changes, and
    #: ``kctl build`` has work to do
    builds_images: bool
    #: what the deploy's preflight checks on it, as ``kctl plan`` lists them
    preflight_checks: tuple[str, ...]
    #: it runs images an orchestrator (Swarm, Kubernetes) can schedule
    runs_images: bool


KINDS: dict[str, RuntimeKind] = {
    "local": RuntimeKind(
        "local", builds_images=False, preflight_checks=("runtime", "port"), runs_images=False
    ),
    "docker": RuntimeKind(
        "docker",
        builds_images=True,
        preflight_checks=("runtime", "port", "GPU arch", "mounts"),
        runs_images=True,
    ),
}


def kind_of(name: str) -> RuntimeKind:
    """The :class:`RuntimeKind` called ``name``; UsageError (exit 2) for another name."""
    try:
        return KINDS[name]
    except KeyError:
        raise UsageError(
            f"unknown runtime kind {name!r}", hint=f"use one of: {', '.join(KINDS)}"
        ) from None


def create(name: str, state_dir: Path) -> Runtime:
    """A runtime of kind ``name`` for the state dir ``state_dir`` (nothing is reached yet:
    each runtime connects on first use)."""
    kind = kind_of(name).name
    if kind == "local":
        from kctl.runtime.local import LocalRuntime

        return LocalRuntime(state_dir)
    from kctl.runtime.docker import DockerRuntime

    return DockerRuntime(state_dir)
