"""Reaching the docker engine: a pinged client, or RuntimeUnavailable with the remedy; and
the one place that turns SDK/transport errors into kctl's typed errors. The ``docker``
SDK is imported inside functions: ``kctl --help`` must not pay for it.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from kctl.errors import KctlError, PreflightFailed, RuntimeUnavailable

if TYPE_CHECKING:
    from docker import DockerClient

REMEDY = "start dockerd / check DOCKER_HOST / permission on /var/run/docker.sock"


def connect(*, timeout_s: float = 120.0) -> DockerClient:
    """A docker client that has answered a ping; RuntimeUnavailable (exit 5) otherwise."""
    import docker  # lazy: not on the `kctl --help` path

    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    probe_unix_socket(host)
    if _tcp(host):
        tls_config(host, "DOCKER_HOST")  # plain TCP refused; from_env reads the same TLS
    if host.startswith("ssh://"):
        need_ssh(host, "DOCKER_HOST")
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


#: the fix for a plain-TCP engine endpoint
TLS_FIX = (
    "give the engine TLS and tell kctl its certificates: export DOCKER_TLS_VERIFY=1 and "
    "DOCKER_CERT_PATH=<dir with ca.pem, cert.pem, key.pem> (dockerd --tlsverify, port 2376), "
    "or reach it over ssh://user@host"
)


def _tcp(endpoint: str) -> bool:
    return endpoint.startswith(("tcp://", "http://", "https://"))


def tls_config(endpoint: str, what: str) -> Any:
    """The verified TLS settings a ``tcp://`` engine endpoint is reached with
    (``DOCKER_TLS_VERIFY``/``DOCKER_CERT_PATH``, as the docker CLI reads them). A plain
    ``tcp://`` engine is refused: anyone on the path could read and drive it (the
    Engine API runs containers as root)."""
    from docker.tls import TLSConfig

    if os.environ.get("DOCKER_TLS_VERIFY", "") in ("", "0"):
        raise RuntimeUnavailable(
            f"{what} {endpoint} is plain TCP: kctl refuses an unencrypted, "
            "unauthenticated Docker engine",
            hint=TLS_FIX,
        )
    certs = os.path.expanduser(os.environ.get("DOCKER_CERT_PATH") or "~/.docker")
    files = {n: os.path.join(certs, f"{n}.pem") for n in ("ca", "cert", "key")}
    missing = [f for f in files.values() if not os.path.isfile(f)]
    if missing:
        raise RuntimeUnavailable(
            f"{what} {endpoint}: DOCKER_TLS_VERIFY is set but {', '.join(missing)} is missing",
            hint=TLS_FIX,
        )
    return TLSConfig(
        client_cert=(files["cert"], files["key"]), ca_cert=files["ca"], verify=files["ca"]
    )


#: how to install docker's SSH transport
SSH_EXTRA = "pip install 'kctl[ssh]'"
#: what an ssh:// engine needs of kctl's user and of the host
SSH_FIX = (
    "kctl connects with paramiko as its user, as `ssh` would: the host's key must be in "
    "~/.ssh/known_hosts (`ssh-keyscan -p PORT HOST >> ~/.ssh/known_hosts`; an unknown key "
    "is refused), the host must accept a key of ~/.ssh/id_*, the ssh agent's or "
    "~/.ssh/config's IdentityFile, and that user must be allowed to run "
    "`docker system dial-stdio` there"
)


def need_ssh(endpoint: str, what: str) -> None:
    """RuntimeUnavailable (exit 5) naming the ``ssh`` extra unless paramiko, docker's SSH
    transport, can be imported."""
    try:
        import paramiko  # noqa: F401
    except ImportError:
        raise RuntimeUnavailable(
            f"{what} {endpoint} is an ssh:// engine, and docker's SSH transport (paramiko) "
            "is not installed",
            hint=f"{SSH_EXTRA} (paramiko), or reach the engine over tcp:// with TLS",
        ) from None


def engine_client(endpoint: str, *, timeout_s: float, what: str) -> DockerClient:
    """A client of the engine at ``endpoint`` (not yet pinged): ``unix://`` as is,
    ``ssh://`` through docker's SSH transport (paramiko, the ``ssh`` extra; it connects
    here, reading ``~/.ssh/config`` and ``~/.ssh/known_hosts``), ``tcp://`` only with
    verified TLS (:func:`tls_config`)."""
    import docker

    tls = tls_config(endpoint, what) if _tcp(endpoint) else None
    if endpoint.startswith("https://"):
        endpoint = "tcp://" + endpoint[len("https://") :]
    if not endpoint.startswith("ssh://"):
        return docker.DockerClient(
            base_url=endpoint, timeout=max(1, int(timeout_s)), tls=tls or False
        )
    need_ssh(endpoint, what)
    try:
        return docker.DockerClient(base_url=endpoint, timeout=max(1, int(timeout_s)))
    except Exception as exc:  # paramiko's: unknown host key, refused key, no route
        raise RuntimeUnavailable(
            f"{what} {endpoint}: the SSH connection failed: {_short(exc)}", hint=SSH_FIX
        ) from exc


def probe_unix_socket(host: str) -> None:
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
            hint="kctl deploy builds it; `kctl plan PROFILE` shows its tag",
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
