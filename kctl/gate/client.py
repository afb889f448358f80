"""A small HTTP client for SGLang's native ``/generate``, standard library only.

It times one streamed request the way the gate needs it (see :func:`stream_generate`) and
fetches greedy outputs for the correctness probes (:func:`greedy_ids`). A request that
fails (HTTP error, ``data: {"error": ...}`` event, timeout, reset connection, a stream
that ends early) comes back as a :class:`StreamResult` with ``error`` set; the client
never raises for a server's misbehaviour, so one bad request cannot abort a gate.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kctl.errors import GateError
from kctl.gate.trace import ChunkTrace

Clock = Callable[[], float]

#: at most this many bytes of an error body are kept in a sample's error text
_ERROR_BODY_LIMIT = 300


@dataclass(frozen=True)
class Endpoint:
    """Where a server listens."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class StreamResult:
    """Timings of one streamed request. ``error`` is None when it completed."""

    #: seconds from sending the request to the first chunk that carries completion tokens
    ttft_s: float | None
    #: (last_ct - first_ct) / (t_last - t_first) over the chunks that carry tokens; counted
    #: with the cumulative ``completion_tokens`` because speculative decoding delivers
    #: several tokens per chunk
    decode_tps: float | None
    e2e_s: float
    completion_tokens: int
    chunks: int
    error: str | None = None
    #: the chunks' times and the last meta_info: ITL and the speculative fields
    trace: ChunkTrace = field(default_factory=ChunkTrace)


def _short(body: bytes | str) -> str:
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    text = " ".join(text.split())
    return text[:_ERROR_BODY_LIMIT] + ("..." if len(text) > _ERROR_BODY_LIMIT else "")


def _error_text(obj: Any) -> str:
    err = obj.get("error")
    if isinstance(err, dict):
        return _short(str(err.get("message") or err))
    return _short(str(err))


def stream_generate(
    endpoint: Endpoint,
    payload: dict[str, Any],
    *,
    timeout_s: float,
    expected_tokens: int | None = None,
    clock: Clock = time.monotonic,
) -> StreamResult:
    """POST ``payload`` to ``/generate`` with ``stream: true`` and time the SSE stream.

    ``timeout_s`` bounds the whole request, not each read. ``expected_tokens`` (the
    request's ``max_new_tokens`` under ``ignore_eos``) turns a short stream into an error,
    because a truncated generation would otherwise look fast.
    """
    body = json.dumps({**payload, "stream": True}).encode()
    t0 = clock()
    deadline = t0 + timeout_s
    first: tuple[float, int] | None = None
    last: tuple[float, int] | None = None
    chunks = 0
    trace = ChunkTrace()
    conn = http.client.HTTPConnection(endpoint.host, endpoint.port, timeout=timeout_s)
    resp: http.client.HTTPResponse | None = None

    def result(error: str | None) -> StreamResult:
        ct = last[1] if last else 0
        ttft = first[0] - t0 if first else None
        tps = None
        if first and last and last[1] > first[1] and last[0] > first[0]:
            tps = (last[1] - first[1]) / (last[0] - first[0])
        if error is None and expected_tokens is not None and ct != expected_tokens:
            error = f"stream ended after {ct} of {expected_tokens} tokens"
        if error is None and tps is None:
            error = f"decode speed undefined: {ct} tokens in {chunks} chunk(s)"
        return StreamResult(ttft, tps, clock() - t0, ct, chunks, error, trace)

    try:
        conn.request(
            "POST",
            "/generate",
            body=body,
            headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
        )
        # keep our own reference: http.client drops conn.sock when the response owns it
        sock = conn.sock
        resp = conn.getresponse()
        if resp.status != 200:
            return result(f"HTTP {resp.status}: {_short(resp.read(_ERROR_BODY_LIMIT * 4))}")
        while True:
            remaining = deadline - clock()
            if remaining <= 0:
                return result(f"timed out after {timeout_s:g} s")
            if sock is not None:
                sock.settimeout(remaining)
            line = resp.readline()
            if not line:
                return result("stream ended without [DONE]")
            line = line.strip()
            if not line.startswith(b"data:"):
                continue  # SSE comments, blank separators
            data = line[5:].strip()
            if data == b"[DONE]":
                return result(None)
            now = clock()
            try:
                obj = json.loads(data)
            except ValueError:
                return result(f"malformed event: {_short(data)}")
            if not isinstance(obj, dict):
                return result(f"malformed event: {_short(data)}")
            if "error" in obj:
                return result(f"server error: {_error_text(obj)}")
            meta = obj.get("meta_info") or {}
            ct = int(meta.get("completion_tokens") or 0)
            trace.add(now, meta)
            chunks += 1
            if ct > 0:
                if first is None:
                    first = (now, ct)
                last = (now, ct)
            finish = meta.get("finish_reason")
            if isinstance(finish, dict) and finish.get("type") == "abort":
                return result(f"aborted by server: {_short(str(finish.get('message', finish)))}")
    except TimeoutError:
        return result(f"timed out after {timeout_s:g} s")
    except (OSError, http.client.HTTPException) as exc:
        return result(f"{type(exc).__name__}: {_short(str(exc)) or 'connection failed'}")
    finally:
        if resp is not None:
            resp.close()
        conn.close()


def greedy_ids(
    host: str,
    port: int,
    input_ids: list[int],
    n: int,
    *,
    timeout_s: float = 120.0,
) -> list[int]:
    """The first ``n`` greedy (temperature 0) output ids for ``input_ids``.

    Raises :class:`~kctl.errors.GateError` when the server does not answer with them;
    the gate records that as a failed probe.
    """
    body = json.dumps(
        {
            "input_ids": input_ids,
            "sampling_params": {"max_new_tokens": n, "temperature": 0.0, "ignore_eos": True},
            "stream": False,
        }
    ).encode()
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("POST", "/generate", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read()
        if resp.status != 200:
            raise GateError(f"greedy probe: HTTP {resp.status}: {_short(raw)}")
        obj = json.loads(raw)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise GateError(f"greedy probe failed: {type(exc).__name__}: {_short(str(exc))}") from exc
    finally:
        conn.close()
    if isinstance(obj, list):  # a batched answer; we sent one prompt
        obj = obj[0] if obj else {}
    if not isinstance(obj, dict):
        raise GateError(f"greedy probe: unexpected answer {_short(str(obj))}")
    if "error" in obj:
        raise GateError(f"greedy probe: server error: {_error_text(obj)}")
    ids = obj.get("output_ids")
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        raise GateError(f"greedy probe: answer has no output_ids list: {_short(str(obj))}")
    return list(ids[:n])
