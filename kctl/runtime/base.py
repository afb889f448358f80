"""The runtime interface: where a serving process runs. The controller talks only to
this protocol; :mod:`kctl.runtime.local` runs processes on this host (and the simulator
under ``--simulate``), :mod:`kctl.runtime.docker` runs containers.

Plans are data: a :class:`LaunchSpec` is built by a pure function from a profile
(:func:`kctl.launch.launch_spec`); only runtimes act on it.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Protocol

from kctl.profile.model import Profile, RuntimeSpec, SecretRef


@dataclass(frozen=True)
class LaunchSpec:
    """Everything needed to start one serving process, runtime-independent."""

    deployment_id: str
    profile_name: str
    profile_hash: str
    #: the server command, e.g. ("python3", "-m", "sglang.launch_server", "--model-path", ...)
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    host: str
    port: int
    #: image tag to run (docker runtime); None for local
    image: str | None = None
    #: free-form labels a runtime attaches (docker labels); kctl owns what carries them
    labels: tuple[tuple[str, str], ...] = ()
    #: the profile's runtime section (GPUs, shm size, volumes): the docker runtime builds
    #: the container from it; None = RuntimeSpec() defaults. Ignored by the local runtime.
    runtime: RuntimeSpec | None = None
    #: environment variables whose values are secrets, as references: the runtime reads
    #: them when it starts the server (:func:`kctl.secrets.resolve_env`), never earlier
    secrets: tuple[tuple[str, SecretRef], ...] = ()
    #: SGLang's API key as a reference: the runtime hands it to the server in a
    #: ``--config`` file only its owner reads, never on the command line
    api_key: SecretRef | None = None


@dataclass(frozen=True)
class Instance:
    """A started serving process, as recorded in the store (JSON-serialisable)."""

    runtime: str
    deployment_id: str
    #: docker container id, or "pid:<pid>:<start-ticks>" for local processes
    ref: str
    #: where the runtime keeps the process log (local), or "" when the runtime reads it
    log_path: str = ""
    port: int = 0
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class InstanceState:
    running: bool
    exit_code: int | None = None
    oom_killed: bool = False
    restart_count: int = 0
    #: human description: "running", "exited with code 1", "not found" ...
    detail: str = ""


class Runtime(Protocol):
    """What a runtime must do. Every method raises :class:`kctl.errors.KctlError`
    subclasses only (RuntimeUnavailable when the backend cannot be reached)."""

    name: str

    def check_available(self) -> None:
        """Raise RuntimeUnavailable with the remedy when the backend cannot be used."""

    def start(self, spec: LaunchSpec) -> Instance:
        """Start (or restart an identical stopped) serving process; do not wait for health."""

    def stop(self, instance: Instance, timeout_s: float) -> None:
        """Stop it (SIGTERM, then SIGKILL after timeout_s); idempotent."""

    def state(self, instance: Instance) -> InstanceState:
        """What the process is doing now."""

    def logs(self, instance: Instance, tail: int | None = None) -> str:
        """Its log output, the last ``tail`` lines when given."""

    def running(self) -> list[Instance]:
        """Every serving process kctl owns that runs now (for reconciling the store)."""

    def port_holder(self, port: int) -> str | None:
        """Describe whatever listens on 127.0.0.1:port, None when the port is free."""

    def preflight(self, profile: Profile, serving: Instance | None) -> None:
        """What this runtime must check before a deploy of ``profile`` changes anything
        (``serving``: the instance it replaces), beyond the port every runtime checks:
        PreflightFailed / RuntimeUnavailable (exit 5) listing every problem."""


def port_listening(port: int, host: str = "127.0.0.1", timeout_s: float = 0.5) -> bool:
    """Whether something accepts TCP connections on host:port (for port preflight)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        return sock.connect_ex((host, port)) == 0
