"""A container's state read straight from the Docker engine's unix socket, without the
docker SDK, so ``kctl status`` stays fast (the SDK costs its import and a version probe)."""

from __future__ import annotations

import http.client
import json
import os
import socket

from kctl.errors import RuntimeUnavailable
from kctl.runtime.base import InstanceState
from kctl.runtime.docker.engine import REMEDY


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


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
    conn = _UnixConnection(path, timeout_s)
    try:
        conn.request("GET", f"/containers/{ref}/json")
        resp = conn.getresponse()
        body = resp.read()
    except OSError as exc:
        raise RuntimeUnavailable(
            f"cannot reach the Docker engine at {path}: {exc}", hint=REMEDY
        ) from exc
    finally:
        conn.close()
    if resp.status == 404:
        return InstanceState(running=False, detail="container not found")
    if resp.status != 200:
        raise RuntimeUnavailable(
            f"docker inspect {ref[:12]} answered HTTP {resp.status}", hint=REMEDY
        )
    return state_from_inspect(json.loads(body))
