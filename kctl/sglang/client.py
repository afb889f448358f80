"""The one HTTP client kctl talks to an SGLang server with (health, gate and status use it).

Built on ``requests``; every failure is a typed :class:`~kctl.errors.ServerError`:

- :class:`~kctl.errors.ServerUnreachable`: no connection, a reset, a broken stream
  (:class:`~kctl.errors.ServerTimeout` when no answer came in time);
- :class:`~kctl.errors.ServerBadStatus`: an HTTP status other than 200, with the body's start;
- :class:`~kctl.errors.ServerBadBody`: a 200 whose body is not JSON, or not the answer asked for.

Retries are the caller's choice (the health wait retries with tenacity; the gate does not,
because a failed request is a measurement).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Iterator
from typing import Any

import requests
import urllib3

from kctl.errors import ServerBadBody, ServerBadStatus, ServerTimeout, ServerUnreachable

#: at most this many characters of a body are kept in an error's text
BODY_LIMIT = 300

Clock = Callable[[], float]


def short(body: bytes | str) -> str:
    """A body (or error text) on one line, cut at :data:`BODY_LIMIT` characters."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    text = " ".join(text.split())
    return text[:BODY_LIMIT] + ("..." if len(text) > BODY_LIMIT else "")


def cause_of(exc: BaseException) -> str:
    """``Type: message`` of the innermost error behind a requests/urllib3 exception (the
    one that says what happened: ``ConnectionRefusedError``, ``ConnectionResetError``...)."""
    seen: set[int] = set()
    inner: BaseException = exc
    while id(inner) not in seen:
        seen.add(id(inner))
        nxt = inner.__cause__ or inner.__context__ or getattr(inner, "reason", None)
        if nxt is None and inner.args and isinstance(inner.args[0], BaseException):
            nxt = inner.args[0]
        if nxt is None and len(inner.args) > 1 and isinstance(inner.args[1], BaseException):
            nxt = inner.args[1]  # urllib3's ProtocolError("Connection broken: ...", cause)
        if not isinstance(nxt, BaseException):
            break
        inner = nxt
    return f"{type(inner).__name__}: {short(str(inner)) or 'connection failed'}"


class SGLangClient:
    """Requests to one SGLang server at ``host:port`` (connect to a wildcard bind through
    loopback; :func:`kctl.launch.connect_host` says where), with its API key when it has
    one (sent as a header, never shown)."""

    def __init__(self, host: str, port: int, *, api_key: str | None = None) -> None:
        self.host = host
        self.port = port
        #: SGLang's ``--api-key``: sent as ``Authorization: Bearer`` on every request
        self._api_key = api_key
        self.base = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"

    def _send(
        self, method: str, path: str, timeout_s: float, body: Any = None, stream: bool = False
    ) -> requests.Response:
        what = f"{method} {path}"
        headers = {"Accept": "text/event-stream"} if stream else {}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key}"
        try:
            resp = requests.request(
                method,
                self.base + path,
                json=body,
                headers=headers,
                timeout=timeout_s,
                stream=stream,
                allow_redirects=False,
            )
        except requests.Timeout:
            raise ServerTimeout(what, timeout_s) from None
        except requests.RequestException as exc:
            raise ServerUnreachable(what, cause_of(exc)) from None
        if resp.status_code != 200:
            try:
                text = short(resp.raw.read(BODY_LIMIT * 4) if stream else resp.content)
            except (requests.RequestException, OSError):
                text = ""
            resp.close()
            raise ServerBadStatus(what, resp.status_code, text)
        return resp

    def health(self, timeout_s: float) -> None:
        """GET /health answers 200."""
        self._send("GET", "/health", timeout_s).close()

    def get_json(self, path: str, timeout_s: float) -> dict[str, Any]:
        """GET ``path`` (e.g. ``/get_model_info``); the answer's JSON object."""
        what = f"GET {path}"
        obj, raw = _body_json(self._send("GET", path, timeout_s), what)
        if not isinstance(obj, dict):
            raise ServerBadBody(what, "unexpected answer", short(raw))
        return obj

    def generate(self, payload: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """POST /generate without streaming; the answer's object (the first of a batch)."""
        what = "POST /generate"
        resp = self._send("POST", "/generate", timeout_s, {**payload, "stream": False})
        obj, raw = _body_json(resp, what)
        if isinstance(obj, list):  # a batched answer; one prompt was sent
            obj = obj[0] if obj else {}
        if not isinstance(obj, dict):
            raise ServerBadBody(what, "unexpected answer", short(raw))
        if "error" in obj:
            raise ServerBadBody(what, "server error", error_text(obj))
        return obj

    def stream(
        self, payload: dict[str, Any], *, timeout_s: float, clock: Clock
    ) -> Generator[bytes, None, None]:
        """POST /generate with ``stream: true``; yields the data of each SSE ``data:`` event
        as it arrives, up to (not including) ``[DONE]``, and returns there.

        ``timeout_s`` bounds the whole request, not each read (each read waits only for the
        time left). Events are read as the server flushes them, so a caller timing them
        sees the server's pacing. Raises :class:`ServerUnreachable` when the stream breaks
        or ends without ``[DONE]``, :class:`ServerTimeout` when time runs out."""
        what = "POST /generate"
        deadline = clock() + timeout_s
        resp = self._send("POST", "/generate", timeout_s, {**payload, "stream": True}, True)
        sock = getattr(getattr(resp.raw, "connection", None), "sock", None)

        def before_read() -> None:
            remaining = deadline - clock()
            if remaining <= 0:
                raise ServerTimeout(what, timeout_s)
            if sock is not None:
                sock.settimeout(remaining)

        try:
            for line in _lines(resp, before_read):
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue  # SSE comments, blank separators
                data = line[5:].strip()
                if data == b"[DONE]":
                    return
                yield data
        except (requests.Timeout, TimeoutError, urllib3.exceptions.TimeoutError):
            raise ServerTimeout(what, timeout_s) from None
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise ServerUnreachable(what, cause_of(exc)) from None
        finally:
            resp.close()
        raise ServerUnreachable(what, "stream ended without [DONE]")


def _body_json(resp: requests.Response, what: str) -> tuple[Any, bytes]:
    """The whole body of ``resp`` decoded as JSON, and the raw bytes (for messages)."""
    try:
        raw = resp.content
    except requests.RequestException as exc:
        raise ServerUnreachable(what, cause_of(exc)) from None
    try:
        return json.loads(raw), raw
    except ValueError:
        raise ServerBadBody(what, "not JSON", short(raw)) from None


def _lines(resp: requests.Response, before_read: Callable[[], None]) -> Iterator[bytes]:
    """The body's lines as the server sends them. ``read1`` returns what has arrived
    instead of waiting for a full buffer, which keeps per-event timing exact whether the
    body is chunked or not."""
    pending = b""
    while True:
        before_read()
        data = resp.raw.read1(65536)
        if not data:
            if pending:
                yield pending
            return
        pending += data
        *complete, pending = pending.split(b"\n")
        yield from complete


def error_text(obj: dict[str, Any]) -> str:
    """The message of an SGLang ``{"error": ...}`` answer or event."""
    err = obj.get("error")
    if isinstance(err, dict):
        return short(str(err.get("message") or err))
    return short(str(err))
