"""The fleet file: where a serving line runs and how a rollout moves it.

A fleet file sits beside the profiles and names no model, image or flag: the profile given to
``kctl deploy`` says *what* serves, the fleet file says *where* (the Swarm manager, the nodes),
*how many* (replicas, GPUs each) and *how a rollout moves* (canary, waves, healthy floor).
The same two files render the Kubernetes objects (``kctl render --k8s``).

Example (``fleets/example.yaml``)::

    kind: fleet
    name: kimi-k26
    swarm:
      manager: unix:///var/run/docker.sock
      node_label: kctl.fleet=kimi-k26
      engines: {gpu-2: "ssh://root@gpu-2", gpu-3: "ssh://root@gpu-3"}
    replicas: 4
    gpus_per_replica: 8
    ports: {first: 30000}
    rollout: {canary: 1, parallelism: 1, monitor_s: 30, min_healthy: 3}
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import field
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, model_validator
from pydantic.dataclasses import dataclass

from kctl.profile.fields import Host, Port
from kctl.profile.rules import NonNegInt, PosFloat, PosInt, Str, problem, says

CONFIG = ConfigDict(extra="forbid")

#: a Swarm service / Kubernetes object name: a DNS label
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$"
FleetName = Annotated[
    str,
    Field(pattern=NAME_PATTERN),
    says("must be a lower-case DNS label of at most 40 characters, e.g. 'kimi-k26'"),
]
#: ``key=value`` as ``docker node update --label-add`` and Kubernetes node selectors take it
LABEL_PATTERN = r"^[A-Za-z0-9][-A-Za-z0-9_./]*=[-A-Za-z0-9_.]*$"
NodeLabel = Annotated[
    str, Field(pattern=LABEL_PATTERN), says("must be a node label 'key=value', e.g. 'gpu=pro6000'")
]
#: Swarm generic resource kind / Kubernetes extended resource, e.g. NVIDIA-GPU, nvidia.com/gpu
ResourceName = Annotated[
    str,
    Field(pattern=r"^[A-Za-z0-9][-A-Za-z0-9_./]*$"),
    says("must be a resource name, e.g. 'NVIDIA-GPU'"),
]


def _quantity(pattern: str, message: str) -> Any:
    """A Kubernetes quantity as text (``cpu: 32`` in YAML is read as ``'32'``); zero refused."""
    compiled = re.compile(pattern)

    def check(value: Any) -> str:
        text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
        if not isinstance(text, str) or not compiled.match(text) or not re.search(r"[1-9]", text):
            raise problem(message)
        return text

    return BeforeValidator(check)


#: CPUs as Kubernetes counts them: whole or decimal cores, or millicores
Cpu = Annotated[
    str,
    _quantity(
        r"^([0-9]+(\.[0-9]+)?|[0-9]+m)$",
        "must be a CPU quantity above 0: cores ('32', '0.5') or millicores ('500m')",
    ),
]
#: memory in bytes with a binary (Ki..Ei) or decimal (k..E) suffix
Memory = Annotated[
    str,
    _quantity(
        r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$",
        "must be a memory quantity above 0, e.g. '512Gi' or '4Gi' (Ki, Mi, Gi, Ti binary; k, M, G, T decimal)",
    ),
]
#: a container image reference, as ``docker pull`` takes it
ImageRef = Annotated[
    str,
    Field(pattern=r"^[a-z0-9][-a-z0-9._/:@]*$"),
    says("must be an image reference, e.g. 'registry.example.com/ml/sglang-router:0.3.2'"),
]
DnsLabel = Annotated[
    str,
    Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"),
    says("must be a namespace name: a DNS label of at most 63 of a-z, 0-9 and '-'"),
]


def _cidr(value: Any) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=True)) if isinstance(value, str) else ""
    except ValueError:
        pass
    raise problem(
        "must be a CIDR block with its host bits zero, e.g. '10.0.0.0/8' or '192.168.1.7/32'"
    )


Cidr = Annotated[str, BeforeValidator(_cidr)]


@dataclass(frozen=True, config=CONFIG)
class ClientSpec:
    """Who may reach the serving pods directly, beside the fleet's router: a namespace
    (every pod in it) or an address block. One of the two per entry."""

    namespace: DnsLabel | None = None
    cidr: Cidr | None = None

    @model_validator(mode="after")
    def _one(self) -> ClientSpec:
        if (self.namespace is None) == (self.cidr is None):
            raise ValueError(
                "names one client: either namespace: NAME or cidr: BLOCK, not both or "
                "neither; fix: one entry each, e.g. [{namespace: monitoring}, {cidr: 10.0.0.0/8}]"
            )
        return self


@dataclass(frozen=True, config=CONFIG)
class RouterSpec:
    """The SGLang Model Gateway (``sglang-router``) the objects put in front of the
    replicas: a Deployment that finds the serving pods through the Kubernetes API."""

    #: the image that runs ``python3 -m sglang_router.launch_router``; None = the serving
    #: image (SGLang's images install sglang-router), on the serving nodes, where it is pulled
    image: ImageRef | None = None
    replicas: PosInt = 1
    #: the port clients send requests to (the router's Service)
    port: Port = 30000
    policy: Literal["cache_aware", "round_robin", "power_of_two", "random"] = "cache_aware"
    #: CPU and memory of each router pod: requests = limits (Guaranteed QoS)
    cpu: Cpu = "2"
    memory: Memory = "4Gi"


@dataclass(frozen=True, config=CONFIG)
class SwarmSpec:
    """The Swarm that runs the fleet."""

    #: the manager's Docker endpoint (DOCKER_HOST form); None = the environment's DOCKER_HOST
    manager: Str | None = None
    #: only nodes carrying this label run replicas (a placement constraint)
    node_label: NodeLabel | None = None
    #: only these node hostnames run replicas (empty = any node the label admits)
    nodes: tuple[Str, ...] = ()
    #: the generic resource each GPU is advertised as (``dockerd --node-generic-resource``)
    gpu_resource: ResourceName = "NVIDIA-GPU"
    #: each node's own Docker endpoint (hostname -> ``DOCKER_HOST`` form, e.g.
    #: ``ssh://root@gpu-2``): kctl copies the serving images it builds there (no registry).
    #: The node of the engine kctl builds on needs none; every other node that may run a
    #: replica does (:mod:`kctl.fleet.images`)
    engines: dict[Str, Str] = field(default_factory=dict)


@dataclass(frozen=True, config=CONFIG)
class PortSpec:
    """Host ports: replicas share the node's network namespace (host networking).

    Replica slot ``i`` serves on ``first + i``; while a slot is replaced start-first, the new
    task serves on ``first + replicas + i`` until the old one is stopped."""

    first: Port = 30000


@dataclass(frozen=True, config=CONFIG)
class RolloutSpec:
    """How a rollout moves the fleet from the incumbent to the candidate."""

    #: replicas moved first and gated against a live incumbent measured at the same time
    canary: PosInt = 1
    #: replicas moved per wave after the canary passes
    parallelism: PosInt = 1
    #: seconds a moved batch must stay healthy before the next (Swarm's update monitor)
    monitor_s: PosFloat = 30.0
    #: replicas that must serve at every step; None = replicas - parallelism (at least 1)
    min_healthy: NonNegInt | None = None
    #: greedy requests sent to each moved batch before the next (the smoke gate)
    smoke_requests: NonNegInt = 3


@dataclass(frozen=True, config=CONFIG)
class K8sSpec:
    """What ``kctl render --k8s`` needs beyond the fleet (rendered only: kctl drives no cluster)."""

    namespace: Str = "default"
    #: the Kubernetes minor version the objects are written and validated for
    version: Annotated[str, Field(pattern=r"^1\.[0-9]{2}$"), says("must be like '1.31'")] = "1.31"
    #: extended resource of one GPU
    gpu_resource: ResourceName = "nvidia.com/gpu"
    #: nodes per replica: 1 = a Deployment; >1 = a LeaderWorkerSet (multi-node tensor parallel)
    nodes_per_replica: PosInt = 1
    #: registry repository the kctl-built serving image is pushed to, e.g.
    #: ``registry.example.com/ml``: the pods run ``<registry>/kctl/<profile>:<hash>``.
    #: Needed for profiles whose image kctl builds (a kernel); None = only profiles that run
    #: ``image.base`` as it is can be rendered
    registry: (
        Annotated[
            str,
            Field(
                pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]([-a-z0-9._]*[a-z0-9])?)*$"
            ),
            says("must be a registry repository without a tag, e.g. 'registry.example.com/ml'"),
        ]
        | None
    ) = None
    #: the pods' node selector ``key=value``; None = ``swarm.node_label`` (the same fleet)
    node_label: NodeLabel | None = None
    #: the port the leader of a multi-node replica listens on for ``--dist-init-addr``
    dist_init_port: Port = 20000
    #: CPU and memory of each serving pod, requests = limits (Guaranteed QoS: the last
    #: evicted under node pressure). Required to render; memory must hold
    #: ``runtime.shm_size`` (/dev/shm is memory) and the server's own
    cpu: Cpu | None = None
    memory: Memory | None = None
    #: clients that may reach the serving pods directly (the NetworkPolicy); the router
    #: always may. Empty: only the router
    allowed_clients: tuple[ClientSpec, ...] = ()
    router: RouterSpec = field(default_factory=RouterSpec)


@dataclass(frozen=True, config=CONFIG)
class FleetSpec:
    """A fleet file, resolved."""

    kind: Literal["fleet"]
    name: FleetName
    #: the file it was read from (for messages)
    source: Str = ""
    description: Str = ""
    #: the address every replica binds, in place of the profile's ``server.host``: a fleet
    #: whose replicas are reached from other machines (kctl on the manager, a router,
    #: clients; a pod's kubelet and Service) says so here, e.g. ``bind: 0.0.0.0``.
    #: None: the profile's own address (the shipped profiles bind loopback)
    bind: Host | None = None
    replicas: PosInt = 2
    #: GPUs each replica reserves; None = the profile's tensor-parallel size
    gpus_per_replica: NonNegInt | None = None
    swarm: SwarmSpec = field(default_factory=SwarmSpec)
    ports: PortSpec = field(default_factory=PortSpec)
    rollout: RolloutSpec = field(default_factory=RolloutSpec)
    k8s: K8sSpec = field(default_factory=K8sSpec)

    @model_validator(mode="after")
    def _judge(self) -> FleetSpec:
        if self.rollout.canary >= self.replicas and self.replicas > 1:
            raise ValueError(
                f"rollout.canary ({self.rollout.canary}) must be below replicas "
                f"({self.replicas}): an incumbent must stay to be measured against; "
                f"fix: canary: {max(1, self.replicas - 1)}"
            )
        if self.rollout.min_healthy is not None and self.rollout.min_healthy > self.replicas:
            raise ValueError(
                f"rollout.min_healthy ({self.rollout.min_healthy}) exceeds replicas "
                f"({self.replicas}); fix: min_healthy: {self.replicas - 1}"
            )
        return self

    @property
    def min_healthy(self) -> int:
        """Replicas that must serve at every step of a rollout."""
        if self.rollout.min_healthy is not None:
            return self.rollout.min_healthy
        return max(1, self.replicas - self.rollout.parallelism) if self.replicas > 1 else 0

    def port(self, slot: int, *, spare: bool = False) -> int:
        """Host port of replica ``slot`` (the spare port while it is replaced start-first)."""
        return self.ports.first + slot + (self.replicas if spare else 0)
