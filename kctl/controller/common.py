"""Pieces shared by deploy, rollback, plan and bench: profile loading, launch specs, images,
waiting for health, and fingerprints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kctl.backend import fingerprint as backend_fingerprint
from kctl.errors import UsageError
from kctl.runtime import kind_of

if TYPE_CHECKING:
    from collections.abc import Callable

    from kctl.controller.context import Context
    from kctl.gate import Measurement
    from kctl.profile.model import Profile
    from kctl.runtime.base import Instance, LaunchSpec, Runtime
    from kctl.store import Store


def load(path: str, overrides: tuple[str, ...] = ()) -> Profile:
    """The profile at ``path`` with the ``--set`` ``overrides`` applied."""
    from kctl.profile.loader import load_profile

    return load_profile(path, overrides=overrides)


def load_pair(path: str, overrides: tuple[str, ...] = ()) -> tuple[Profile, Profile | None]:
    """The candidate and its known-good baseline (None when the profile is a baseline),
    both with the ``--set`` ``overrides`` applied."""
    candidate = load(path, overrides)
    baseline = load(candidate.baseline, overrides) if candidate.baseline else None
    if baseline is not None and baseline.runtime.kind != candidate.runtime.kind:
        raise UsageError(
            f"{candidate.source}: runtime.kind is {candidate.runtime.kind!r} but its baseline "
            f"{baseline.source} uses {baseline.runtime.kind!r}",
            hint="a candidate and its baseline must run on the same runtime",
        )
    return candidate, baseline


def image_for(ctx: Context, profile: Profile) -> str | None:
    """Build (or find, content-addressed) the serving image; None on the local runtime."""
    if not kind_of(ctx.runtime_kind(profile)).builds_images:
        return None
    from kctl.image import ensure_image

    return ensure_image(
        profile,
        repo_root=ctx.repo_root,
        state_dir=ctx.state_dir,
        rebuild=ctx.rebuild,
        progress=ctx.reporter.progress,
    )


def check_image(ctx: Context, profile: Profile, image: str | None) -> None:
    """Ask the built serving image which SGLang it holds and parse the profile's launch
    argv with that release's own parser (:mod:`kctl.image.probe`, cached by image id):
    ProfileError (exit 2) on a refusal or another release than the profile names. Nothing
    to ask on the local runtime (``image`` None)."""
    if image is None:
        return
    from kctl.image.probe import check_image_argv, image_release

    ctx.reporter.progress(f"asking {image} which SGLang it holds")
    check_image_argv(profile, image_release(image, state_dir=ctx.state_dir))


def launch_spec_for(
    ctx: Context, profile: Profile, deployment_id: str, image: str | None
) -> LaunchSpec:
    return ctx.backend.launch_spec(profile, deployment_id, image)


def wait_healthy(
    ctx: Context, runtime: Runtime, instance: Instance, profile: Profile, *, revert: bool = False
) -> Any:
    """Wait for ``instance`` under the profile's health deadline, read on the backend's
    clock: a simulated server's deadline passes as fast as its simulated time does. The
    wait is shown as the model load (``revert``: the revert's) against its deadline, with
    the phase the server's own log names."""
    from kctl.health import wait_healthy as _wait
    from kctl.secrets import api_key

    # the deadline reads simulated time under a compressing backend: say so
    unit = "s" if ctx.backend.time_scale(profile) == 1.0 else "simulated s"
    key = f"health {instance.deployment_id}"
    what = f"revert: {key}" if revert else key

    def show(p: Any) -> None:
        server = f", server: {p.log_phase}" if p.log_phase else ""
        ctx.reporter.task(
            key, what, completed=p.elapsed_s, total=p.deadline_s, unit=unit,
            status=f"{p.phase}{server}, try {p.attempt}", detail=p.detail,
        )  # fmt: skip

    try:
        report = _wait(
            runtime,
            instance,
            profile.health,
            host=profile.server.host,
            port=profile.server.port,
            verify_kernel=profile.server.verify_kernel,
            api_key=api_key(profile),
            clock=ctx.scaled_clock(profile),
            sleep=ctx.scaled_sleep(profile),
            progress=show,
        )
    except BaseException:
        ctx.reporter.task(key, what, completed=0.0, status="not healthy", done=True)
        raise
    ctx.reporter.task(
        key, what, completed=report.total_s, total=profile.health.deadline_s, unit=unit,
        status=f"healthy in {report.total_s:.0f} {unit}", done=True,
    )  # fmt: skip
    return report


def show_gate(ctx: Context, p: Any) -> None:
    """A gate's (or a measurement's) :class:`~kctl.gate.runner.GateProgress`: the requests
    done of the total, one wait per context (the probes one of their own, and the drift
    check of a stored baseline measurement its own per context)."""
    where = "probes" if p.context is None else str(p.context)
    what = f"drift check {where}" if p.phase == "drift check" else f"gate {where}"
    status = p.phase
    if p.last is not None and p.last.error:
        status += f", last failed: {p.last.error}"
    elif p.last is not None and p.last.decode_tps is not None:
        status += f", last {p.last.decode_tps:.1f} tok/s"
    ctx.reporter.task(
        what, what, completed=p.done, total=p.total,
        unit="requests", status=status, done=p.done >= p.total,
    )  # fmt: skip


def fingerprint(ctx: Context, gate_profile: Profile, measured: Profile) -> str:
    """What a stored measurement must match to be reused as a baseline
    (:func:`kctl.backend.fingerprint` on the command's backend)."""
    return backend_fingerprint(ctx.backend, gate_profile, measured)


def endpoint_of(profile: Profile) -> Any:
    from kctl.gate import Endpoint
    from kctl.launch import connect_host
    from kctl.secrets import api_key

    return Endpoint(connect_host(profile.server.host), profile.server.port, api_key(profile))


def profile_of(deployment: Any) -> Profile:
    """The resolved profile a deployment ran, rebuilt from the store (not from the file,
    which may have changed since)."""
    from kctl.profile.model import Profile

    profile: Profile = _rebuild(Profile, deployment.profile)
    return profile


def _rebuild(cls: type[Profile], data: Any) -> Profile:
    """Inverse of ``dataclasses.asdict`` + JSON for the profile model: lists back to tuples,
    nested mappings back to their specs, defaults for fields added since it was stored."""
    from kctl.profile.serialize import from_stored

    return from_stored(cls, data)


def check_startable(deployment: Any, profile: Profile, why: str, hint: str) -> None:
    """Raise :class:`~kctl.errors.PreflightFailed` (exit 5, nothing changed) when the
    server parser of ``profile``'s SGLang release would refuse the argv ``deployment``
    (a stored record: the known-good a revert or rollback restarts) launches with. The
    loader checks every profile file; a stored profile is checked here, before the host
    is touched, because a revert or rollback relies on it starting."""
    from kctl.errors import PreflightFailed
    from kctl.launch import argv_problems
    from kctl.profile.validate import format_path

    problems = [
        f"{format_path(path)}: {msg} (got {value!r})" for path, msg, value in argv_problems(profile)
    ]
    if problems:
        raise PreflightFailed(
            f"{deployment.id} ({profile.name}) would not start, and {why}: "
            + "; ".join(problems)
            + "; nothing was changed",
            hint=hint,
        )


#: what /server_info reports that is not the server's own configuration (per-DP load)
_SERVER_INFO_DROPPED = ("internal_states",)


def read_server_info(profile: Profile) -> tuple[dict[str, Any] | None, str | None]:
    """``(what the server reports of itself, a warning)``: SGLang's ``/server_info`` (the
    effective server arguments, the scheduler's figures and ``version``) without the per-DP
    load, or None and why it could not be read. The warning also says when the server runs
    another SGLang release than the one the profile's argv was checked against."""
    from kctl.errors import ServerError
    from kctl.launch import connect_host
    from kctl.profile.release import profile_release
    from kctl.profile.secretnames import looks_secret
    from kctl.secrets import api_key
    from kctl.sglang.client import SGLangClient

    client = SGLangClient(
        connect_host(profile.server.host), profile.server.port, api_key=api_key(profile)
    )
    timeout = min(30.0, profile.health.request_timeout_s)
    try:
        body = client.get_json("/server_info", timeout)
    except ServerError as exc:
        return None, f"could not read the server's /server_info ({exc}); its version is unknown"
    # SGLang reports its whole ServerArgs, the API key in clear among them: dropped here,
    # so no key reaches the store, the status output or --json
    info = {k: v for k, v in body.items() if k not in _SERVER_INFO_DROPPED and not looks_secret(k)}
    reported, expected = info.get("version"), profile_release(profile).version
    if reported is not None and str(reported) != expected:
        return info, (
            f"the server reports SGLang {reported}, but {profile.name}'s argv was checked "
            f"against {expected}; set image.sglang: '{reported}' in the profile"
        )
    return info, None


def stored_measurement(
    ctx: Context, store: Store, baseline: Profile, fp: str, cand: Profile
) -> Measurement:
    """The baseline's stored measurement the plan chose to reuse (GateError when it went
    stale or was removed since)."""
    from kctl.errors import GateError
    from kctl.gate import Measurement

    stored = store.latest_measurement(
        baseline.content_hash, fp, max_age_s=cand.gate.policy.baseline_max_age_s, now=ctx.clock()
    )
    if stored is None:
        raise GateError(f"the stored measurement of {baseline.name} is gone or too old")
    data, created_ts = stored
    age_min = (ctx.clock() - created_ts) / 60
    ctx.reporter.event(f"baseline measurement reused ({age_min:.0f} min old)")
    return Measurement.from_dict(data)


def alive_check(runtime: Runtime, instance: Instance, phase: str) -> Callable[[], None]:
    """A check that raises :class:`~kctl.errors.ServerExited` (with the log tail) once
    ``instance`` no longer runs; the gate calls it between requests."""
    from kctl.errors import KctlError, ServerExited
    from kctl.health import LOG_TAIL_LINES

    def alive() -> None:
        state = runtime.state(instance)
        if state.running:
            return
        try:
            tail = runtime.logs(instance, tail=LOG_TAIL_LINES).rstrip("\n")
        except KctlError:
            tail = ""
        raise ServerExited(instance.deployment_id, state.detail, phase=phase, log_tail=tail)

    return alive
