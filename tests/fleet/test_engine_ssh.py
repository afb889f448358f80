"""``ssh://`` Docker engines through docker's SSH transport (paramiko, the ``ssh`` extra),
in-process: kctl's engine connection reaches a stand-in engine (a unix-socket HTTP server
that answers the few Engine API calls used here) through the test SSH server of
:mod:`tests.fleet.sshd`, refuses an unknown host key and a refused client key with the
fix, and without paramiko names the extra (exit 5). ``tests/docker/test_engine_ssh.py``
does the same against the real engine."""

from __future__ import annotations

import json
import shutil
import socketserver
import sys
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from kctl.errors import RuntimeUnavailable
from kctl.fleet.images import connect_engine
from kctl.fleet.swarm import SwarmDriver
from kctl.runtime.docker.engine import engine_client
from tests.fleet.sshd import DIAL_STDIO, SSHServer, ssh_home

API = "1.45"


class _Engine(BaseHTTPRequestHandler):
    """The Engine API calls a ping, a version probe and ``docker info`` make."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _send(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path.endswith("/_ping"):
            self._send(b"OK", "text/plain")
        elif path.endswith("/version"):
            self._send(
                json.dumps({"ApiVersion": API, "Version": "stand-in"}).encode(), "application/json"
            )
        elif path.endswith("/info"):
            info = {"ID": "stand-in-engine", "Swarm": {"NodeID": "node-1"}}
            self._send(json.dumps(info).encode(), "application/json")
        else:
            self.send_error(404)


class _UnixHTTP(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self) -> tuple[Any, Any]:
        conn, _ = self.socket.accept()
        return conn, ("stand-in", 0)  # BaseHTTPRequestHandler wants a (host, port)


@pytest.fixture
def engine_socket() -> Iterator[str]:
    where = Path(tempfile.mkdtemp(prefix="kse-"))  # short: a unix socket path is 108 bytes
    path = str(where / "docker.sock")
    httpd = _UnixHTTP(path, _Engine)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        httpd.shutdown()
        httpd.server_close()
        shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def sshd(engine_socket: str) -> Iterator[SSHServer]:
    with SSHServer(engine_socket) as server:
        yield server


@pytest.fixture
def home(tmp_path: Path, sshd: SSHServer, monkeypatch: pytest.MonkeyPatch) -> Path:
    """kctl's user: HOME with the client key and the server's host key; no agent."""
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return ssh_home(tmp_path / "home", sshd)


def test_kctl_reaches_an_engine_over_ssh(sshd: SSHServer, home: Path) -> None:
    client = connect_engine(sshd.url)  # a fleet file's swarm.engines entry
    try:
        assert client.info()["ID"] == "stand-in-engine"
    finally:
        client.close()
    assert sshd.logins >= 1 and set(sshd.commands) == {DIAL_STDIO}
    # the fleet's Swarm manager named by ssh:// (swarm.manager)
    driver = SwarmDriver("f", "owner", manager=sshd.url)
    try:
        assert driver.client.info()["Swarm"]["NodeID"] == "node-1"
    finally:
        driver.close()


def test_an_unknown_host_key_is_refused_with_the_fix(sshd: SSHServer, home: Path) -> None:
    ssh_home(home, sshd, trust_host=False)
    with pytest.raises(RuntimeUnavailable) as info:
        connect_engine(sshd.url)
    assert info.value.exit_code == 5
    assert f"{sshd.url}: the SSH connection failed" in info.value.message
    assert "not found in known_hosts" in info.value.message
    assert "ssh-keyscan" in (info.value.hint or "")
    assert sshd.commands == []  # nothing ran on a host kctl does not know


def test_a_key_the_host_refuses_is_refused_with_the_fix(sshd: SSHServer, home: Path) -> None:
    import paramiko

    sshd.client_key = paramiko.ECDSAKey.generate()  # the host now accepts another key only
    with pytest.raises(RuntimeUnavailable) as info:
        engine_client(sshd.url, timeout_s=10, what="the Swarm manager")
    assert "the Swarm manager" in info.value.message
    assert "Authentication failed" in info.value.message, info.value.message
    assert sshd.commands == []


def test_without_paramiko_the_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "paramiko", None)  # `import paramiko` raises ImportError
    with pytest.raises(RuntimeUnavailable) as info:
        engine_client("ssh://root@gpu-b", timeout_s=10, what="the Docker engine")
    assert info.value.exit_code == 5
    assert "ssh://root@gpu-b is an ssh:// engine" in info.value.message
    assert "pip install 'kctl[ssh]'" in (info.value.hint or "")
    # DOCKER_HOST=ssh://... too
    from kctl.runtime.docker.engine import connect

    monkeypatch.setenv("DOCKER_HOST", "ssh://root@gpu-b")
    with pytest.raises(RuntimeUnavailable, match="DOCKER_HOST ssh://root@gpu-b"):
        connect(timeout_s=10)
    # and through the CLI: one line, exit 5, the extra named
    from kctl.cli import main

    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "kind: fleet\nname: f\nswarm: {manager: 'ssh://root@gpu-a'}\nreplicas: 1\n"
        "ports: {first: 30000}\n"
    )
    monkeypatch.delenv("DOCKER_HOST")
    capsys.readouterr()
    code = main(["--state-dir", str(tmp_path / "state"), "status", "--fleet", str(fleet)])
    err = capsys.readouterr().err
    assert code == 5, err
    assert "the Swarm manager ssh://root@gpu-a is an ssh:// engine" in err
    assert "pip install 'kctl[ssh]'" in err
