"""The streaming client against a real local SSE server process (failure modes that a
healthy SGLang, or the simulator, does not produce on demand)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kctl.errors import GateError
from kctl.gate.client import Endpoint, greedy_ids, stream_generate


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def sse() -> Iterator[Endpoint]:
    port = free_port()
    script = Path(__file__).with_name("sse_server.py")
    proc = subprocess.Popen([sys.executable, str(script), str(port)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        yield Endpoint("127.0.0.1", port)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()


def gen(ep: Endpoint, n: int, timeout_s: float = 10.0):  # type: ignore[no-untyped-def]
    payload = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": n}}
    return stream_generate(ep, payload, timeout_s=timeout_s, expected_tokens=n)


def test_normal_stream_counts_tokens_between_first_and_last_chunk(sse: Endpoint) -> None:
    r = gen(sse, 8)
    assert r.error is None
    assert r.completion_tokens == 8 and r.chunks == 4
    # 6 tokens between the first chunk (2) and the last (8), over the time between their
    # arrivals (the server sleeps 3 x 50 ms between them: a loaded machine only stretches it)
    (t_first, first), *_, (t_last, last) = r.trace.points
    assert (first, last) == (2, 8)
    assert r.decode_tps == pytest.approx(6 / (t_last - t_first))
    assert 0 < r.decode_tps < 41
    assert r.ttft_s is not None and r.ttft_s < r.e2e_s


def test_http_error_is_a_failed_result(sse: Endpoint) -> None:
    r = gen(sse, 9)
    assert r.error == 'HTTP 500: {"error": {"message": "internal boom"}}'
    assert r.decode_tps is None


def test_error_event(sse: Endpoint) -> None:
    assert gen(sse, 10).error == "server error: scheduler died"


def test_timeout_bounds_the_whole_request(sse: Endpoint) -> None:
    t0 = time.monotonic()
    r = gen(sse, 11, timeout_s=0.5)
    assert time.monotonic() - t0 < 3
    assert r.error == "timed out after 0.5 s"
    assert r.completion_tokens == 2


def test_connection_reset(sse: Endpoint) -> None:
    r = gen(sse, 12)
    assert r.error is not None
    assert r.error.startswith(("ConnectionResetError", "RemoteDisconnected", "IncompleteRead"))


def test_short_stream_and_abort(sse: Endpoint) -> None:
    assert gen(sse, 13).error == "stream ended after 5 of 13 tokens"
    assert gen(sse, 14).error == "aborted by server: client disconnected"


def test_refused_connection() -> None:
    r = gen(Endpoint("127.0.0.1", free_port()), 8)
    assert r.error is not None and r.error.startswith("ConnectionRefusedError")


def test_greedy_ids(sse: Endpoint) -> None:
    assert greedy_ids(sse.host, sse.port, [5, 6], 4) == [0, 1, 2, 3]
    with pytest.raises(GateError, match="greedy probe failed: ConnectionRefusedError"):
        greedy_ids("127.0.0.1", free_port(), [5], 4, timeout_s=2)
