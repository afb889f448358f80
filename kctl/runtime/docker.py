"""Docker runtime: the serving process is a container, run the way SGLang documents it
(host network, ``ipc=host``, shm size, GPU device requests, memlock ulimit).

The plan is data: :func:`run_spec` turns a :class:`LaunchSpec` and the profile's
:class:`RuntimeSpec` into the keyword arguments of ``containers.create`` (``kctl plan``
shows them, tests compare them by equality). :class:`DockerRuntime` is the only place that
acts on them. It owns exactly the containers labelled ``kctl.managed=true`` and never
touches any other container.

Stopped containers are kept: rollback restarts the known-good one when its spec hash is
unchanged, which skips a container re-create (the model load remains). :meth:`prune`
removes stopped ones beyond a retention count.

The ``docker`` SDK is imported lazily, inside functions: ``kctl --help`` must not pay for it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import socket
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kctl.errors import KctlError, PreflightFailed, RuntimeUnavailable
from kctl.profile.model import Profile, RuntimeSpec
from kctl.runtime.base import Instance, InstanceState, LaunchSpec

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container

REMEDY = "start dockerd / check DOCKER_HOST / permission on /var/run/docker.sock"

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


# -- plan (pure) -------------------------------------------------------------------------


def container_name(profile_name: str, deployment_id: str) -> str:
    """``kctl-<profile>-<deployment-id>``, reduced to the characters docker accepts."""
    return _NAME_UNSAFE.sub("-", f"kctl-{profile_name}-{deployment_id}").strip("-.")


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
    spec: dict[str, Any] = {
        "image": launch.image,
        "command": list(launch.argv),
        "name": name or container_name(launch.profile_name, launch.deployment_id),
        "environment": dict(launch.env),
        "network_mode": "host",
        "ipc_mode": "host",
        "shm_size": runtime.shm_size,
        "volumes": {
            v.host: {"bind": v.container, "mode": "ro" if v.read_only else "rw"}
            for v in runtime.volumes
        },
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
    the owner label of ``state_dir``, as :class:`DockerRuntime` adds it)."""
    owner = str(Path(state_dir).resolve()) if state_dir is not None else None
    return run_spec(launch, launch.runtime or profile.runtime, owner=owner)


# -- engine access -----------------------------------------------------------------------


def connect(*, timeout_s: float = 120.0) -> DockerClient:
    """A docker client that has answered a ping; RuntimeUnavailable (exit 5) otherwise."""
    import docker  # lazy: not on the `kctl --help` path

    _probe_unix_socket(os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=max(1, int(timeout_s)))
    except Exception as exc:  # DockerException or a requests error: both mean "no engine"
        raise RuntimeUnavailable(
            f"docker engine not reachable: {_short(exc)}", hint=REMEDY
        ) from exc
    try:
        client.ping()
    except Exception as exc:
        client.close()
        raise RuntimeUnavailable(
            f"docker engine not reachable: {_short(exc)}", hint=REMEDY
        ) from exc
    return client


def _probe_unix_socket(host: str) -> None:
    """Fail with the OS's reason (missing socket, permission) before the SDK tries: the
    SDK leaks the socket of a failed unix connect, and its message hides the cause."""
    if not host.startswith("unix://"):
        return
    path = host[len("unix://") :]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        try:
            sock.connect(path)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise RuntimeUnavailable(
                f"docker engine not reachable at {host}: {reason}", hint=REMEDY
            ) from exc


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


@contextlib.contextmanager
def engine_errors(action: str) -> Iterator[None]:
    """Translate docker SDK and transport errors raised inside the block into kctl errors."""
    import docker.errors
    import requests.exceptions

    try:
        yield
    except KctlError:
        raise
    except docker.errors.ImageNotFound as exc:
        raise PreflightFailed(
            f"{action}: image not found: {exc.explanation or _short(exc)}",
            hint="build it first with `kctl build PROFILE` (deploy builds it)",
        ) from exc
    except docker.errors.APIError as exc:
        if (
            exc.response is not None
            and exc.response.status_code >= 500
            and "connect" in str(exc).lower()
        ):
            raise RuntimeUnavailable(f"{action}: {_short(exc)}", hint=REMEDY) from exc
        raise KctlError(
            f"{action}: docker engine refused: {exc.explanation or _short(exc)}"
        ) from exc
    except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
        raise RuntimeUnavailable(
            f"{action}: docker engine not reachable: {_short(exc)}", hint=REMEDY
        ) from exc
    except docker.errors.DockerException as exc:
        raise RuntimeUnavailable(f"{action}: {_short(exc)}", hint=REMEDY) from exc


# -- runtime -----------------------------------------------------------------------------


def _is_managed(container: Container) -> bool:
    return (container.labels or {}).get(LABEL_MANAGED) == "true"


class DockerRuntime:
    """Runs serving containers on the local docker engine (the Runtime protocol).

    A container's GPUs, shm size and volumes come from ``LaunchSpec.runtime`` (the
    profile's runtime section), else from ``runtime`` given here (else the defaults).
    ``client`` is an already connected docker client (tests); otherwise one is made on
    first use. With ``state_dir``, containers carry ``kctl.owner=<state dir>`` and only
    those are listed, reused and pruned (as the local runtime scopes by state dir);
    without it, every ``kctl.managed`` container is this runtime's.
    """

    name = "docker"

    def __init__(
        self,
        state_dir: Path | None = None,
        *,
        runtime: RuntimeSpec | None = None,
        client: DockerClient | None = None,
    ) -> None:
        self.state_dir = state_dir
        self.owner = str(Path(state_dir).resolve()) if state_dir is not None else None
        self.spec = runtime or RuntimeSpec()
        self._client = client

    @classmethod
    def from_profile(cls, profile: Profile, *, client: DockerClient | None = None) -> DockerRuntime:
        """The runtime for ``profile`` (its ``runtime:`` section)."""
        return cls(runtime=profile.runtime, client=client)

    @property
    def client(self) -> DockerClient:
        if self._client is None:
            self._client = connect()
        return self._client

    def close(self) -> None:
        """Close the engine connection (its HTTP sockets)."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> DockerRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- protocol ------------------------------------------------------------------------

    def check_available(self) -> None:
        """RuntimeUnavailable (exit 5, with the remedy) when no engine answers."""
        with engine_errors("docker ping"):
            self.client.ping()

    def start(self, spec: LaunchSpec) -> Instance:
        """Restart a stopped kctl container with the same spec hash (and the same image),
        else create and start a new one. Does not wait for health."""
        wanted = run_spec(spec, spec.runtime or self.spec, owner=self.owner)
        wanted_hash = wanted["labels"][LABEL_SPEC_HASH]
        with engine_errors(f"start {wanted['name']}"):
            image_id = self.client.images.get(wanted["image"]).id
            reusable = self._reusable(wanted_hash, image_id)
            if reusable is not None:
                reusable.start()
                reusable.reload()
                return self._instance(reusable, spec.deployment_id, reused=True)
            self._clear_name(wanted["name"])
            container = self.client.containers.create(**wanted)
            try:
                container.start()
            except Exception:
                # a container that never started is no rollback target: leave nothing behind
                with contextlib.suppress(Exception):
                    container.remove(force=True)
                raise
            container.reload()
            return self._instance(container, spec.deployment_id, reused=False)

    def stop(self, instance: Instance, timeout_s: float) -> None:
        """SIGTERM, SIGKILL after ``timeout_s``; the container is kept (stopped). Idempotent."""
        import docker.errors

        with engine_errors(f"stop {instance.ref[:12]}"):
            try:
                container = self.client.containers.get(instance.ref)
            except docker.errors.NotFound:
                return
            if not _is_managed(container):
                raise KctlError(
                    f"container {container.name} is not managed by kctl; not stopping it"
                )
            if container.status in ("running", "restarting", "paused"):
                container.stop(timeout=max(1, math.ceil(timeout_s)))

    def state(self, instance: Instance) -> InstanceState:
        """Running flag, exit code, OOM kill and restart count, read from ``docker inspect``."""
        import docker.errors

        with engine_errors(f"inspect {instance.ref[:12]}"):
            try:
                attrs = self.client.api.inspect_container(instance.ref)
            except docker.errors.NotFound:
                return InstanceState(running=False, detail="container not found")
        st = attrs.get("State", {})
        running = bool(st.get("Running")) and not st.get("Restarting")
        oom = bool(st.get("OOMKilled"))
        restarts = int(attrs.get("RestartCount", 0))
        code = None if running else st.get("ExitCode")
        if running:
            detail = "running"
        elif oom:
            detail = f"OOM killed (exit code {code})"
        elif st.get("Status") == "created":
            detail = "created, never started"
        else:
            detail = f"exited with code {code}"
            if st.get("Error"):
                detail += f": {st['Error']}"
        if restarts:
            detail += f", restarted {restarts} times"
        return InstanceState(
            running=running, exit_code=code, oom_killed=oom, restart_count=restarts, detail=detail
        )

    def logs(self, instance: Instance, tail: int | None = None) -> str:
        """The container's stdout and stderr (the last ``tail`` lines when given)."""
        import docker.errors

        with engine_errors(f"logs {instance.ref[:12]}"):
            try:
                container = self.client.containers.get(instance.ref)
            except docker.errors.NotFound:
                return ""
            raw = container.logs(stdout=True, stderr=True, tail="all" if tail is None else tail)
        return raw.decode("utf-8", errors="replace")

    def running(self) -> list[Instance]:
        """Every running container labelled ``kctl.managed=true``."""
        with engine_errors("list containers"):
            found = self.client.containers.list(
                filters={"label": self._owned_filter(), "status": "running"}
            )
            return [
                self._instance(c, c.labels.get(LABEL_DEPLOYMENT, ""), reused=False) for c in found
            ]

    def port_holder(self, port: int) -> str | None:
        """Who listens on 127.0.0.1:``port``: a kctl container, another process, or None."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.5)
            if sock.connect_ex(("127.0.0.1", port)) != 0:
                return None
        for inst in self.running():
            if inst.port == port:
                name = inst.extra.get("name", inst.ref[:12])
                return f"kctl container {name} (deployment {inst.deployment_id})"
        return f"a process listening on 127.0.0.1:{port} (not a kctl container)"

    # -- housekeeping --------------------------------------------------------------------

    def prune(self, retain: int | None = None, *, protect: Collection[str] = ()) -> list[str]:
        """Remove stopped kctl containers beyond the newest ``retain`` (default: the
        profile's ``runtime.retain``). Running containers and those whose id, name or
        deployment id is in ``protect`` (the serving one, the known-good) are never
        removed, nor counted. Returns the names removed."""
        keep = self.spec.retain if retain is None else retain
        with engine_errors("prune containers"):
            stopped = [
                c
                for c in self.client.containers.list(
                    all=True, filters={"label": self._owned_filter()}
                )
                if _is_managed(c) and c.status in ("exited", "created", "dead")
            ]
            candidates = [
                c
                for c in stopped
                if not ({c.id, c.name, c.labels.get(LABEL_DEPLOYMENT, "")} & set(protect))
            ]
            candidates.sort(key=lambda c: c.attrs.get("Created", ""), reverse=True)
            removed = []
            for c in candidates[max(0, keep) :]:
                c.remove()
                removed.append(c.name)
            return removed

    def gc(self, retain: int | None = None, *, protect: Collection[str] = ()) -> list[str]:
        """``kctl gc``: the same as :meth:`prune`, on demand."""
        return self.prune(retain, protect=protect)

    # -- helpers -------------------------------------------------------------------------

    def _owned_filter(self) -> list[str]:
        """Label filters selecting this runtime's containers."""
        wanted = [f"{LABEL_MANAGED}=true"]
        if self.owner is not None:
            wanted.append(f"{LABEL_OWNER}={self.owner}")
        return wanted

    def _reusable(self, wanted_hash: str, image_id: str) -> Container | None:
        """The newest stopped kctl container with this spec hash that runs this very image
        (a forced rebuild re-tags: its old containers must not come back)."""
        found = self.client.containers.list(
            all=True,
            filters={"label": [*self._owned_filter(), f"{LABEL_SPEC_HASH}={wanted_hash}"]},
        )
        stopped = [
            c
            for c in found
            if _is_managed(c)
            and c.status in ("exited", "created")
            and c.attrs.get("Image") == image_id
        ]
        stopped.sort(key=lambda c: c.attrs.get("Created", ""), reverse=True)
        return stopped[0] if stopped else None

    def _clear_name(self, name: str) -> None:
        """Make room for ``name``: remove a stopped kctl container holding it (a retried
        deployment id); refuse when it runs or is not kctl's."""
        import docker.errors

        try:
            old = self.client.containers.get(name)
        except docker.errors.NotFound:
            return
        if not _is_managed(old):
            raise PreflightFailed(
                f"a container named {name} exists and is not managed by kctl",
                hint=f"rename or remove it yourself (docker rm {name})",
            )
        if old.status in ("running", "restarting", "paused"):
            raise PreflightFailed(
                f"container {name} is already running",
                hint="stop the current deployment first (kctl rollback / kctl status)",
            )
        old.remove()

    def _instance(self, container: Container, deployment_id: str, *, reused: bool) -> Instance:
        labels = container.labels or {}
        return Instance(
            runtime=self.name,
            deployment_id=deployment_id,
            ref=container.id,
            log_path="",
            port=int(labels.get(LABEL_PORT, "0") or 0),
            extra={
                "name": container.name,
                "image": str(container.attrs.get("Config", {}).get("Image", "")),
                "spec_hash": labels.get(LABEL_SPEC_HASH, ""),
                "created_for": labels.get(LABEL_DEPLOYMENT, ""),
                "reused": "true" if reused else "false",
            },
        )
