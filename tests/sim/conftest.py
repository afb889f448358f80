"""Fixtures for the simulator tests: real ``python -m kctl.sim`` processes on a free
127.0.0.1 port, talked to over real HTTP with the standard library."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
READY = "The server is fired up and ready to roll!"
#: fast defaults: 2 simulated seconds of load at 100x = 20 ms
FAST_ENV = {"KCTL_SIM_SPEEDUP": "100", "KCTL_SIM_LOAD_S": "2"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@dataclass
class Sim:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    _log_file: Any = field(repr=False, default=None)

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_for_log(self, needle: str, timeout: float = 10.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log()
            if needle in text:
                return text
            if self.proc.poll() is not None:
                text = self.log()
                if needle in text:
                    return text
                raise AssertionError(f"exited {self.proc.returncode} before {needle!r}:\n{text}")
            time.sleep(0.01)
        raise AssertionError(f"timed out waiting for {needle!r}:\n{self.log()}")

    def wait_ready(self, timeout: float = 10.0) -> None:
        self.wait_for_log(READY, timeout)

    def wait_exit(self, timeout: float = 10.0) -> int:
        return self.proc.wait(timeout=timeout)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout: float = 10.0,
    ) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            payload = None if body is None else json.dumps(body)
            headers = {"Content-Type": "application/json"} if payload else {}
            conn.request(method, path, body=payload, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def get_json(self, path: str) -> Any:
        status, body = self.request("GET", path)
        assert status == 200, (status, body)
        return json.loads(body)

    def generate(self, body: dict[str, Any], timeout: float = 30.0) -> tuple[int, Any]:
        status, raw = self.request("POST", "/generate", body, timeout)
        return status, json.loads(raw)

    def stream(
        self, body: dict[str, Any], timeout: float = 60.0
    ) -> tuple[list[tuple[float, str]], bytes]:
        """POST a streaming /generate; return (arrival time, event payload) per SSE event
        and the raw body."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(
                "POST",
                "/generate",
                body=json.dumps({**body, "stream": True}),
                headers={"Content-Type": "application/json"},
            )
            resp = conn.getresponse()
            assert resp.status == 200, resp.status
            assert resp.getheader("Content-Type", "").startswith("text/event-stream")
            events: list[tuple[float, str]] = []
            raw = b""
            while True:
                line = resp.readline()
                if not line:
                    break
                raw += line
                if line.startswith(b"data: "):
                    events.append((time.monotonic(), line[6:].decode().rstrip("\n")))
            return events, raw
        finally:
            conn.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator[Any]:
    """Factory: ``start_sim(*args, env={...}, module="kctl.sim")`` starts a simulator with
    the fast defaults and ``--host 127.0.0.1 --port <free>`` (and a model path when
    ``args`` have none); all are stopped afterwards."""
    sims: list[Sim] = []

    def start(
        *args: str,
        env: dict[str, str] | None = None,
        module: str = "kctl.sim",
        extra_pythonpath: tuple[str, ...] = (),
        port: int | None = None,
        python: str = sys.executable,
    ) -> Sim:
        port = port or free_port()
        full_env = {
            k: v for k, v in os.environ.items() if not k.startswith(("KCTL_SIM_", "KDTREE_"))
        }
        full_env.update(FAST_ENV)
        full_env.update(env or {})
        full_env["PYTHONPATH"] = os.pathsep.join(
            [*extra_pythonpath, str(REPO), full_env.get("PYTHONPATH", "")]
        ).rstrip(os.pathsep)
        log_path = tmp_path / f"sim-{len(sims)}-{port}.log"
        log_file = open(log_path, "wb")  # noqa: SIM115 (closed by Sim.stop)
        argv = [python, "-m", module, "--host", "127.0.0.1", "--port", str(port), *args]
        if not {"--model-path", "--model"} & set(args):
            argv += ["--model-path", "/models/sim-model"]  # SGLang requires one
        proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, env=full_env)
        sim = Sim(proc=proc, port=port, log_path=log_path, _log_file=log_file)
        sims.append(sim)
        return sim

    yield start
    for sim in sims:
        sim.stop()


def decode_rate(events: list[tuple[float, str]]) -> float:
    """Decode tokens/s as kctl's gate measures it: completion-token counter between the
    first and the last chunk."""
    chunks = [(t, json.loads(p)) for t, p in events if p != "[DONE]"]
    (t0, c0), (t1, c1) = chunks[0], chunks[-1]
    return (c1["meta_info"]["completion_tokens"] - c0["meta_info"]["completion_tokens"]) / (t1 - t0)
