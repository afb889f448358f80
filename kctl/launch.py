"""The server launch as data: SGLang's server flags and the :class:`LaunchSpec` a runtime
acts on. Pure functions; tests compare their results by equality.

Flag spellings and the launcher follow the profile's SGLang release
(:func:`kctl.profile.release.profile_release`, from the release table), and the same
release's parser checks the whole argv (:func:`argv_problems`). The server's arguments
and their check live in :mod:`kctl.profile.argv` (the profile loader runs the check);
this module names them again for its callers.
"""

from __future__ import annotations

import sys

from kctl.errors import ProfileError
from kctl.profile.argv import argv_findings as argv_findings
from kctl.profile.argv import argv_problems as argv_problems
from kctl.profile.argv import argv_warnings as argv_warnings
from kctl.profile.argv import flag_number
from kctl.profile.argv import server_args as server_args
from kctl.profile.model import Profile
from kctl.profile.release import profile_release
from kctl.profile.validate import format_path
from kctl.runtime.base import LaunchSpec
from kctl.sglang.releases import Release

#: the server command of a test image: its ``sglang`` shim package answers it (the shim
#: has no ``sglang`` console script, so the release's ``sglang serve`` is not there)
SGLANG_ENTRY = ("python3", "-m", "sglang.launch_server")
#: the env var that tells the simulator which release it imitates
SIM_RELEASE_ENV = "KCTL_SIM_SGLANG_VERSION"
#: the simulator as run by ``--simulate`` (with the running interpreter)
SIM_MODULE = "kctl.sim"
#: addresses a server binds to that a client cannot connect to as such
_WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def check_launch(profile: Profile) -> None:
    """Raise :class:`~kctl.errors.ProfileError` (exit 2) if the server parser of the
    profile's release would refuse its launch argv (see :func:`argv_problems`). The
    loader runs this on every profile file; call it again before relying on a stored
    profile (the baseline a revert restarts)."""
    lines = [
        f"{profile.source}: {format_path(path)}: {msg} (got {value!r})"
        for path, msg, value in argv_problems(profile)
    ]
    if lines:
        raise ProfileError(lines)


def release_info(profile: Profile) -> dict[str, object]:
    """What ``kctl plan`` shows of the SGLang release, as data: ``version``, ``source``
    (``image.sglang`` or ``image.base``'s tag), ``launcher``, ``attention_backend`` and
    ``kernel`` (how the kdtree kernel attaches: ``plugin backend``, ``startup hook``, or
    None)."""
    rel = profile_release(profile)
    server = profile.server
    kernel: str | None = None
    if server.verify_kernel == "kdtree":
        kernel = "plugin backend" if server.attention_backend == "kdtree" else "startup hook"
    return {
        "version": rel.version,
        "source": "image.sglang" if profile.image.sglang else "image.base's tag",
        "launcher": " ".join(launcher(profile, rel)),
        "attention_backend": server.attention_backend,
        "kernel": kernel,
    }


def release_line(profile: Profile) -> str:
    """:func:`release_info` as one line (:func:`describe_release`)."""
    return describe_release(release_info(profile))


def describe_release(info: dict[str, object]) -> str:
    """A :func:`release_info` dict as one line: ``SGLang 0.5.10 (from image.base's tag;
    launcher: sglang serve)``, then the attention backend and the kernel's path."""
    line = f"SGLang {info['version']} (from {info['source']}; launcher: {info['launcher']})"
    line += f"; attention backend {info['attention_backend']}"
    if info["kernel"]:
        line += f" (kdtree kernel: {info['kernel']})"
    return line


def simulator_env(profile: Profile) -> tuple[tuple[str, str], ...]:
    """The env that makes the simulator follow the profile's ``simulator:`` section."""
    return (
        ("KCTL_SIM_SPEEDUP", flag_number(profile.simulator.speedup)),
        ("KCTL_SIM_LOAD_S", flag_number(profile.simulator.load_s)),
    )


def launcher(profile: Profile, rel: Release) -> tuple[str, ...]:
    """The server command before its arguments: the release's own launcher
    (``sglang serve``), or :data:`SGLANG_ENTRY` in a test image whose ``sglang`` is the
    simulator's shim."""
    return SGLANG_ENTRY if profile.image.install_simulator else tuple(rel.launcher.argv)


def rebind(argv: tuple[str, ...] | list[str], host: str | None) -> tuple[str, ...]:
    """``argv`` with the value of its ``--host`` replaced by ``host`` (a fleet file's
    ``bind``); as it is when ``host`` is None or ``argv`` sets no ``--host``."""
    out = tuple(argv)
    if host is None or "--host" not in out:
        return out
    at = out.index("--host") + 1
    return (*out[:at], host, *out[at + 1 :])


def connect_host(host: str) -> str:
    """Where a client on this host reaches a server bound to ``host``."""
    return "127.0.0.1" if host in _WILDCARD_HOSTS else host


def launch_spec(
    profile: Profile,
    deployment_id: str,
    *,
    simulate: bool,
    python: str = sys.executable,
    image: str | None = None,
) -> LaunchSpec:
    """What a runtime needs to start ``profile`` as ``deployment_id``.

    Real: the release's launcher (``sglang serve <args>``). Simulate: ``<python> -m kctl.sim
    <the same args>``. The simulator env (``KCTL_SIM_SPEEDUP``/``KCTL_SIM_LOAD_S``, and
    ``KCTL_SIM_SGLANG_VERSION``: the release it imitates) is
    added whenever the simulator stands in for SGLang: under ``simulate`` and for test
    images built with ``image.install_simulator``. ``image`` is the serving image tag
    (docker runtime), computed by the image module."""
    rel = profile_release(profile)
    args = server_args(profile.server, rel)
    argv = (python, "-m", SIM_MODULE, *args) if simulate else (*launcher(profile, rel), *args)
    env = profile.server.env
    if simulate or profile.image.install_simulator:
        sim_env = dict(simulator_env(profile)) | {SIM_RELEASE_ENV: rel.version}
        env = tuple(sorted((dict(env) | sim_env).items()))
    labels = (
        ("kctl.deployment", deployment_id),
        ("kctl.profile", profile.name),
        ("kctl.profile-hash", profile.content_hash),
        ("kctl.managed", "true"),
    )
    return LaunchSpec(
        deployment_id=deployment_id,
        profile_name=profile.name,
        profile_hash=profile.content_hash,
        argv=argv,
        env=env,
        host=connect_host(profile.server.host),
        port=profile.server.port,
        image=None if simulate else image,
        labels=labels,
        runtime=profile.runtime,
        secrets=profile.server.secrets,
        api_key=profile.server.api_key,
    )
