"""What a running plan knows (:class:`RunState`, the executor's only mutable state) and
how long its phases took (:class:`Timer`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kctl.controller.steps import Step
    from kctl.gate.drift import DriftCheck
    from kctl.profile.model import Profile
    from kctl.runtime.base import Instance
    from kctl.store.records import Deployment


class Timer:
    """Seconds per named phase, accumulated, and the total since it was made."""

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self.monotonic = monotonic
        self.start = monotonic()
        self.marks: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str | None) -> Iterator[None]:
        t0 = self.monotonic()
        try:
            yield
        finally:
            if name is not None:
                spent = self.monotonic() - t0
                self.marks[name] = round(self.marks.get(name, 0.0) + spent, 3)

    def total(self) -> dict[str, float]:
        return {**self.marks, "total": round(self.monotonic() - self.start, 3)}


@dataclass
class RunState:
    """What a running plan knows; the executor's only mutable state."""

    #: the deployment (or stop) id the journal transaction carries
    txn_id: str
    candidate: Profile | None = None
    baseline: Profile | None = None
    #: what served when the command began, and what serves now (both as observed)
    original: tuple[Deployment, Instance] | None = None
    serving: tuple[Deployment, Instance] | None = None
    #: a rollback's target, fixed; a deploy's is resolved when its revert runs
    target: tuple[Deployment, Profile] | None = None
    images: dict[str, str | None] = field(default_factory=dict)
    instances: dict[str, Instance] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)
    health: dict[str, Any] = field(default_factory=dict)
    baseline_measurement: Any = None
    #: the drift check of a stored baseline measurement (kctl.gate.drift), when one ran
    drift: DriftCheck | None = None
    measurement: Any = None
    gate: dict[str, Any] | None = None
    table: str | None = None
    verdict: str | None = None
    reason: str = ""
    changed: bool = False
    failed_step: Step | None = None
    stopped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
