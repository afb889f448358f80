"""The serving container as data: :func:`run_spec` turns a :class:`LaunchSpec` and the
profile's :class:`RuntimeSpec` into the keyword arguments of ``containers.create``, the way
SGLang documents its ``docker run`` (host network, ``ipc=host``, shm size, GPU device
requests, memlock ulimit). Pure functions: ``kctl plan`` shows them, tests compare them by
equality. Nothing here talks to Docker.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from kctl.errors import KctlError
from kctl.profile.model import Profile, RuntimeSpec
from kctl.runtime.base import LaunchSpec
from kctl.secrets import describe

#: labels kctl puts on every container it creates
LABEL_MANAGED = "kctl.managed"
LABEL_DEPLOYMENT = "kctl.deployment"
LABEL_PROFILE = "kctl.profile"
LABEL_PROFILE_HASH = "kctl.profile-hash"
LABEL_SPEC_HASH = "kctl.spec-hash"
LABEL_PORT = "kctl.port"
#: the state dir whose store knows the container: two kctl state dirs (a test's and the
#: host's) never prune or reconcile each other's containers
LABEL_OWNER = "kctl.owner"

# SGLang's documented `docker run` sets --ulimit memlock=-1 --ulimit stack=67108864
_ULIMITS = (
    {"Name": "memlock", "Soft": -1, "Hard": -1},
    {"Name": "stack", "Soft": 67108864, "Hard": 67108864},
)
_NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]+")


def container_name(profile_name: str, deployment_id: str) -> str:
    """``kctl-<profile>-<deployment-id>``, reduced to the characters docker accepts."""
    parts = (_NAME_UNSAFE.sub("-", p).strip("-.") for p in (profile_name, deployment_id))
    return "-".join(["kctl", *(p for p in parts if p)])


#: where a container finds the ``--config`` file that holds its API key
CONTAINER_CONFIG = "/run/kctl/sglang-config.yaml"


def api_key_file(owner: str | None, name: str) -> Path:
    """The host file (in the state dir, 0600) the container's API key is written to."""
    if owner is None:
        raise KctlError(
            "server.api_key with the docker runtime needs kctl's state dir",
            hint="run the container through kctl (deploy), which knows its state dir",
        )
    return Path(owner) / "secrets" / f"{name}.yaml"


def device_requests(gpus: str | tuple[int, ...]) -> list[dict[str, Any]]:
    """Docker device requests for ``runtime.gpus``: "all", listed indices, or none."""
    if gpus == "all":
        return [{"Driver": "nvidia", "Count": -1, "Capabilities": [["gpu"]]}]
    if not gpus:
        return []
    return [{"Driver": "nvidia", "DeviceIDs": [str(i) for i in gpus], "Capabilities": [["gpu"]]}]


def spec_hash(spec: dict[str, Any]) -> str:
    """Hash of what a container runs: image, command, env, mounts, devices, limits.
    Name and labels are left out, so a later deployment of the same server (a rollback
    to the known-good) matches the stopped container of an earlier one."""
    relevant = {k: v for k, v in spec.items() if k not in ("name", "labels")}
    blob = json.dumps(relevant, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def run_spec(
    launch: LaunchSpec, runtime: RuntimeSpec, *, name: str | None = None, owner: str | None = None
) -> dict[str, Any]:
    """The keyword arguments of ``docker.containers.create`` for one serving container.

    A pure function: equal inputs give equal dicts. ``name`` defaults to
    :func:`container_name`. The container has no restart policy: a crash must surface at
    once in the health check, not be hidden by a restart loop. ``owner`` (the state dir)
    becomes the ``kctl.owner`` label.
    """
    if launch.image is None:
        raise KctlError(
            f"deployment {launch.deployment_id}: no image to run",
            hint="the docker runtime needs the built image tag in LaunchSpec.image",
        )
    name = name or container_name(launch.profile_name, launch.deployment_id)
    command = list(launch.argv)
    volumes = {
        v.host: {"bind": v.container, "mode": "ro" if v.read_only else "rw"}
        for v in runtime.volumes
    }
    if launch.api_key is not None:
        # the key reaches SGLang in a --config file, mounted read-only: never on the
        # command line (`ps`, `docker inspect`'s Args)
        volumes[str(api_key_file(owner, name))] = {"bind": CONTAINER_CONFIG, "mode": "ro"}
        command += ["--config", CONTAINER_CONFIG]
    spec: dict[str, Any] = {
        "image": launch.image,
        "command": command,
        "name": name,
        # secrets as references here (what plan shows, what the spec hash covers); the
        # runtime puts the values in only when it creates the container
        "environment": {**dict(launch.env), **{k: describe(r) for k, r in launch.secrets}},
        "network_mode": "host",
        "ipc_mode": "host",
        "shm_size": runtime.shm_size,
        "volumes": volumes,
        "restart_policy": {"Name": "no"},
        # docker-init as PID 1: forwards SIGTERM to the server (a Python PID 1 without a
        # handler ignores it, so `docker stop` would wait out the timeout) and reaps the
        # scheduler/detokenizer processes SGLang spawns
        "init": True,
    }
    requests = device_requests(runtime.gpus)
    if requests:
        spec["device_requests"] = requests
        # pinned host memory (CUDA, NCCL) wants an unlimited memlock; without GPUs (tests)
        # the engine's defaults apply, which also lets kctl run where raising the hard
        # memlock limit is not permitted (an unprivileged or nested engine)
        spec["ulimits"] = [dict(u) for u in _ULIMITS]
    labels = dict(launch.labels)
    labels.update(
        {
            LABEL_MANAGED: "true",
            LABEL_DEPLOYMENT: launch.deployment_id,
            LABEL_PROFILE: launch.profile_name,
            LABEL_PROFILE_HASH: launch.profile_hash,
            LABEL_PORT: str(launch.port),
        }
    )
    if owner is not None:
        labels[LABEL_OWNER] = owner
    spec["labels"] = labels
    labels[LABEL_SPEC_HASH] = spec_hash(spec)
    return spec


def plan_run_spec(
    launch: LaunchSpec, profile: Profile, *, state_dir: Path | None = None
) -> dict[str, Any]:
    """What ``kctl plan`` shows: :func:`run_spec` with the profile's runtime section (and
    the owner label of ``state_dir``, as :class:`DockerRuntime` adds it). ``launch.image``
    is the tag the build makes (``kctl.image.build_context``), set by the caller."""
    owner = str(Path(state_dir).resolve()) if state_dir is not None else None
    return run_spec(launch, launch.runtime or profile.runtime, owner=owner)
