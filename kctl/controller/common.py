"""Pieces shared by deploy, rollback, plan and bench: profile loading, launch specs, images,
waiting for health, and fingerprints."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import socket
import types
import typing
from typing import TYPE_CHECKING, Any

from kctl.errors import UsageError

if TYPE_CHECKING:
    from kctl.controller.context import Context
    from kctl.profile.model import Profile
    from kctl.runtime.base import Instance, LaunchSpec, Runtime


def load(path: str) -> Profile:
    from kctl.profile.loader import load_profile

    return load_profile(path)


def load_pair(path: str) -> tuple[Profile, Profile | None]:
    """The candidate and its known-good baseline (None when the profile is a baseline)."""
    candidate = load(path)
    baseline = load(candidate.baseline) if candidate.baseline else None
    if baseline is not None and baseline.runtime.kind != candidate.runtime.kind:
        raise UsageError(
            f"{candidate.source}: runtime.kind is {candidate.runtime.kind!r} but its baseline "
            f"{baseline.source} uses {baseline.runtime.kind!r}",
            hint="a candidate and its baseline must run on the same runtime",
        )
    return candidate, baseline


def image_for(ctx: Context, profile: Profile) -> str | None:
    """Build (or find, content-addressed) the serving image; None on the local runtime."""
    if ctx.runtime_kind(profile) != "docker":
        return None
    from kctl.image import ensure_image

    return ensure_image(
        profile,
        repo_root=ctx.repo_root,
        state_dir=ctx.state_dir,
        rebuild=ctx.rebuild,
        progress=ctx.reporter.progress,
    )


def launch_spec_for(
    ctx: Context, profile: Profile, deployment_id: str, image: str | None
) -> LaunchSpec:
    return ctx.backend.launch_spec(profile, deployment_id, image)


def wait_healthy(ctx: Context, runtime: Runtime, instance: Instance, profile: Profile) -> Any:
    from kctl.health import wait_healthy as _wait

    def show(p: Any) -> None:
        ctx.reporter.progress(f"health {instance.deployment_id}: {p}")

    return _wait(
        runtime,
        instance,
        profile.health,
        host=profile.server.host,
        port=profile.server.port,
        verify_kernel=profile.server.verify_kernel,
        progress=show,
    )


def fingerprint(ctx: Context, gate_profile: Profile, measured: Profile) -> str:
    """What a stored measurement must match to be reused as a baseline: the gate workload,
    the model, the GPU, the host, and the measured profile's content."""
    gate = gate_profile.gate
    key = {
        "workload": {
            "contexts": list(gate.contexts),
            "output_tokens": gate.output_tokens,
            "warmup": gate.warmup,
            "concurrency": gate.concurrency,
            "seed": gate.seed,
            "correctness": [gate.correctness.prompts, gate.correctness.tokens],
        },
        "model": measured.server.model_path,
        "host": socket.gethostname(),
        "measured_profile": measured.content_hash,
        **ctx.backend.identity(),
    }
    blob = json.dumps(key, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def endpoint_of(profile: Profile) -> Any:
    from kctl.gate import Endpoint
    from kctl.launch import connect_host

    return Endpoint(connect_host(profile.server.host), profile.server.port)


def profile_of(deployment: Any) -> Profile:
    """The resolved profile a deployment ran, rebuilt from the store (not from the file,
    which may have changed since)."""
    from kctl.profile.model import Profile

    profile: Profile = _rebuild(Profile, deployment.profile)
    return profile


def _rebuild(cls: Any, data: Any) -> Any:
    """Inverse of ``dataclasses.asdict`` + JSON for the profile model: lists back to tuples,
    nested mappings back to their dataclasses."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            kwargs[f.name] = _coerce(hints[f.name], data[f.name])
    return cls(**kwargs)


def _coerce(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        for opt in options:
            if dataclasses.is_dataclass(opt) and isinstance(value, dict):
                return _rebuild(opt, value)
            if typing.get_origin(opt) is tuple and isinstance(value, list):
                return _coerce(opt, value)
        return value
    if dataclasses.is_dataclass(tp) and isinstance(value, dict):
        return _rebuild(tp, value)
    if origin is tuple and isinstance(value, list):
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(args[0], v) for v in value)
        return tuple(_coerce(a, v) for a, v in zip(args, value))
    return value
