"""DockerRuntime: the Runtime protocol on the local docker engine. The only module that
creates, starts, stops, inspects or removes containers; what it creates comes from
:func:`kctl.runtime.docker.spec.run_spec`.

It owns exactly the containers labelled ``kctl.managed=true`` (and, with a state dir, its
own ``kctl.owner``) and never touches any other container. Stopped containers are kept:
rollback restarts the known-good one when its spec hash is unchanged, which skips a
container re-create (the model load remains). :meth:`DockerRuntime.prune` removes stopped
ones beyond a retention count.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kctl.errors import KctlError, PreflightFailed
from kctl.profile.model import Profile, RuntimeSpec
from kctl.runtime.base import Instance, InstanceState, LaunchSpec, port_listening
from kctl.runtime.docker.engine import connect, engine_errors
from kctl.runtime.docker.preflight import docker_preflight
from kctl.runtime.docker.spec import (
    LABEL_DEPLOYMENT,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_PORT,
    LABEL_SPEC_HASH,
    api_key_file,
    run_spec,
)
from kctl.secrets import resolve, resolve_env
from kctl.statedir import ensure_dir, write_new

if TYPE_CHECKING:
    from docker import DockerClient
    from docker.models.containers import Container


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
        self._write_api_key(spec, wanted["name"])
        with engine_errors(f"start {wanted['name']}"):
            image_id = self.client.images.get(wanted["image"]).id
            # a stopped container keeps the secret values it was created with: with
            # secrets, always a new one, so a rotated token is the one that runs
            reusable = None if spec.secrets else self._reusable(wanted_hash, image_id)
            if reusable is not None:
                reusable.start()
                reusable.reload()
                return self._instance(reusable, spec.deployment_id, reused=True)
            self._clear_name(wanted["name"])
            wanted["environment"].update(resolve_env(spec.secrets))
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

    def _write_api_key(self, spec: LaunchSpec, name: str) -> None:
        """The container's ``--config`` file with the API key read now (0600, in the state
        dir; rewritten at each start, so a restarted container gets the current key)."""
        if spec.api_key is None:
            return
        path = api_key_file(self.owner, name)
        ensure_dir(path.parent)
        write_new(path, json.dumps({"api-key": resolve(spec.api_key, "server.api_key")}).encode())

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
        return state_from_inspect(attrs)

    def logs(self, instance: Instance, tail: int | None = None) -> str:
        """The container's stdout and stderr (the last ``tail`` lines when given)."""
        import docker.errors

        with engine_errors(f"logs {instance.ref[:12]}"):
            try:
                container = self.client.containers.get(instance.ref)
            except docker.errors.NotFound:
                return ""
            raw = container.logs(stdout=True, stderr=True, tail="all" if tail is None else tail)
        return str(raw.decode("utf-8", errors="replace"))

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
        if not port_listening(port):
            return None
        for inst in self.running():
            if inst.port == port:
                name = inst.extra.get("name", inst.ref[:12])
                return f"kctl container {name} (deployment {inst.deployment_id})"
        return f"a process listening on 127.0.0.1:{port} (not a kctl container)"

    def preflight(self, profile: Profile, serving: Instance | None) -> None:
        """The engine, the port, the mounts and the image's CUDA archs against the GPUs
        (:func:`~kctl.runtime.docker.preflight.docker_preflight`)."""
        docker_preflight(profile, runtime=self, serving=serving)

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


def state_from_inspect(attrs: dict[str, Any]) -> InstanceState:
    """Running flag, exit code, OOM kill and restart count from ``docker inspect`` data."""
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
