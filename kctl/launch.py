"""The server launch as data: SGLang's ``launch_server`` flags and the :class:`LaunchSpec`
a runtime acts on. Pure functions; tests compare their results by equality.

Flag spellings follow SGLang 0.5.10 ``sglang/srt/server_args.py``.
"""

from __future__ import annotations

import sys

from kctl.profile.model import Profile, ServerSpec
from kctl.runtime.base import LaunchSpec

#: the production server command; the simulator image's ``sglang`` shim answers it too
SGLANG_ENTRY = ("python3", "-m", "sglang.launch_server")
#: the simulator as run by ``--simulate`` (with the running interpreter)
SIM_MODULE = "kctl.sim"
#: addresses a server binds to that a client cannot connect to as such
_WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def _num(value: float) -> str:
    """Numbers as a user would type them: 50.0 -> '50', 0.85 -> '0.85'."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def server_args(server: ServerSpec) -> tuple[str, ...]:
    """The ``sglang.launch_server`` arguments for ``server``, in a fixed order, with
    ``extra_args`` last so they may add anything kctl does not model."""
    args: list[str] = ["--model-path", server.model_path]
    if server.served_model_name:
        args += ["--served-model-name", server.served_model_name]
    args += [
        "--host", server.host,
        "--port", str(server.port),
        "--tp-size", str(server.tp),
        "--attention-backend", server.attention_backend,
    ]  # fmt: skip
    if not server.cuda_graphs:
        args.append("--disable-cuda-graph")
    elif server.cuda_graph_max_bs is not None:
        # only meaningful with graphs; an eager profile may inherit it from a shared base
        args += ["--cuda-graph-max-bs", str(server.cuda_graph_max_bs)]
    if server.mem_fraction_static is not None:
        args += ["--mem-fraction-static", _num(server.mem_fraction_static)]
    if server.trust_remote_code:
        args.append("--trust-remote-code")
    args += ["--kv-cache-dtype", server.kv_cache_dtype]
    spec = server.speculative
    if spec is not None:
        args += ["--speculative-algorithm", spec.algorithm]
        if spec.draft_model_path is not None:
            args += ["--speculative-draft-model-path", spec.draft_model_path]
        args += [
            "--speculative-num-steps", str(spec.num_steps),
            "--speculative-eagle-topk", str(spec.eagle_topk),
            "--speculative-num-draft-tokens", str(spec.num_draft_tokens),
        ]  # fmt: skip
    args += server.extra_args
    return tuple(args)


def simulator_env(profile: Profile) -> tuple[tuple[str, str], ...]:
    """The env that makes the simulator follow the profile's ``simulator:`` section."""
    return (
        ("KCTL_SIM_SPEEDUP", _num(profile.simulator.speedup)),
        ("KCTL_SIM_LOAD_S", _num(profile.simulator.load_s)),
    )


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

    Real: ``python3 -m sglang.launch_server <args>``. Simulate: ``<python> -m kctl.sim
    <the same args>``. The simulator env (``KCTL_SIM_SPEEDUP``/``KCTL_SIM_LOAD_S``) is
    added whenever the simulator stands in for SGLang: under ``simulate`` and for test
    images built with ``image.install_simulator``. ``image`` is the serving image tag
    (docker runtime), computed by the image module."""
    args = server_args(profile.server)
    argv = (python, "-m", SIM_MODULE, *args) if simulate else (*SGLANG_ENTRY, *args)
    env = profile.server.env
    if simulate or profile.image.install_simulator:
        env = tuple(sorted((dict(env) | dict(simulator_env(profile))).items()))
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
    )
