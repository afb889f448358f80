"""The steps a host-changing command is made of, as values.

A :class:`Plan` is built by a pure planner (:mod:`kctl.controller.planner`) and run by one
executor (:mod:`kctl.controller.executor`), which journals each step (its :meth:`~Step.
to_dict`) before acting. ``kctl plan`` prints the same values. Steps name what they act
on by *role* (``candidate``, ``baseline``, ``target``, ``serving``) and profile name, not
by deployment id: the ids of records a plan creates are only known when it runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

#: whose server a step acts on: the profile being deployed, its known-good baseline, the
#: deployment a revert or rollback restores, or whatever serves now
Role = Literal["candidate", "baseline", "target", "serving"]
#: where a baseline measurement comes from: the store (fresh enough), the live server, or
#: the store after a drift check on the live server confirms it (else the live server)
Source = Literal["stored", "live", "checked"]


@dataclass(frozen=True)
class Step:
    """One step. ``name`` is its journal name; ``changes_host`` says whether running it
    may change what runs on the host (a failure after such a step must revert)."""

    name: ClassVar[str] = "step"
    changes_host: ClassVar[bool] = False

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.name, **dataclasses.asdict(self)}

    def describe(self) -> str:
        return self.name

    @property
    def about_baseline(self) -> bool:
        """A step that brings up the baseline: its failure is the baseline's, not the
        candidate's."""
        return False


@dataclass(frozen=True)
class StopServing(Step):
    """Stop what serves now (what the deploy found serving, or the baseline it started)."""

    name: ClassVar[str] = "stop-serving"
    changes_host: ClassVar[bool] = True
    profile: str
    why: str

    def describe(self) -> str:
        return f"stop what serves ({self.profile}): {self.why}"


@dataclass(frozen=True)
class StopOthers(Step):
    """Stop every server of kctl's that runs, except the ``keep`` role's deployment."""

    name: ClassVar[str] = "stop-others"
    changes_host: ClassVar[bool] = True
    keep: Role | None
    why: str

    def describe(self) -> str:
        spare = f" except the {self.keep}" if self.keep else ""
        return f"stop every server of kctl's{spare}: {self.why}"


@dataclass(frozen=True)
class StartServer(Step):
    name: ClassVar[str] = "start"
    changes_host: ClassVar[bool] = True
    role: Role
    profile: str
    why: str

    def describe(self) -> str:
        return f"start the {self.role} {self.profile}: {self.why}"

    @property
    def about_baseline(self) -> bool:
        return self.role == "baseline"


@dataclass(frozen=True)
class WaitHealthy(Step):
    name: ClassVar[str] = "wait-healthy"
    role: Role
    profile: str
    deadline_s: float

    def describe(self) -> str:
        return (
            f"wait until the {self.role} {self.profile} is healthy (deadline {self.deadline_s:g} s)"
        )

    @property
    def about_baseline(self) -> bool:
        return self.role == "baseline"


@dataclass(frozen=True)
class RecordBaseline(Step):
    """The baseline just verified healthy becomes the known-good and serves."""

    name: ClassVar[str] = "record-baseline"
    profile: str

    def describe(self) -> str:
        return f"record {self.profile} as the known-good baseline, serving"

    @property
    def about_baseline(self) -> bool:
        return True


@dataclass(frozen=True)
class Measure(Step):
    """Measure the role's server under the candidate's gate workload (or take the stored
    measurement of it, or, ``checked``, take it after a drift check of the running server
    confirms it and measure again otherwise)."""

    name: ClassVar[str] = "measure"
    role: Role
    profile: str
    source: Source
    #: ``checked``: the drift check's requests in all, its time bound (seconds, at
    #: real-time scale), and the requests of the measurement it falls back to
    check_requests: int = 0
    check_budget_s: float = 0.0
    measure_requests: int = 0

    def describe(self) -> str:
        if self.source == "stored":
            return f"take the stored measurement of the {self.role} {self.profile}"
        if self.source == "checked":
            return (
                f"check the stored measurement of the {self.role} {self.profile} on the "
                f"running server ({self.check_requests} requests, at most "
                f"{self.check_budget_s:g} s); reuse it if steady, else measure the "
                f"{self.role} again under the gate workload ({self.measure_requests} "
                "requests) before stopping it"
            )
        return f"measure the {self.role} {self.profile} under the gate workload"


@dataclass(frozen=True)
class Gate(Step):
    name: ClassVar[str] = "gate"
    profile: str
    contexts: tuple[int, ...]
    stop_at_first_fail: bool

    def describe(self) -> str:
        first = " (stops at the first failing context)" if self.stop_at_first_fail else ""
        return (
            f"gate {self.profile}: correctness probes first (a wrong answer fails it before "
            f"any throughput request), then throughput vs the baseline{first}"
        )


@dataclass(frozen=True)
class Promote(Step):
    """The candidate serves: record it (promoted, or established as a known-good)."""

    name: ClassVar[str] = "promote"
    profile: str
    establish: bool = False

    def describe(self) -> str:
        if self.establish:
            return f"record {self.profile} as the known-good baseline, serving"
        return f"promote {self.profile}"


@dataclass(frozen=True)
class Restore(Step):
    """Bring back the deployment a failure returns to and verify it (start it unless it
    still runs), or record that nothing serves when there is none."""

    name: ClassVar[str] = "restore"
    changes_host: ClassVar[bool] = True
    profile: str | None

    def describe(self) -> str:
        if self.profile is None:
            return "record that nothing serves (nothing served before)"
        return f"bring back {self.profile} and verify its health"


@dataclass(frozen=True)
class ClearServing(Step):
    name: ClassVar[str] = "clear-serving"

    def describe(self) -> str:
        return "record that nothing serves"


@dataclass(frozen=True)
class Plan:
    """What a command will do, in order, and what it does instead when a step fails after
    the host changed (``revert``; empty: a failure leaves the host DEGRADED)."""

    kind: Literal["deploy", "rollback", "stop"]
    steps: tuple[Step, ...]
    revert: tuple[Step, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "steps": [s.to_dict() for s in self.steps],
            "revert": [s.to_dict() for s in self.revert],
        }

    def lines(self) -> list[str]:
        out = [f"{i + 1}. {s.describe()}" for i, s in enumerate(self.steps)]
        if self.revert:
            out.append("on failure after the host changed:")
            out += [f"  {i + 1}. {s.describe()}" for i, s in enumerate(self.revert)]
        return out
