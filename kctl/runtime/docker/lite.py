"""A container's state read straight from the Docker engine's unix socket, without the
docker SDK, so ``kctl status`` stays fast (the SDK costs its import and a version probe)."""

from __future__ import annotations

import json
import os
import socket
from typing import Any

import urllib3
from urllib3.connection import HTTPConnection

from kctl.errors import RuntimeUnavailable
from kctl.runtime.base import Instance, InstanceState
from kctl.runtime.docker.engine import REMEDY


class _UnixConnection(HTTPConnection):
    """urllib3's connection, connected to a unix socket instead of host:port."""

    def __init__(self, *args: Any, socket_path: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.socket_path = socket_path

    def _new_conn(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout if isinstance(self.timeout, (int, float)) else None)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        return sock


class _UnixPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _UnixConnection


def socket_path() -> str | None:
    """The engine's unix socket from DOCKER_HOST, or the default; None for a TCP engine."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    return host[len("unix://") :] if host.startswith("unix://") else None


def inspect_state(ref: str, timeout_s: float = 5.0) -> InstanceState | None:
    """The container's state, or None when the engine is not on a unix socket (the caller
    then uses the SDK). Raises RuntimeUnavailable when the engine cannot be reached."""
    from kctl.runtime.docker.runtime import state_from_inspect

    path = socket_path()
    if path is None:
        return None
    pool = _UnixPool("localhost", timeout=timeout_s, maxsize=1, socket_path=path)
    try:
        resp = pool.request("GET", f"/containers/{ref}/json", retries=False)
        body = resp.data
    except (OSError, urllib3.exceptions.HTTPError) as exc:
        raise RuntimeUnavailable(
            f"cannot reach the Docker engine at {path}: {exc}", hint=REMEDY
        ) from exc
    finally:
        pool.close()
    if resp.status == 404:
        return InstanceState(running=False, detail="container not found")
    if resp.status != 200:
        raise RuntimeUnavailable(
            f"docker inspect {ref[:12]} answered HTTP {resp.status}", hint=REMEDY
        )
    return state_from_inspect(json.loads(body))


def running_instances(owner: str, timeout_s: float = 5.0) -> list[Instance] | None:
    """The running containers kctl started for the state dir ``owner`` (by their labels),
    or None when the engine is not on a unix socket (the caller then uses the SDK).
    Raises RuntimeUnavailable when the engine cannot be reached."""
    from urllib.parse import quote

    from kctl.runtime.docker.spec import LABEL_DEPLOYMENT, LABEL_MANAGED, LABEL_OWNER, LABEL_PORT

    path = socket_path()
    if path is None:
        return None
    filters = {"label": [f"{LABEL_MANAGED}=true", f"{LABEL_OWNER}={owner}"], "status": ["running"]}
    pool = _UnixPool("localhost", timeout=timeout_s, maxsize=1, socket_path=path)
    try:
        resp = pool.request(
            "GET", f"/containers/json?filters={quote(json.dumps(filters))}", retries=False
        )
        body = resp.data
    except (OSError, urllib3.exceptions.HTTPError) as exc:
        raise RuntimeUnavailable(
            f"cannot reach the Docker engine at {path}: {exc}", hint=REMEDY
        ) from exc
    finally:
        pool.close()
    if resp.status != 200:
        raise RuntimeUnavailable(f"docker ps answered HTTP {resp.status}", hint=REMEDY)
    found = []
    for c in json.loads(body):
        labels = c.get("Labels") or {}
        port = str(labels.get(LABEL_PORT) or "0")
        found.append(
            Instance(
                runtime="docker",
                deployment_id=str(labels.get(LABEL_DEPLOYMENT, "")),
                ref=str(c.get("Id", "")),
                port=int(port) if port.isdigit() else 0,
            )
        )
    return found
