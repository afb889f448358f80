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

from dataclasses import field
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator
from pydantic.dataclasses import dataclass

from kctl.profile.fields import Port
from kctl.profile.rules import NonNegInt, PosFloat, PosInt, Str, says

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


@dataclass(frozen=True, config=CONFIG)
class FleetSpec:
    """A fleet file, resolved."""

    kind: Literal["fleet"]
    name: FleetName
    #: the file it was read from (for messages)
    source: Str = ""
    description: Str = ""
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
