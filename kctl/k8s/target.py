"""What the Kubernetes objects are rendered from: a profile and a fleet, checked for what
Kubernetes cannot express, resolved into one :class:`Target` (image, GPUs per pod, the
launch argv as the profile's SGLang release spells it, labels). Pure; reads the kernel
package's files only to compute the content-addressed image tag, as ``kctl plan`` does.

Refused (:class:`NotExpressible`, exit 2), each with its fix:

* ``runtime.kind: local``: a host process, not a container;
* an image kctl builds (a kernel, the test simulator) with no ``k8s.registry``: the image
  exists only in the local Docker engine, and a cluster pulls from a registry;
* ``runtime.gpus`` as device indices: the device plugin picks a pod's GPUs;
* fewer GPUs per replica than the tensor-parallel size, or GPUs, TP or nodes that do not
  divide evenly between the nodes of a multi-node replica;
* a server bound to a loopback address (the fleet's ``bind``, else the profile's
  ``server.host``): probes and the Service reach the pod's IP;
* ``extra_args`` that set a multi-node flag kctl renders (``--nnodes`` and kin);
* a profile name that cannot be a label value, a namespace that is not a DNS label, a
  Kubernetes version older than the oldest whose schemas kctl's tests check;
* a fleet without ``k8s.cpu`` and ``k8s.memory`` (the pods would be BestEffort, the first
  evicted), or with less memory than ``runtime.shm_size`` (``/dev/shm`` is memory charged
  to the pod).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kctl.errors import InvalidInput
from kctl.fleet.spec import FleetSpec
from kctl.k8s import names
from kctl.launch import launcher, rebind, server_args
from kctl.profile.model import Profile
from kctl.profile.release import profile_release
from kctl.runtime import kind_of
from kctl.sglang.argv import check_argv
from kctl.sglang.kernel_support import kernel_choices
from kctl.sglang.releases import Release

#: the oldest Kubernetes minor the objects are written for and checked against
MIN_VERSION = (1, 25)
#: SGLang's multi-node flags (by dest) that kctl renders for a multi-node replica
MULTI_NODE_DESTS = ("nnodes", "node_rank", "dist_init_addr")
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _loopback(host: str) -> bool:
    return host in _LOOPBACK or host.startswith("127.")


class NotExpressible(InvalidInput):
    """Kubernetes objects cannot say what the profile and fleet ask for (exit 2).
    ``problems``: one line per reason, each with its fix."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        head = "cannot render Kubernetes objects: " + (
            problems[0] if len(problems) == 1 else f"{len(problems)} problems"
        )
        body = "" if len(problems) == 1 else "\n" + "\n".join(f"  {p}" for p in problems)
        super().__init__(head + body)


@dataclass(frozen=True)
class Target:
    """A profile on a fleet, resolved for Kubernetes."""

    profile: Profile
    fleet: FleetSpec
    release: Release
    #: the image every pod runs (a registry reference)
    image: str
    #: where the image comes from: ``image.base`` or the kctl build pushed to the registry
    image_source: str
    #: GPUs per pod (0: no GPU resource requested)
    gpus_per_pod: int
    #: the container's argv: the release's launcher, then the server arguments
    argv: tuple[str, ...]
    #: where the multi-node flags go in ``argv``: after kctl's own, before ``extra_args``
    extra_from: int

    @property
    def nodes(self) -> int:
        return self.fleet.k8s.nodes_per_replica

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1


def _version_problem(version: str) -> str | None:
    major, minor = (int(x) for x in version.split("."))
    if (major, minor) < MIN_VERSION:
        oldest = ".".join(map(str, MIN_VERSION))
        return f"k8s.version {version}: older than {oldest}, the oldest Kubernetes kctl renders for; fix: k8s.version: '{oldest}' or newer"
    return None


def _image(profile: Profile, fleet: FleetSpec) -> tuple[str, str] | str:
    """``(image, source)``, or why there is none."""
    img = profile.image
    if img.kernel_source is None and not img.install_simulator:
        return img.base, "image.base (no kernel: SGLang as the base image ships it)"
    from kctl.image.context import build_context

    tag = build_context(profile).tag
    if fleet.k8s.registry is None:
        return (
            f"the profile's image {tag} is built by kctl from image.kernel_source and exists "
            "only in the local Docker engine; a cluster pulls images from a registry; fix: "
            f"`kctl build {profile.source}`, `docker tag {tag} REGISTRY/{tag}`, "
            f"`docker push REGISTRY/{tag}`, and set k8s.registry: REGISTRY in the fleet file"
        )
    return f"{fleet.k8s.registry}/{tag}", f"kctl build {tag}, pushed to {fleet.k8s.registry}"


_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_UNITS |= {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DOCKER_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def memory_bytes(amount: str) -> float:
    """A memory quantity the fleet model admitted (``512Gi``, ``4G``, ``1000``) in bytes."""
    number = amount.rstrip("KMGTPEikmgtpe")
    return float(number) * _UNITS[amount[len(number) :]]


def _resource_problems(profile: Profile, fleet: FleetSpec) -> list[str]:
    """Why the serving pods cannot be Guaranteed with the fleet's CPU and memory."""
    k8s, src = fleet.k8s, fleet.source
    missing = [key for key in ("cpu", "memory") if getattr(k8s, key) is None]
    if missing:
        return [
            f"{src}: k8s.{' and k8s.'.join(missing)} not set: without CPU and memory requests "
            "the pods are BestEffort, the first a node under pressure evicts; fix: set both "
            "(requests = limits, Guaranteed QoS), e.g. k8s: {cpu: '32', memory: '512Gi'}"
        ]
    shm = profile.runtime.shm_size
    assert k8s.memory is not None
    digits = shm.rstrip("bkmgBKMG")  # a docker size: binary units, as --shm-size reads it
    shm_bytes = int(digits) * _DOCKER_UNITS[shm[len(digits) :].lower()]
    if memory_bytes(k8s.memory) <= shm_bytes:
        return [
            f"{src}: k8s.memory {k8s.memory} does not exceed {profile.source}'s runtime.shm_size "
            f"{shm}: /dev/shm is memory charged to the pod; fix: k8s.memory above the shm "
            "size plus the server's own (tokenizer, scheduler, pinned buffers)"
        ]
    return []


def _gpus(profile: Profile, fleet: FleetSpec) -> int | str:
    """GPUs per pod, or why the fleet cannot give them."""
    gpus = profile.runtime.gpus
    nodes = fleet.k8s.nodes_per_replica
    tp = profile.server.tp
    if isinstance(gpus, tuple) and gpus:
        return (
            f"runtime.gpus lists device indices {list(gpus)}; on Kubernetes the device plugin "
            "picks a pod's GPUs; fix: runtime.gpus: all, and the count in the fleet's "
            "gpus_per_replica (default: server.tp)"
        )
    if gpus == ():
        if fleet.gpus_per_replica:
            return (
                f"runtime.gpus is [] (no GPUs) but the fleet reserves gpus_per_replica: "
                f"{fleet.gpus_per_replica}; fix: one of them"
            )
        return 0
    total = fleet.gpus_per_replica if fleet.gpus_per_replica is not None else tp
    if total < tp:
        return f"gpus_per_replica {total} is below server.tp {tp}: SGLang needs one GPU per tensor-parallel rank; fix: gpus_per_replica: {tp}"
    if total % nodes or tp % nodes:
        return (
            f"a replica spans k8s.nodes_per_replica {nodes} nodes, so its GPUs ({total}) and "
            f"server.tp ({tp}) must divide evenly between them; fix: nodes_per_replica that divides both"
        )
    return total // nodes


def _argv_problems(target_argv: list[str], rel: Release, own: int) -> list[str]:
    fix = "remove it from server.extra_args: kctl render --k8s sets it from k8s.nodes_per_replica"
    managed = {dest: fix for dest in MULTI_NODE_DESTS}
    return [
        f"server.extra_args: {p.message}; fix: {p.fix}"
        for p in check_argv(rel, target_argv, managed, own=own, extra_choices=kernel_choices(rel))
        if p.severity == "error"
    ]


def resolve(profile: Profile, fleet: FleetSpec) -> Target:
    """The :class:`Target` of ``profile`` on ``fleet``; :class:`NotExpressible` lists
    every reason Kubernetes cannot run it."""
    problems: list[str] = []
    src = profile.source
    if not kind_of(profile.runtime.kind).runs_images:
        problems.append(
            f"{src}: runtime.kind: {profile.runtime.kind!r} runs SGLang as a host process; "
            "Kubernetes runs containers; fix: render a profile with runtime.kind: docker"
        )
    if fleet.bind is None and _loopback(profile.server.host):
        problems.append(
            f"{src}: server.host: {profile.server.host!r} is reachable only inside the pod; "
            "the kubelet's probes and the Service connect to the pod's IP; fix: bind: 0.0.0.0 "
            f"in {fleet.source or 'the fleet file'} (the NetworkPolicy limits who reaches it)"
        )
    elif fleet.bind is not None and _loopback(fleet.bind):
        problems.append(
            f"{fleet.source}: bind: {fleet.bind!r} is reachable only inside the pod; the "
            "kubelet's probes and the Service connect to the pod's IP; fix: bind: 0.0.0.0"
        )
    if why := names.label_value(profile.name):
        problems.append(
            f"{src}: profile name {profile.name!r}: as a label value it {why}; fix: rename the file"
        )
    if why := names.dns_label(fleet.k8s.namespace):
        problems.append(f"{fleet.source}: k8s.namespace: {fleet.k8s.namespace!r} {why}")
    if why := names.resource_name(fleet.k8s.gpu_resource):
        problems.append(f"{fleet.source}: k8s.gpu_resource: {fleet.k8s.gpu_resource!r} {why}")
    if why := _version_problem(fleet.k8s.version):
        problems.append(f"{fleet.source}: {why}")
    problems += _resource_problems(profile, fleet)
    image = _image(profile, fleet)
    if isinstance(image, str):
        problems.append(f"{src}: {image}")
    gpus = _gpus(profile, fleet)
    if isinstance(gpus, str):
        problems.append(f"{src} on {fleet.source}: {gpus}")
    rel = profile_release(profile)
    args = list(rebind(server_args(profile.server, rel), fleet.bind))
    own = len(args) - len(profile.server.extra_args)
    probe = [*args[:own], *multi_node_args(rel, fleet, rank="1"), *args[own:]]
    problems += (
        f"{src}: {line}" for line in _argv_problems(probe, rel, own + len(probe) - len(args))
    )
    if problems or isinstance(image, str) or isinstance(gpus, str):
        raise NotExpressible(problems)
    head = launcher(profile, rel)
    return Target(
        profile=profile,
        fleet=fleet,
        release=rel,
        image=image[0],
        image_source=image[1],
        gpus_per_pod=gpus,
        argv=(*head, *args),
        extra_from=len(head) + own,
    )


#: set by the LeaderWorkerSet controller in every pod of a group (LWS API reference)
LWS_LEADER_ADDRESS = "LWS_LEADER_ADDRESS"
LWS_WORKER_INDEX = "LWS_WORKER_INDEX"


def multi_node_args(rel: Release, fleet: FleetSpec, *, rank: str) -> list[str]:
    """SGLang's multi-node flags as ``rel`` spells them: the leader's address (the
    kubelet expands ``$(LWS_LEADER_ADDRESS)`` from the env LWS injects), the node count,
    and this pod's rank. Empty for a single-node replica."""
    nodes = fleet.k8s.nodes_per_replica
    if nodes == 1:
        return []
    addr = f"$({LWS_LEADER_ADDRESS}):{fleet.k8s.dist_init_port}"
    return [
        rel.spelling("--dist-init-addr", "--nccl-init-addr"),
        addr,
        rel.spelling("--nnodes"),
        str(nodes),
        rel.spelling("--node-rank"),
        rank,
    ]


def seconds(value: float) -> int:
    """A duration as the whole seconds Kubernetes fields take, never rounded down to 0."""
    return max(1, math.ceil(value))
