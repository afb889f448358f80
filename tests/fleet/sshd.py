"""A small SSH server for the ``ssh://`` engine tests (the CI machine runs no sshd): paramiko's
server side on ``127.0.0.1:<free port>``, accepting one test key for one user and one exec
request, ``docker system dial-stdio`` (what docker's SSH transport runs on the host), which
it answers by piping the channel to a Docker engine's unix socket, as the docker CLI's
``dial-stdio`` does.

:func:`ssh_home` writes what kctl's user would have: ``~/.ssh`` with the client key
(``id_ecdsa``, which paramiko looks for) and ``known_hosts`` naming the server's host key.
Point ``HOME`` at it: docker's transport reads ``~/.ssh/config`` and ``~/.ssh/known_hosts``
through ``os.path.expanduser``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

DIAL_STDIO = b"docker system dial-stdio"


#: what a side that closed raises: paramiko's transport raises EOFError once its peer left
_GONE = (OSError, EOFError, paramiko.SSHException)


def _pipe(channel: paramiko.Channel, engine_socket: str) -> None:
    """Channel <-> the engine's socket until either side closes."""
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(engine_socket)
    except OSError as exc:
        with contextlib.suppress(*_GONE):  # the client may be gone already
            channel.sendall_stderr(f"cannot reach {engine_socket}: {exc}\n".encode())
            channel.send_exit_status(1)
            channel.close()
        return

    def upstream() -> None:
        try:
            while data := channel.recv(65536):
                sock.sendall(data)
        except _GONE:
            pass
        finally:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)

    up = threading.Thread(target=upstream, daemon=True)
    up.start()
    try:
        while data := sock.recv(65536):
            channel.sendall(data)
    except _GONE:  # a client that hangs up mid-answer ends the pipe, not the test
        pass
    finally:
        sock.close()
        up.join(timeout=5)
        try:
            channel.send_exit_status(0)
            channel.shutdown_write()
        except _GONE:
            pass
        with contextlib.suppress(*_GONE):
            channel.close()


class _Interface(paramiko.ServerInterface):
    def __init__(self, server: SSHServer) -> None:
        self.server = server

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        if username == self.server.user and key == self.server.client_key:
            return paramiko.AUTH_SUCCESSFUL
        return paramiko.AUTH_FAILED

    def check_channel_request(self, kind: str, chanid: int) -> int:
        if kind == "session":
            return paramiko.OPEN_SUCCEEDED
        return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        self.server.commands.append(command)
        if command != DIAL_STDIO:
            return False
        threading.Thread(
            target=_pipe, args=(channel, self.server.engine_socket), daemon=True
        ).start()
        return True


@dataclass
class SSHServer:
    """``with SSHServer(engine_socket) as sshd:`` serves ``ssh://root@127.0.0.1:PORT``."""

    engine_socket: str
    user: str = "root"
    host_key: paramiko.ECDSAKey = field(default_factory=paramiko.ECDSAKey.generate)
    client_key: paramiko.ECDSAKey = field(default_factory=paramiko.ECDSAKey.generate)
    commands: list[bytes] = field(default_factory=list)
    logins: int = 0

    def __post_init__(self) -> None:
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port: int = self._listener.getsockname()[1]
        self._transports: list[paramiko.Transport] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="test-sshd", daemon=True)

    @property
    def url(self) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            transport = paramiko.Transport(conn)
            transport.add_server_key(self.host_key)
            self._transports.append(transport)
            try:
                transport.start_server(server=_Interface(self))
            except (paramiko.SSHException, EOFError, OSError):
                transport.close()
                continue
            self.logins += 1

    def __enter__(self) -> SSHServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):  # wakes the accept(), which close() does not
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for transport in self._transports:
            transport.close()
        self._thread.join(timeout=5)


def ssh_home(home: Path, server: SSHServer, *, trust_host: bool = True) -> Path:
    """``home/.ssh`` with the client key as ``id_ecdsa`` and, with ``trust_host``, the
    server's host key in ``known_hosts``; returns ``home``."""
    ssh = home / ".ssh"
    ssh.mkdir(parents=True, mode=0o700, exist_ok=True)
    server.client_key.write_private_key_file(str(ssh / "id_ecdsa"))
    (ssh / "id_ecdsa").chmod(0o600)
    known = ""
    if trust_host:
        key = server.host_key
        known = f"[127.0.0.1]:{server.port} {key.get_name()} {key.get_base64()}\n"
    (ssh / "known_hosts").write_text(known)
    return home
