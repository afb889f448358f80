"""The SGLang client's typed errors, against a real local HTTP server process."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kctl.errors import (
    KctlError,
    ServerBadBody,
    ServerBadStatus,
    ServerError,
    ServerTimeout,
    ServerUnreachable,
)
from kctl.sglang.client import SGLangClient


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *a: object) -> None:
        pass

    def _answer(self, status: int, body: bytes) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except BrokenPipeError:  # the client gave up (the timeout case)
            pass

    def do_GET(self) -> None:
        if self.path == "/health":
            self._answer(200, b"")
        else:
            self._answer(503, b"warming up")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        mode = body["sampling_params"]["max_new_tokens"]
        answers = {
            1: (200, json.dumps([{"output_ids": [7], "meta_info": {}}]).encode()),
            2: (500, b'{"error": "boom"}'),
            3: (200, b"<html>not json</html>"),
            4: (200, b'{"error": {"message": "no capacity"}}'),
        }
        if mode == 5:
            import time

            time.sleep(2)
        self._answer(*answers.get(mode, (200, b"{}")))


@pytest.fixture(scope="module")
def server() -> Iterator[SGLangClient]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield SGLangClient("127.0.0.1", httpd.server_address[1])
    finally:
        httpd.shutdown()
        httpd.server_close()


def _gen(n: int) -> dict[str, object]:
    return {"input_ids": [1], "sampling_params": {"max_new_tokens": n}}


def test_answers_and_each_failure_has_its_type(server: SGLangClient) -> None:
    server.health(2)
    assert server.generate(_gen(1), 2) == {"output_ids": [7], "meta_info": {}}
    with pytest.raises(ServerBadStatus) as status:
        server.generate(_gen(2), 2)
    assert status.value.status == 500 and status.value.body == '{"error": "boom"}'
    assert status.value.message == 'POST /generate: HTTP 500 {"error": "boom"}'
    with pytest.raises(ServerBadBody, match="not JSON: <html>not json</html>"):
        server.generate(_gen(3), 2)
    with pytest.raises(ServerBadBody, match="server error: no capacity"):
        server.generate(_gen(4), 2)
    with pytest.raises(ServerTimeout, match="timed out after 0.3 s"):
        server.generate(_gen(5), 0.3)


def test_unreachable_names_the_cause() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ServerUnreachable) as err:
        SGLangClient("127.0.0.1", port).health(2)
    assert err.value.cause.startswith("ConnectionRefusedError")
    assert isinstance(err.value, ServerError) and isinstance(err.value, KctlError)
