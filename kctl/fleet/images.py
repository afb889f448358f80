"""Serving images onto a fleet's nodes, without a registry.

kctl builds a profile's serving image (``kctl/<profile>:<hash>``) on the engine it builds
with (``DOCKER_HOST``), and Swarm runs each task from the image its node holds: services are
created without resolving the image in a registry. So before a rollout changes anything, every
node that may run a replica must hold the image. The build engine's own node does; the others
are reached through their own engine, named in the fleet file (``swarm.engines``: hostname ->
Docker endpoint, e.g. ``ssh://root@gpu-2``), and get the image streamed to them (what
``docker save | docker load`` does). A node that may run replicas and that kctl cannot reach is
refused before the rollout, with the fix.

:func:`eligible` and :func:`missing_engines` are pure (they read the driver's node list);
:func:`place` is the only code here with side effects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kctl.errors import KctlError, RuntimeUnavailable, UsageError
from kctl.runtime.docker.engine import engine_errors

if TYPE_CHECKING:
    from docker import DockerClient

    from kctl.fleet.spec import SwarmSpec
    from kctl.fleet.view import Node

#: the images kctl builds: they exist only on the engine that built them
LOCAL_PREFIX = "kctl/"


def eligible(nodes: list[Node], swarm: SwarmSpec) -> list[Node]:
    """The nodes Swarm may place a replica on now: active, Ready, admitted by the fleet's
    node label and hostnames."""
    key, _, value = (swarm.node_label or "").partition("=")
    return [
        n
        for n in nodes
        if n.availability == "active"
        and n.state == "ready"
        and (not swarm.node_label or (key, value) in n.labels)
        and (not swarm.nodes or n.hostname in swarm.nodes)
    ]


def missing_engines(
    nodes: list[Node], swarm: SwarmSpec, holders: set[str], source: str
) -> UsageError | None:
    """The error for eligible nodes that neither hold the image (``holders``: node ids of the
    engines that built it) nor have an engine in the fleet file; None when there are none."""
    lost = [n.hostname for n in nodes if n.id not in holders and n.hostname not in swarm.engines]
    if not lost:
        return None
    where = f"{source}: " if source else ""
    example = ", ".join(f"{h}: ssh://root@{h}" for h in lost)
    return UsageError(
        f"{where}node(s) {', '.join(lost)} may run the fleet's replicas, but kctl builds the "
        "serving image on its own engine and has no way to put it there (no registry)",
        hint=f"name each node's Docker engine in the fleet file, swarm.engines: {{{example}}}; "
        "or keep replicas off them with swarm.nodes or swarm.node_label",
    )


def _image_id(client: DockerClient, image: str) -> str | None:
    import docker

    try:
        return str(client.api.inspect_image(image)["Id"])
    except docker.errors.ImageNotFound:
        return None


def _copy(src: DockerClient, dst: DockerClient, image: str, where: str) -> None:
    with engine_errors(f"copy {image} to {where}"):
        for status in dst.api.load_image(src.api.get_image(image)):
            if isinstance(status, dict) and status.get("error"):
                raise KctlError(f"loading {image} on {where} failed: {status['error']}")


def place(
    image: str,
    src: DockerClient,
    nodes: list[Node],
    swarm: SwarmSpec,
    connect: Callable[[str], DockerClient],
    progress: Callable[[str], None],
    source: str = "",
) -> list[str]:
    """Make every node in ``nodes`` hold ``image`` (the build engine ``src``'s): copy it to
    each node's engine (``swarm.engines``) that lacks it. Returns the hostnames copied to."""
    if not image.startswith(LOCAL_PREFIX):
        return []  # a registry image: each node pulls it
    with engine_errors(f"inspect {image}"):
        want = _image_id(src, image)
        home = str((src.info().get("Swarm") or {}).get("NodeID") or "")
    if want is None:
        raise KctlError(f"internal: the serving image {image} is not on the engine that built it")
    error = missing_engines(nodes, swarm, {home}, source)
    if error is not None:
        raise error
    copied = []
    for node in nodes:
        if node.id == home:
            continue
        endpoint = swarm.engines[node.hostname]
        dst = connect(endpoint)
        try:
            with engine_errors(f"docker info on {endpoint}"):
                its = str((dst.info().get("Swarm") or {}).get("NodeID") or "")
            if its != node.id:
                raise UsageError(
                    f"swarm.engines.{node.hostname} ({endpoint}) is not the engine of node "
                    f"{node.hostname}: its Swarm node id is {its or 'none (not in a swarm)'}",
                    hint=f"set swarm.engines.{node.hostname} to that node's Docker endpoint",
                )
            if _image_id(dst, image) == want:
                continue
            progress(f"copying {image} to node {node.hostname} ({endpoint})")
            _copy(src, dst, image, f"node {node.hostname}")
            if _image_id(dst, image) != want:
                raise KctlError(f"{image} did not arrive on node {node.hostname} ({endpoint})")
            copied.append(node.hostname)
        finally:
            dst.close()
    return copied


def connect_engine(endpoint: str) -> DockerClient:
    """A node's Docker engine (RuntimeUnavailable, exit 5, when it does not answer)."""
    from kctl.runtime.docker.engine import engine_client, probe_unix_socket

    what = "the Docker engine (fleet file swarm.engines)"
    client = (
        None
        if endpoint.startswith("unix://")
        else engine_client(endpoint, timeout_s=120, what=what)
    )
    try:
        probe_unix_socket(endpoint)  # the SDK would leak the socket of a failed unix connect
        # ssh:// through docker's SSH transport (the ssh extra; connected above, or
        # refused with the extra or the SSH fix); tcp:// only with TLS: a plain one was
        # refused above, with the fix
        client = client or engine_client(endpoint, timeout_s=120, what=what)
        try:
            client.ping()
        except Exception:
            client.close()
            raise
    except Exception as exc:  # RuntimeUnavailable, DockerException or a transport error
        cause = exc.__cause__ if isinstance(exc, RuntimeUnavailable) else exc
        reason = getattr(cause, "strerror", None) or str(cause).strip().split("\n")[0]
        raise RuntimeUnavailable(
            f"the Docker engine {endpoint} (fleet file swarm.engines) is not reachable: {reason}",
            hint="check the endpoint and that kctl's user may use it (`docker -H ENDPOINT info`)",
        ) from exc
    return client
