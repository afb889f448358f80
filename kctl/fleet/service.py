"""The fleet's Swarm service as data: :func:`service_spec` turns a fleet, a profile and its
launch into the Engine API's ServiceSpec (a plain dict, what ``POST /services/create``
takes). Pure: ``kctl plan`` can show it and tests compare it by equality; only
:mod:`kctl.fleet.swarm` sends it.

One service per serving line (named after the fleet); a canary is a second, one-replica
service (``<fleet>-canary``) beside it. Every replica is the launch kctl renders on one
host, on host networking (bound to the fleet file's ``bind`` address when it names one, else
the profile's ``server.host``), behind a small start wrapper that gives replica slot ``i`` its
own port (``ports.first + i - 1``, from Swarm's ``{{.Task.Slot}}`` template) and passes
the GPUs Swarm reserved for it (generic resource ``DOCKER_RESOURCE_<kind>``) to
``CUDA_VISIBLE_DEVICES``. The profile's secrets are Docker secrets the wrapper reads
(:mod:`kctl.fleet.swarmsecrets`). The service's health check is SGLang's ``GET /health``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from kctl.fleet.spec import FleetSpec
from kctl.fleet.swarmsecrets import spec_secrets
from kctl.launch import rebind
from kctl.profile.model import Profile
from kctl.runtime.base import LaunchSpec

Role = Literal["main", "canary"]

LABEL_MANAGED = "kctl.managed"
LABEL_FLEET = "kctl.fleet"
LABEL_ROLE = "kctl.role"
LABEL_OWNER = "kctl.owner"
LABEL_DEPLOYMENT = "kctl.deployment"
LABEL_PROFILE = "kctl.profile"
LABEL_PROFILE_HASH = "kctl.profile-hash"

ENV_SLOT = "KCTL_SLOT"
ENV_PORT_BASE = "KCTL_PORT_BASE"
ENV_GPU_RESOURCE = "KCTL_GPU_RESOURCE"

#: the replica's start wrapper: its port from its slot, its GPUs from Swarm's reservation,
#: its secrets from the files Swarm mounts (:mod:`kctl.fleet.swarmsecrets`: each variable
#: from its file, the API key's file as ``--config``); then it becomes the server (exec),
#: so signals and the exit code are the server's
WRAPPER = """\
import os, sys
port = int(os.environ["KCTL_PORT_BASE"]) + int(os.environ["KCTL_SLOT"]) - 1
argv = sys.argv[1:]
argv[argv.index("--port") + 1] = str(port)
gpus = os.environ.get("DOCKER_RESOURCE_" + os.environ.get("KCTL_GPU_RESOURCE", ""))
if gpus:
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(g.removeprefix("GPU-") for g in gpus.split(","))
secrets = os.environ.pop("KCTL_SECRETS_DIR", "/run/secrets")
for name in filter(None, os.environ.pop("KCTL_SECRET_VARS", "").split(",")):
    with open(os.path.join(secrets, "kctl-env-" + name), encoding="utf-8") as f:
        os.environ[name] = f.read()
config = os.environ.pop("KCTL_CONFIG_SECRET", "")
if config:
    argv += ["--config", os.path.join(secrets, config)]
os.execvp(argv[0], argv)
"""

#: SGLang's health check (``GET /health`` answers 200 once the server serves), run inside
#: the replica on its own port
HEALTH_PROBE = (
    "import os, sys, urllib.request; "
    "port = int(os.environ['KCTL_PORT_BASE']) + int(os.environ['KCTL_SLOT']) - 1; "
    "sys.exit(0 if urllib.request.urlopen("
    "f'http://127.0.0.1:{port}/health', timeout={timeout}).status == 200 else 1)"
)

NS = 1_000_000_000


def _ns(seconds: float) -> int:
    return int(round(seconds * NS))


@dataclass(frozen=True)
class Placement:
    """Where replicas may run: node label and hostnames (from the fleet file), given the
    hostnames the Swarm has (a ``nodes`` list of more than one is expressed by excluding
    every other node: Swarm constraints cannot say "one of")."""

    constraints: tuple[str, ...]

    @classmethod
    def of(cls, fleet: FleetSpec, swarm_nodes: tuple[str, ...] = ()) -> Placement:
        out: list[str] = []
        if fleet.swarm.node_label:
            key, _, value = fleet.swarm.node_label.partition("=")
            out.append(f"node.labels.{key}=={value}")
        wanted = fleet.swarm.nodes
        if len(wanted) == 1:
            out.append(f"node.hostname=={wanted[0]}")
        elif wanted:
            out += [f"node.hostname!={h}" for h in sorted(set(swarm_nodes) - set(wanted))]
        return cls(tuple(out))


def service_name(fleet: FleetSpec, role: Role = "main") -> str:
    return fleet.name if role == "main" else f"{fleet.name}-canary"


def gpus_per_replica(fleet: FleetSpec, profile: Profile) -> int:
    return profile.server.tp if fleet.gpus_per_replica is None else fleet.gpus_per_replica


def labels(
    fleet: FleetSpec, profile: Profile, deployment_id: str, role: Role, owner: str
) -> dict[str, str]:
    """What identifies a service and each of its containers as this fleet's, and what runs."""
    return {
        LABEL_MANAGED: "true",
        LABEL_FLEET: fleet.name,
        LABEL_ROLE: role,
        LABEL_OWNER: owner,
        LABEL_DEPLOYMENT: deployment_id,
        LABEL_PROFILE: profile.name,
        LABEL_PROFILE_HASH: profile.content_hash,
    }


def _update_config(fleet: FleetSpec) -> dict[str, Any]:
    """Swarm's rolling update: ``parallelism`` replicas at a time, stop-first (each slot
    keeps its port; the others serve meanwhile); a moved batch must stay healthy for the
    monitor window, and the next batch waits as long (kctl smoke-gates the batch in that
    window); any failed task rolls the whole service back (Swarm's failure action)."""
    monitor = _ns(fleet.rollout.monitor_s)
    return {
        "Parallelism": fleet.rollout.parallelism,
        "Delay": monitor,
        "Monitor": monitor,
        "FailureAction": "rollback",
        "MaxFailureRatio": 0,
        "Order": "stop-first",
    }


def _rollback_config(fleet: FleetSpec) -> dict[str, Any]:
    return {
        "Parallelism": fleet.rollout.parallelism,
        "Delay": 0,
        "Monitor": _ns(min(fleet.rollout.monitor_s, 5.0)),
        "FailureAction": "pause",
        "MaxFailureRatio": 0,
        "Order": "stop-first",
    }


def _healthcheck(profile: Profile) -> dict[str, Any]:
    h = profile.health
    timeout = max(1.0, min(h.request_timeout_s, 30.0))
    return {
        "Test": ["CMD", "python3", "-c", HEALTH_PROBE.replace("{timeout}", f"{timeout:g}")],
        "Interval": _ns(max(0.5, min(h.poll_interval_s, 10.0))),
        "Timeout": _ns(timeout),
        "Retries": 3,
        "StartPeriod": _ns(h.deadline_s),
    }


def service_spec(
    fleet: FleetSpec,
    profile: Profile,
    launch: LaunchSpec,
    *,
    role: Role = "main",
    owner: str,
    placement: Placement | None = None,
) -> dict[str, Any]:
    """The Engine API ServiceSpec of the fleet's service (``role`` main) or of its canary.

    The main service runs ``fleet.replicas`` replicas on ports ``ports.first`` on, restarts
    a replica that dies (the orchestrator's job); the canary runs one, on the port after
    the last replica's, and is never restarted (a crash must surface at once, as on one host).
    A launch without an image (``--simulate``) renders ``Image: ""``; Swarm refuses it."""
    tags = labels(fleet, profile, launch.deployment_id, role, owner)
    base = fleet.port(0) if role == "main" else fleet.port(0, spare=True)
    secrets, secret_env = spec_secrets(profile)
    env = {**dict(launch.env), **secret_env, ENV_SLOT: "{{.Task.Slot}}", ENV_PORT_BASE: str(base)}
    gpus = gpus_per_replica(fleet, profile)
    if gpus:
        env[ENV_GPU_RESOURCE] = fleet.swarm.gpu_resource
    container: dict[str, Any] = {
        # None under --simulate: the simulated orchestrator runs the argv as a local process
        "Image": launch.image or "",
        "Command": ["python3", "-c", WRAPPER],
        # the fleet file's bind, if any, in place of the profile's --host
        "Args": list(rebind(launch.argv, fleet.bind)),
        "Env": [f"{k}={v}" for k, v in sorted(env.items())],
        "Labels": tags,
        "Init": True,
        "StopGracePeriod": _ns(profile.runtime.stop_timeout_s),
        "Healthcheck": _healthcheck(profile),
        "Mounts": [
            {"Type": "bind", "Source": v.host, "Target": v.container, "ReadOnly": v.read_only}
            for v in profile.runtime.volumes
        ],
    }
    if secrets:  # references here: the runner creates the Docker secrets at deploy time
        container["Secrets"] = secrets
    task: dict[str, Any] = {
        "ContainerSpec": container,
        "RestartPolicy": {"Condition": "any" if role == "main" else "none", "Delay": _ns(1.0)},
        "Networks": [{"Target": "host"}],
        "Placement": {"Constraints": list((placement or Placement.of(fleet)).constraints)},
    }
    if gpus:
        task["Resources"] = {
            "Reservations": {
                "GenericResources": [
                    {"DiscreteResourceSpec": {"Kind": fleet.swarm.gpu_resource, "Value": gpus}}
                ]
            }
        }
    return {
        "Name": service_name(fleet, role),
        "Labels": dict(tags),
        "TaskTemplate": task,
        "Mode": {"Replicated": {"Replicas": fleet.replicas if role == "main" else 1}},
        "UpdateConfig": _update_config(fleet),
        "RollbackConfig": _rollback_config(fleet),
    }
