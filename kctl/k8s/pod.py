"""The SGLang pod as Kubernetes data: the container kctl's docker runtime runs
(:mod:`kctl.runtime.docker.spec`), said the way a pod says it. Pure functions.

Docker run spec -> pod:

* the container's command (Docker's CMD) -> ``args`` (Kubernetes' CMD), so the image's
  entrypoint runs as under ``docker run``;
* ``shm_size`` -> ``/dev/shm`` as a memory-backed ``emptyDir`` of that size;
* ``init: true`` (docker-init forwards SIGTERM and reaps SGLang's workers) ->
  ``shareProcessNamespace: true``: the pod's pause process is PID 1 and reaps, and the
  server, no longer PID 1, dies on SIGTERM by default (a Python PID 1 ignores SIGTERM until
  it installs a handler, which SGLang's HTTP server does after the model load). The pod
  has one container, so the shared namespace shows it nothing but the pause process;
* GPU device requests -> ``resources[<gpu_resource>]``; the fleet's ``k8s.cpu`` and
  ``k8s.memory`` -> requests equal to limits, so the pod is Guaranteed (QoS);
* bind mounts -> ``hostPath`` volumes of type ``Directory`` (the weights are on every
  node, as on the host; a missing directory fails the pod instead of being created empty);
  a mount that holds the model (``server.model_path``, the draft model) is read-only
  whatever the profile says;
* least privilege: no privilege escalation, every capability dropped, the runtime's
  default seccomp profile. Not ``runAsNonRoot``: SGLang's images run as root and keep
  their caches under ``/root``;
* ``stop_timeout_s`` -> ``terminationGracePeriodSeconds``;
* host networking, ``ipc=host`` and the memlock/stack ulimits are not rendered: the pod has
  its own network (a Service in front), ``/dev/shm`` replaces the host IPC namespace, and
  ulimits are the container runtime's settings on the node.
"""

from __future__ import annotations

import os
import re
from typing import Any

from kctl.k8s.target import LWS_WORKER_INDEX, Target, multi_node_args, seconds
from kctl.launch import SIM_RELEASE_ENV, simulator_env
from kctl.profile.model import SecretRef
from kctl.runtime.docker.spec import CONTAINER_CONFIG

CONTAINER = "sglang"
PORT_NAME = "http"
#: SGLang's health endpoints: ``/health`` answers once the server runs; ``/health_generate``
#: runs a one-token generation first. Every release in kctl's table (0.5.9 on) serves both.
HEALTH = "/health"
HEALTH_GENERATE = "/health_generate"
#: how often a serving pod's readiness and liveness are probed
READY_PERIOD_S = 10
LIVE_PERIOD_S = 30
#: labels that select a fleet's pods (never the profile: a new profile is an update of the
#: same workload, and a selector cannot change)
SELECTOR_KEYS = ("app.kubernetes.io/name", "app.kubernetes.io/instance")
_SIZE = re.compile(r"^(\d+)([bkmgBKMG]?)$")
_BINARY = {"": "", "b": "", "k": "Ki", "m": "Mi", "g": "Gi"}


def quantity(docker_size: str) -> str:
    """A docker size (``32g``: binary units, as ``--shm-size`` reads it) as a Kubernetes
    quantity (``32Gi``)."""
    m = _SIZE.match(docker_size)
    if m is None:  # the profile model allows nothing else
        raise ValueError(f"not a docker size: {docker_size!r}")
    return m.group(1) + _BINARY[m.group(2).lower()]


def selector(target: Target) -> dict[str, str]:
    return {SELECTOR_KEYS[0]: "sglang", SELECTOR_KEYS[1]: target.fleet.name}


def labels(target: Target) -> dict[str, str]:
    """Labels of every object and pod: the fleet, the profile and its content hash (the
    first 12 hex digits, as kctl prints it; the whole hash is an annotation)."""
    p = target.profile
    return {
        **selector(target),
        "app.kubernetes.io/managed-by": "kctl",
        "kctl.fleet": target.fleet.name,
        "kctl.profile": p.name,
        "kctl.profile-hash": p.content_hash[:12],
    }


def fingerprint_annotations(target: Target) -> dict[str, str]:
    """The whole fingerprint (the hash kctl's store records), the release and the image's
    origin."""
    return {
        "kctl.profile-hash": target.profile.content_hash,
        "kctl.sglang-release": target.release.version,
        "kctl.image-source": target.image_source,
    }


#: the Kubernetes Secret a secret reference without ``k8s:`` names
DEFAULT_SECRET = "kctl-secrets"


def secret_key_ref(name: str, ref: SecretRef) -> dict[str, str]:
    """The ``secretKeyRef`` of a secret reference: its ``k8s: name/key``, else
    :data:`DEFAULT_SECRET` and the variable's name in lower case, ``_`` as ``-``."""
    if ref.k8s is not None:
        secret, key = ref.k8s.split("/", 1)
        return {"name": secret, "key": key}
    return {"name": DEFAULT_SECRET, "key": name.lower().replace("_", "-")}


def _env(target: Target) -> list[dict[str, Any]]:
    env = dict(target.profile.server.env)
    if target.profile.image.install_simulator:  # a test image: the simulator stands in
        env |= dict(simulator_env(target.profile)) | {SIM_RELEASE_ENV: target.release.version}
    out: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in env.items()]
    # secrets are the cluster's: the pod names the Secret, never a value
    out += [
        {"name": k, "valueFrom": {"secretKeyRef": secret_key_ref(k, ref)}}
        for k, ref in target.profile.server.secrets
    ]
    return sorted(out, key=lambda e: str(e["name"]))


def _http(path: str) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": PORT_NAME, "scheme": "HTTP"}}


def probes(target: Target) -> dict[str, dict[str, Any]]:
    """The serving container's probes from the profile's ``health`` section.

    startup: ``/health`` every ``poll_interval_s`` until ``deadline_s`` (the model load:
    5.5 minutes for Kimi K2.6; liveness and readiness wait for it). readiness:
    ``/health_generate`` (a real generation) when ``require_generation``, else ``/health``.
    liveness: ``/health``, three misses in a row. Each request may take
    ``request_timeout_s``."""
    h = target.profile.health
    period = seconds(h.poll_interval_s)
    timeout = seconds(h.request_timeout_s)
    ready = HEALTH_GENERATE if h.require_generation else HEALTH
    return {
        "startupProbe": {
            **_http(HEALTH),
            "periodSeconds": period,
            "timeoutSeconds": timeout,
            "failureThreshold": max(1, -(-seconds(h.deadline_s) // period)),
        },
        "readinessProbe": {
            **_http(ready),
            "periodSeconds": READY_PERIOD_S,
            "timeoutSeconds": timeout,
            "failureThreshold": 3,
        },
        "livenessProbe": {
            **_http(HEALTH),
            "periodSeconds": LIVE_PERIOD_S,
            "timeoutSeconds": timeout,
            "failureThreshold": 3,
        },
    }


def holds_model(target: Target, container_path: str) -> bool:
    """Whether a mount at ``container_path`` holds the model or the draft model."""
    server = target.profile.server
    spec = server.speculative
    models = [server.model_path] + (
        [spec.draft_model_path] if spec and spec.draft_model_path else []
    )
    root = container_path.rstrip("/") + "/"
    return any(m == container_path or m.startswith(root) for m in models)


def _volumes(target: Target) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(volumes, volumeMounts)``: /dev/shm, then the profile's bind mounts (``Directory``:
    never created on the node; read-only when the profile says so or they hold the model)."""
    rt = target.profile.runtime
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": quantity(rt.shm_size)}}
    ]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    for i, v in enumerate(rt.volumes):
        name = f"vol-{i}"
        read_only = v.read_only or holds_model(target, v.container)
        volumes.append({"name": name, "hostPath": {"path": v.host, "type": "Directory"}})
        mounts.append({"name": name, "mountPath": v.container, "readOnly": read_only})
    key = target.profile.server.api_key
    if key is not None:
        # SGLang's --config file from the Secret (its key holds "api-key: <the key>"):
        # the key is in neither the args nor the pod spec
        ref = secret_key_ref("SGLANG_API_KEY", key)
        item = {"key": ref["key"], "path": os.path.basename(CONTAINER_CONFIG)}
        volumes.append({"name": "api-key", "secret": {"secretName": ref["name"], "items": [item]}})
        mounts.append(
            {"name": "api-key", "mountPath": os.path.dirname(CONTAINER_CONFIG), "readOnly": True}
        )
    return volumes, mounts


def guaranteed(cpu: str, memory: str, extra: dict[str, int] | None = None) -> dict[str, Any]:
    """``resources`` with requests equal to limits: the Guaranteed QoS class."""
    amounts: dict[str, Any] = {"cpu": cpu, "memory": memory, **(extra or {})}
    return {"requests": dict(amounts), "limits": dict(amounts)}


def least_privilege(*, non_root: bool = False) -> dict[str, Any]:
    """A container's ``securityContext``: no setuid gain, no capability, the runtime's
    seccomp profile; with ``non_root`` (the router, the smoke Job) also as nobody on a
    read-only root filesystem, which the serving container cannot be (SGLang's images run
    as root and write caches under /root). A fresh dict each call: YAML would otherwise
    write one shared twice as an anchor and an alias."""
    out: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if non_root:
        out |= {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534,
                "readOnlyRootFilesystem": True}  # fmt: skip
    return out


def container(target: Target, *, role: str) -> dict[str, Any]:
    """The SGLang container. ``role``: ``single`` (a Deployment's pod), ``leader`` or
    ``worker`` (a LeaderWorkerSet group: only the leader serves HTTP and is probed)."""
    argv = list(target.argv)
    at = target.extra_from
    if role != "single":
        rank = "0" if role == "leader" else f"$({LWS_WORKER_INDEX})"
        argv[at:at] = multi_node_args(target.release, target.fleet, rank=rank)
    if target.profile.server.api_key is not None:
        argv += ["--config", CONTAINER_CONFIG]  # as the docker runtime passes it
    _, mounts = _volumes(target)
    out: dict[str, Any] = {
        "name": CONTAINER,
        "image": target.image,
        "imagePullPolicy": "IfNotPresent",
        "args": argv,
        "env": _env(target),
    }
    if role != "worker":
        port = target.profile.server.port
        out["ports"] = [{"name": PORT_NAME, "containerPort": port, "protocol": "TCP"}]
    if role == "leader":
        out["ports"].append(
            {
                "name": "dist-init",
                "containerPort": target.fleet.k8s.dist_init_port,
                "protocol": "TCP",
            }
        )
    k8s = target.fleet.k8s
    assert k8s.cpu is not None and k8s.memory is not None  # resolve() refuses a fleet without
    gpus = {k8s.gpu_resource: target.gpus_per_pod} if target.gpus_per_pod else {}
    out["resources"] = guaranteed(k8s.cpu, k8s.memory, gpus)
    out["securityContext"] = least_privilege()
    out["volumeMounts"] = mounts
    if role != "worker":
        out |= probes(target)
    return out


def node_selector(target: Target) -> dict[str, str]:
    """``k8s.node_label``, else ``swarm.node_label`` (the same fleet's nodes), as a map."""
    label = target.fleet.k8s.node_label or target.fleet.swarm.node_label
    if label is None:
        return {}
    key, _, value = label.partition("=")
    return {key: value}


def near(pods: dict[str, str], *, required: bool) -> dict[str, Any]:
    """An ``affinity`` for the nodes that run pods labelled ``pods`` (their images pulled)."""
    term = {"labelSelector": {"matchLabels": dict(pods)}, "topologyKey": "kubernetes.io/hostname"}
    if required:
        return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    return {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": term}
            ]
        }
    }


def pod_template(
    target: Target, *, role: str, extra_labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A PodTemplateSpec running :func:`container`."""
    volumes, _ = _volumes(target)
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": seconds(target.profile.runtime.stop_timeout_s),
        # docker's init: the pause process reaps, and SIGTERM ends a loading server (the
        # module docstring); one container, so nothing else is visible across it
        "shareProcessNamespace": True,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        # SGLang never calls the Kubernetes API: no token in the pod
        "automountServiceAccountToken": False,
        "containers": [container(target, role=role)],
        "volumes": volumes,
    }
    if selector_map := node_selector(target):
        spec["nodeSelector"] = selector_map
    return {
        "metadata": {
            "labels": {**labels(target), **(extra_labels or {})},
            "annotations": fingerprint_annotations(target),
        },
        "spec": spec,
    }
