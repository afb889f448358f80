"""The container state read straight from a Docker engine socket (a fake engine on a
unix socket here: the request and the three kinds of answer)."""

from __future__ import annotations

import json
import socketserver
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from kctl.errors import RuntimeUnavailable
from kctl.runtime.docker import lite

SEEN: list[str] = []


class _Engine(BaseHTTPRequestHandler):
    def log_message(self, *a: object) -> None:
        pass

    def address_string(self) -> str:
        return "unix"

    def do_GET(self) -> None:
        SEEN.append(self.path)
        if "gone" in self.path:
            status, body = 404, b"{}"
        elif "broken" in self.path:
            status, body = 500, b"{}"
        else:
            state = {"Running": False, "Status": "exited", "ExitCode": 3, "OOMKilled": True}
            status, body = 200, json.dumps({"State": state, "RestartCount": 2}).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "docker.sock"
    server = socketserver.ThreadingUnixStreamServer(str(path), _Engine)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    try:
        yield path
    finally:
        server.shutdown()
        server.server_close()


def test_inspect_over_the_socket(engine: Path) -> None:
    state = lite.inspect_state("abc123")
    assert SEEN[-1] == "/containers/abc123/json"
    assert state is not None and not state.running
    assert state.exit_code == 3 and state.oom_killed and state.restart_count == 2
    gone = lite.inspect_state("gone")
    assert gone is not None and gone.detail == "container not found"
    with pytest.raises(RuntimeUnavailable, match="HTTP 500"):
        lite.inspect_state("broken")


def test_unreachable_engine_and_tcp_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'none.sock'}")
    with pytest.raises(RuntimeUnavailable, match="cannot reach the Docker engine"):
        lite.inspect_state("x")
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:2375")
    assert lite.inspect_state("x") is None
