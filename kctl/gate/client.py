"""The gate's two kinds of request, on :class:`kctl.sglang.client.SGLangClient`.

It times one streamed request the way the gate needs it (see :func:`stream_generate`) and
fetches greedy outputs for the correctness probes (:func:`greedy_ids`). A request that
fails (HTTP error, ``data: {"error": ...}`` event, timeout, reset connection, a stream
that ends early) comes back as a :class:`StreamResult` with ``error`` set; a server's
misbehaviour never raises here, so one bad request cannot abort a gate.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kctl.errors import GateError, ServerBadStatus, ServerError, ServerUnreachable
from kctl.gate.trace import ChunkTrace
from kctl.sglang.client import SGLangClient, error_text, short

Clock = Callable[[], float]


@dataclass(frozen=True)
class Endpoint:
    """Where a server listens."""

    host: str
    port: int
    #: the server's API key (read from its secret reference), or None
    api_key: str | None = field(default=None, repr=False, compare=False)

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"

    def client(self) -> SGLangClient:
        return SGLangClient(self.host, self.port, api_key=self.api_key)


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


class _Timing:
    """What the events of one stream said, and when."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.t0 = clock()
        self.first: tuple[float, int] | None = None
        self.last: tuple[float, int] | None = None
        self.chunks = 0
        self.trace = ChunkTrace()

    def event(self, data: bytes) -> str | None:
        """Record one event; a reason to stop the stream as failed, or None."""
        now = self.clock()
        try:
            obj = json.loads(data)
        except ValueError:
            return f"malformed event: {short(data)}"
        if not isinstance(obj, dict):
            return f"malformed event: {short(data)}"
        if "error" in obj:
            return f"server error: {error_text(obj)}"
        meta = obj.get("meta_info") or {}
        ct = int(meta.get("completion_tokens") or 0)
        self.trace.add(now, meta)
        self.chunks += 1
        if ct > 0:
            if self.first is None:
                self.first = (now, ct)
            self.last = (now, ct)
        finish = meta.get("finish_reason")
        if isinstance(finish, dict) and finish.get("type") == "abort":
            return f"aborted by server: {short(str(finish.get('message', finish)))}"
        return None

    def result(self, error: str | None, expected_tokens: int | None) -> StreamResult:
        first, last = self.first, self.last
        ct = last[1] if last else 0
        ttft = first[0] - self.t0 if first else None
        tps = None
        if first and last and last[1] > first[1] and last[0] > first[0]:
            tps = (last[1] - first[1]) / (last[0] - first[0])
        if error is None and expected_tokens is not None and ct != expected_tokens:
            error = f"stream ended after {ct} of {expected_tokens} tokens"
        if error is None and tps is None:
            error = f"decode speed undefined: {ct} tokens in {self.chunks} chunk(s)"
        return StreamResult(ttft, tps, self.clock() - self.t0, ct, self.chunks, error, self.trace)


def _failure(exc: ServerError) -> str:
    if isinstance(exc, ServerBadStatus):
        return f"HTTP {exc.status}: {exc.body}"
    if isinstance(exc, ServerUnreachable):
        return exc.cause
    return exc.message


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
    timing = _Timing(clock)
    events = endpoint.client().stream(payload, timeout_s=timeout_s, clock=clock)
    try:
        for data in events:
            stop = timing.event(data)
            if stop is not None:
                return timing.result(stop, expected_tokens)
    except ServerError as exc:
        return timing.result(_failure(exc), expected_tokens)
    finally:
        events.close()
    return timing.result(None, expected_tokens)


def greedy_ids(
    host: str,
    port: int,
    input_ids: list[int],
    n: int,
    *,
    timeout_s: float = 120.0,
    api_key: str | None = None,
) -> list[int]:
    """The first ``n`` greedy (temperature 0) output ids for ``input_ids``.

    Raises :class:`~kctl.errors.GateError` when the server does not answer with them;
    the gate records that as a failed probe.
    """
    payload = {
        "input_ids": input_ids,
        "sampling_params": {"max_new_tokens": n, "temperature": 0.0, "ignore_eos": True},
    }
    try:
        obj = SGLangClient(host, port, api_key=api_key).generate(payload, timeout_s)
    except ServerBadStatus as exc:
        raise GateError(f"greedy probe: HTTP {exc.status}: {exc.body}") from exc
    except ServerUnreachable as exc:
        raise GateError(f"greedy probe failed: {exc.cause}") from exc
    except ServerError as exc:
        raise GateError(f"greedy probe: {exc.message}") from exc
    ids = obj.get("output_ids")
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        raise GateError(f"greedy probe: answer has no output_ids list: {short(str(obj))}")
    return list(ids[:n])
