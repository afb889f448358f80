"""The HTTP face of the simulator: SGLang's endpoints on a standard-library
``ThreadingHTTPServer`` (one thread per connection, HTTP/1.1 keep-alive, chunked SSE).

Endpoints: ``/health`` ``/health_generate`` ``/get_model_info`` ``/model_info``
``/get_server_info`` ``/server_info`` ``/generate`` ``/flush_cache`` ``/v1/models``.
"""

from __future__ import annotations

import hmac
import json
import sys
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kctl.sim.engine import Aborted, Engine
from kctl.sim.logs import Log
from kctl.sim.request import RequestError

_FLUSH_OK = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
    "waiting requests, the operation will not be performed.)\n"
)


class SimHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # the port must be reusable at once after a stop, as kctl restarts on the same port
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], engine: Engine, log: Log) -> None:
        self.engine = engine
        self.log = log
        super().__init__(address, Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that hangs up is routine; only a real bug may print a traceback, because
        # kctl's health check treats "Traceback (most recent call last):" as fatal
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class _ClientGone(Exception):
    pass


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    # stream chunks are small and latency-sensitive
    disable_nagle_algorithm = True
    server: SimHTTPServer

    # -- plumbing -------------------------------------------------------------------------
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib signature)
        pass  # access lines are written by _access in uvicorn's format

    def _access(self, status: int) -> None:
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:  # 499: nginx's "client closed request", used for aborted requests
            phrase = "Aborted"
        host, port = self.client_address[:2]
        self.server.log.raw(
            f'INFO:     {host}:{port} - "{self.command} {self.path} {self.request_version}" '
            f"{status} {phrase}"
        )

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        # logged before the body goes out, so the line precedes anything the client does next
        self._access(status)
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json")

    def _empty(self, status: int) -> None:
        self._send(status, b"", "text/plain; charset=utf-8")

    def _body(self) -> Any:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raise RequestError("chunked request bodies are not supported", 411)
        length = self.headers.get("Content-Length", "0").strip() or "0"
        if not length.isdigit():
            raise RequestError(f"bad Content-Length {length!r}")
        raw = self.rfile.read(int(length))
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise RequestError(f"request body is not valid JSON: {exc}") from None

    def _chunk(self, data: bytes) -> None:
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise _ClientGone() from exc

    # -- routing --------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._route()

    def do_POST(self) -> None:
        self._route()

    def do_PUT(self) -> None:
        self._route()

    def _authorized(self, path: str) -> bool:
        """SGLang's ``--api-key`` as its middleware applies it (``sglang.srt.utils.auth``):
        with a key set, every request but ``/health*`` and ``/metrics*`` needs
        ``Authorization: Bearer <key>`` (scheme case-insensitive, compared in constant
        time); without one, everything is open."""
        key = self.server.engine.args.api_key
        if not key or path.startswith(("/health", "/metrics")):
            return True
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), key.encode())

    def _route(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        engine = self.server.engine
        if not self._authorized(path):
            # SGLang's api key middleware: 401 before the body is read
            self.close_connection = True
            self._json(401, {"error": "Unauthorized"})
            return
        try:
            body = self._body() if self.command in ("POST", "PUT") else {}
            if path in ("/health", "/health_generate"):
                self._empty(engine.health())
            elif path in ("/model_info", "/get_model_info") and self.command == "GET":
                self._json(200, engine.model_info())
            elif path in ("/server_info", "/get_server_info") and self.command == "GET":
                self._json(200, engine.server_info())
            elif path == "/generate" and self.command in ("POST", "PUT"):
                self._generate(body)
            elif path == "/flush_cache" and self.command in ("GET", "POST"):
                if engine.flush_cache():
                    self._send(200, _FLUSH_OK.encode(), "text/plain; charset=utf-8")
                else:
                    self._send(400, _FLUSH_OK.encode(), "text/plain; charset=utf-8")
            elif path == "/v1/models" and self.command == "GET":
                name = engine.args.served_model_name or engine.args.model_path
                self._json(200, {"object": "list", "data": [{"id": name, "object": "model"}]})
            else:
                self._json(404, {"detail": "Not Found"})
        except RequestError as exc:
            self._json(exc.status, exc.payload())
        except Aborted:
            # shutting down mid-request: drop the connection like a dying server would
            self.close_connection = True
            self._access(499)

    def _generate(self, body: Any) -> None:
        engine = self.server.engine
        reqs = engine.parse(body)
        if not reqs[0].stream:
            for r in reqs:
                engine.admit(r)
            results = [engine.generate(r) for r in reqs]
            self._json(200, results[0] if len(results) == 1 else results)
            return
        req = reqs[0]
        failure: RequestError | None = None
        try:
            engine.admit(req)
        except RequestError as exc:
            if exc.status < 500:
                raise
            # SGLang reports a failure inside a stream as an error event, after a 200
            failure = exc
        self._access(200)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            if failure is None:
                for chunk in engine.run(req):
                    self._chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            else:
                self._chunk(b"data: " + json.dumps(failure.payload()).encode() + b"\n\n")
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")  # the zero-length chunk ends the chunked body
        except _ClientGone:
            self.close_connection = True
