"""The planner: what a deploy, rollback or stop will do, as a :class:`~kctl.controller.
steps.Plan`. Pure: values in (profiles, what the store and the runtime say), a plan out.
``kctl plan`` and the commands themselves build their plan here, so what is printed is
what runs."""

from __future__ import annotations

from dataclasses import dataclass

from kctl.controller.steps import (
    ClearServing,
    Gate,
    Measure,
    Plan,
    Promote,
    RecordBaseline,
    Restore,
    Role,
    StartServer,
    Step,
    StopOthers,
    StopServing,
    WaitHealthy,
)
from kctl.profile.model import Profile


@dataclass(frozen=True)
class Serving:
    """The deployment that really serves now (store and runtime agree)."""

    deployment: str
    profile: str
    profile_hash: str


@dataclass(frozen=True)
class Observed:
    """What the store and the runtime say, as far as a deploy's plan depends on it."""

    serving: Serving | None
    #: the store records a known-good deployment of the candidate's baseline
    baseline_known: bool = False
    #: the store holds a fresh enough measurement of the baseline under this gate
    baseline_measured: bool = False


def _bring_up(role: Role, profile: Profile, why: str) -> tuple[Step, ...]:
    return (
        StartServer(role=role, profile=profile.name, why=why),
        WaitHealthy(role=role, profile=profile.name, deadline_s=profile.health.deadline_s),
    )


def _baseline_steps(
    candidate: Profile, baseline: Profile, seen: Observed
) -> tuple[tuple[Step, ...], str | None]:
    """The steps that get the baseline measured, and what serves after them (its profile
    name), which the candidate then replaces."""
    serving = seen.serving
    runs = serving is not None and serving.profile_hash == baseline.content_hash
    if seen.baseline_measured and runs:
        # the baseline serves: the stored measurement is checked against it before reuse
        assert serving is not None
        return (
            WaitHealthy(
                role="serving", profile=baseline.name, deadline_s=baseline.health.deadline_s
            ),
            _checked(candidate, baseline),
        ), serving.profile
    if seen.baseline_measured:
        stored = Measure(role="baseline", profile=baseline.name, source="stored")
        return (stored,), serving.profile if serving else None
    if serving is not None and runs:
        # measured on the running baseline before it is stopped, once it answers healthy
        # (a restart a killed kctl left may still be loading: it is never measured so)
        return (
            WaitHealthy(
                role="serving", profile=baseline.name, deadline_s=baseline.health.deadline_s
            ),
            Measure(role="baseline", profile=baseline.name, source="live"),
        ), serving.profile
    # nothing known-good serves: bring the baseline up first (it is also the revert target)
    why = "baseline for the gate"
    steps: tuple[Step, ...] = ()
    if serving is not None:
        steps += (StopServing(profile=serving.profile, why=why),)
    steps += _bring_up("baseline", baseline, why)
    steps += (
        RecordBaseline(profile=baseline.name),
        Measure(role="baseline", profile=baseline.name, source="live"),
    )
    return steps, baseline.name


def _checked(candidate: Profile, baseline: Profile) -> Measure:
    """The stored measurement, after a drift check on the running baseline
    (:mod:`kctl.gate.drift`): what it sends, its time bound, and what measuring again
    would send."""
    from kctl.gate.drift import DRIFT_BUDGET_S, DRIFT_REQUESTS
    from kctl.gate.workload import plan_workload

    workload = plan_workload(candidate.gate)
    return Measure(
        role="baseline",
        profile=baseline.name,
        source="checked",
        check_requests=DRIFT_REQUESTS * len(workload.contexts),
        check_budget_s=DRIFT_BUDGET_S,
        measure_requests=workload.planned_requests,
    )


def plan_deploy(candidate: Profile, baseline: Profile | None, seen: Observed) -> Plan:
    """A deploy of ``candidate``: gated against ``baseline``, or, for a baseline profile
    (``baseline`` None), established as the known-good after it is measured."""
    if baseline is None:
        serving = seen.serving.profile if seen.serving else None
        steps: tuple[Step, ...] = ()
        if serving is not None:
            steps += (StopServing(profile=serving, why="replaced"),)
        steps += _bring_up("candidate", candidate, "known-good baseline")
        steps += (
            Measure(role="candidate", profile=candidate.name, source="live"),
            Promote(profile=candidate.name, establish=True),
        )
        return Plan("deploy", steps, _revert(serving))
    steps, serving = _baseline_steps(candidate, baseline, seen)
    if serving is not None:
        steps += (StopServing(profile=serving, why="replaced by the candidate"),)
    steps += _bring_up("candidate", candidate, "candidate")
    policy = candidate.gate.policy
    steps += (
        Gate(
            profile=candidate.name,
            contexts=tuple(candidate.gate.contexts),
            stop_at_first_fail=policy.stop_at_first_fail,
        ),
        Promote(profile=candidate.name),
    )
    # the revert goes back to the baseline's known-good when there is one by then
    runs_baseline = seen.serving is not None and seen.serving.profile_hash == baseline.content_hash
    starts_baseline = not seen.baseline_measured and not runs_baseline
    target = baseline.name if seen.baseline_known or starts_baseline else None
    if target is None and seen.serving is not None:
        target = seen.serving.profile
    return Plan("deploy", steps, _revert(target))


def _revert(target: str | None) -> tuple[Step, ...]:
    """Stop what this deploy started, then bring back the known-good baseline of the
    candidate (or, without one, what served before; or nothing)."""
    keep: Role | None = "target" if target is not None else None
    return (StopOthers(keep=keep, why="revert"), Restore(profile=target))


def plan_rollback(target: str) -> Plan:
    """Restore the deployment of profile ``target``: stop every other server of kctl's,
    then bring it back, verified."""
    return Plan("rollback", (StopOthers(keep="target", why="rollback"), Restore(profile=target)))


def plan_stop(why: str = "stop") -> Plan:
    return Plan("stop", (StopOthers(keep=None, why=why), ClearServing()))
