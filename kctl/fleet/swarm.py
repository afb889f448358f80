"""The ``swarm`` fleet driver: the only module that talks to Docker Swarm (through the
``docker`` package). It creates, updates, rolls back, inspects and removes the services
:func:`kctl.fleet.service.service_spec` renders, and reads their tasks and nodes back as
:mod:`kctl.fleet.view` values. It touches only services labelled with its fleet and owner.

Swarm's rollback (``POST /services/{id}/update?rollback=previous``) has no call of its
own in the package: it is sent through the package's low-level ``APIClient``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kctl.errors import KctlError, RuntimeUnavailable
from kctl.fleet import images
from kctl.fleet.service import (
    ENV_PORT_BASE,
    LABEL_DEPLOYMENT,
    LABEL_FLEET,
    LABEL_OWNER,
    LABEL_PROFILE,
    LABEL_PROFILE_HASH,
    LABEL_ROLE,
)
from kctl.fleet.spec import SwarmSpec
from kctl.fleet.view import Node, Replica, ServiceView
from kctl.runtime.docker.engine import engine_errors

if TYPE_CHECKING:
    from docker import DockerClient

REMEDY = (
    "make the fleet's manager a Swarm manager (`docker swarm init`), or set swarm.manager "
    "in the fleet file (or DOCKER_HOST) to one"
)


def _labels(spec: dict[str, Any]) -> dict[str, str]:
    return dict(spec.get("TaskTemplate", {}).get("ContainerSpec", {}).get("Labels") or {})


def _env(container: dict[str, Any]) -> dict[str, str]:
    return dict(e.split("=", 1) for e in container.get("Env") or [] if "=" in e)


def _host(args: tuple[str, ...], addr: str) -> str:
    """Where kctl reaches a replica: its own loopback bind, else its node's address."""
    if "--host" in args:
        bound = args[args.index("--host") + 1]
        if bound.startswith("127."):
            return bound
    return addr or "127.0.0.1"


class SwarmDriver:
    """The fleet's services on one Swarm manager (``manager``: a Docker endpoint; None:
    the environment's ``DOCKER_HOST``)."""

    name = "swarm"
    orchestrator = "Swarm"

    def __init__(
        self,
        fleet_name: str,
        owner: str,
        manager: str | None = None,
        swarm: SwarmSpec | None = None,
        source: str = "",
    ) -> None:
        self.fleet = fleet_name
        self.owner = owner
        self.manager = manager
        self.swarm = swarm or SwarmSpec()
        self.source = source
        self._client: DockerClient | None = None

    @property
    def client(self) -> DockerClient:
        if self._client is None:
            from kctl.runtime.docker.engine import connect

            if self.manager is None:
                self._client = connect(timeout_s=60)
            else:
                from kctl.runtime.docker.engine import engine_client

                # plain tcp:// refused (RuntimeUnavailable, with the fix) before any try
                client = engine_client(self.manager, timeout_s=60, what="the Swarm manager")
                try:
                    self._client = client
                    self._client.ping()
                except Exception as exc:  # DockerException or a transport error: no manager
                    raise RuntimeUnavailable(
                        f"the Swarm manager {self.manager} is not reachable: {exc}", hint=REMEDY
                    ) from exc
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def check_available(self) -> None:
        with engine_errors("docker info"):
            info = self.client.info()
        swarm = info.get("Swarm") or {}
        if swarm.get("LocalNodeState") != "active" or not swarm.get("ControlAvailable"):
            raise RuntimeUnavailable(
                f"the Docker engine at {self.manager or 'DOCKER_HOST'} is not a Swarm manager "
                f"(swarm state: {swarm.get('LocalNodeState') or 'unknown'})",
                hint=REMEDY,
            )

    def nodes(self) -> list[Node]:
        with engine_errors("list nodes"):
            raw = self.client.api.nodes()
        return [
            Node(
                hostname=n["Description"]["Hostname"],
                state=n["Status"]["State"],
                availability=n["Spec"].get("Availability", ""),
                addr=n["Status"].get("Addr", ""),
                id=n["ID"],
                labels=tuple(sorted((n["Spec"].get("Labels") or {}).items())),
            )
            for n in raw
        ]

    def place_image(self, image: str, progress: Callable[[str], None]) -> list[str]:
        from kctl.runtime.docker.engine import connect

        nodes = images.eligible(self.nodes(), self.swarm)
        build = connect(timeout_s=120)  # the engine kctl builds serving images on
        try:
            return images.place(image, build, nodes, self.swarm, images.connect_engine,
                                progress, self.source)  # fmt: skip
        finally:
            build.close()

    # -- services ------------------------------------------------------------------------

    def _find(self, role: str) -> dict[str, Any] | None:
        wanted = [
            f"{LABEL_FLEET}={self.fleet}",
            f"{LABEL_ROLE}={role}",
            f"{LABEL_OWNER}={self.owner}",
        ]
        with engine_errors("list services"):
            found = self.client.api.services(filters={"label": wanted})
        return found[0] if found else None

    def service(self, role: str) -> ServiceView | None:
        svc = self._find(role)
        if svc is None:
            return None
        spec = svc["Spec"]
        tags = _labels(spec)
        previous = _labels(svc.get("PreviousSpec") or {})
        update = svc.get("UpdateStatus") or {}
        return ServiceView(
            name=spec["Name"],
            id=svc["ID"],
            version=int(svc["Version"]["Index"]),
            deployment=tags.get(LABEL_DEPLOYMENT, ""),
            profile=tags.get(LABEL_PROFILE, ""),
            profile_hash=tags.get(LABEL_PROFILE_HASH, ""),
            image=spec["TaskTemplate"]["ContainerSpec"].get("Image", ""),
            desired_replicas=int(spec.get("Mode", {}).get("Replicated", {}).get("Replicas", 0)),
            previous_deployment=previous.get(LABEL_DEPLOYMENT, ""),
            update_state=str(update.get("State", "")),
            update_message=str(update.get("Message", "")),
            replicas=self._replicas(svc["ID"]),
        )

    def _replicas(self, service_id: str) -> tuple[Replica, ...]:
        with engine_errors("list tasks"):
            tasks = self.client.api.tasks(filters={"service": service_id})
            nodes = {n["ID"]: n for n in self.client.api.nodes()}
        newest: dict[int, dict[str, Any]] = {}
        for t in tasks:
            slot = int(t.get("Slot") or 0)
            best = newest.get(slot)
            # the slot's current task: one Swarm wants running, else the newest
            key = (t.get("DesiredState") == "running", t["Version"]["Index"])
            if best is None or key > (
                best.get("DesiredState") == "running",
                best["Version"]["Index"],
            ):
                newest[slot] = t
        return tuple(self._replica(newest[s], nodes) for s in sorted(newest))

    def _replica(self, task: dict[str, Any], nodes: dict[str, Any]) -> Replica:
        container = task["Spec"]["ContainerSpec"]
        tags = container.get("Labels") or {}
        node = nodes.get(task.get("NodeID", ""), {})
        status = task.get("Status") or {}
        args = tuple(container.get("Args") or ())
        slot = int(task.get("Slot") or 0)
        base = int(_env(container).get(ENV_PORT_BASE, "0") or 0)
        return Replica(
            slot=slot,
            task=task["ID"],
            node=node.get("Description", {}).get("Hostname", ""),
            node_state=node.get("Status", {}).get("State", "unknown"),
            state=str(status.get("State", "")),
            desired=str(task.get("DesiredState", "")),
            deployment=tags.get(LABEL_DEPLOYMENT, ""),
            profile=tags.get(LABEL_PROFILE, ""),
            profile_hash=tags.get(LABEL_PROFILE_HASH, ""),
            image=str(container.get("Image", "")).split("@")[0],
            args=args,
            host=_host(args, node.get("Status", {}).get("Addr", "")),
            port=base + slot - 1 if base else 0,
            error=str(status.get("Err", "")),
        )

    def apply(self, spec: dict[str, Any]) -> None:
        role = spec["Labels"][LABEL_ROLE]
        if not spec["TaskTemplate"]["ContainerSpec"].get("Image"):
            raise KctlError(f"internal: the service spec {spec['Name']} names no image")
        kwargs = {
            "task_template": spec["TaskTemplate"],
            "name": spec["Name"],
            "labels": spec["Labels"],
            "mode": spec["Mode"],
            "update_config": spec["UpdateConfig"],
            "rollback_config": spec["RollbackConfig"],
        }
        current = self._find(role)
        with engine_errors(f"{'update' if current else 'create'} service {spec['Name']}"):
            if current is None:
                self.client.api.create_service(**kwargs)
            else:
                self.client.api.update_service(current["ID"], current["Version"]["Index"], **kwargs)

    def rollback(self, spec: dict[str, Any]) -> str:
        """Back to ``spec`` (matched by its deployment label): Swarm's own rollback when
        the service's previous spec is it, else an update to it."""
        role = spec["Labels"][LABEL_ROLE]
        want = spec["Labels"][LABEL_DEPLOYMENT]
        current = self._find(role)
        if current is None:
            self.apply(spec)
            return "created"
        if _labels(current["Spec"]).get(LABEL_DEPLOYMENT) == want:
            return "already"
        if _labels(current.get("PreviousSpec") or {}).get(LABEL_DEPLOYMENT) == want:
            api = self.client.api
            with engine_errors(f"roll back service {spec['Name']}"):
                url = api._url("/services/{0}/update", current["ID"])
                params = {"version": current["Version"]["Index"], "rollback": "previous"}
                api._raise_for_status(api._post_json(url, data=current["Spec"], params=params))
            return "swarm-rollback"
        self.apply(spec)
        return "update"

    def put_secret(self, name: str, data: bytes, labels: dict[str, str]) -> str:
        with engine_errors(f"create secret {name}"):
            for found in self.client.api.secrets(filters={"name": name}):
                if found["Spec"]["Name"] == name:  # the filter matches a prefix
                    return str(found["ID"])
            return str(self.client.api.create_secret(name, data, labels=labels)["ID"])

    def remove(self, role: str) -> bool:
        svc = self._find(role)
        if svc is None:
            return False
        with engine_errors(f"remove service {svc['Spec']['Name']}"):
            self.client.api.remove_service(svc["ID"])
        return True

    def logs(self, role: str, tail: int) -> str:
        svc = self._find(role)
        if svc is None:
            return ""
        try:
            with engine_errors("service logs"):
                raw = self.client.api.service_logs(
                    svc["ID"], stdout=True, stderr=True, tail=tail, timestamps=False
                )
                return b"".join(raw).decode("utf-8", errors="replace")
        except KctlError:
            return ""
