"""End-to-end fixtures: real kctl processes driving real simulator processes over real
HTTP on 127.0.0.1. Nothing here mocks the server or the runtime."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def base_profile(port: int) -> dict[str, Any]:
    """A fast simulated profile: SGLang's Triton path, eager (the in-service comparison)."""
    return {
        "description": "integration-test baseline",
        "server": {
            "model_path": "/models/test-model",
            "host": "127.0.0.1",
            "port": port,
            "tp": 1,
            "attention_backend": "triton",
            "cuda_graphs": False,
            "verify_kernel": "none",
            "speculative": {
                "algorithm": "EAGLE3",
                "draft_model_path": "/models/draft",
                "num_steps": 3,
                "eagle_topk": 1,
                "num_draft_tokens": 4,
            },
        },
        "runtime": {"kind": "local", "stop_timeout_s": 5},
        "health": {"deadline_s": 1000, "poll_interval_s": 0.1, "request_timeout_s": 5},
        "gate": {
            "contexts": [5700, 23000],
            "output_tokens": 64,
            "repeats": 2,
            "warmup": 1,
            "request_timeout_s": 600,
            "policy": {"min_ratio": 0.8, "max_extra_repeats": 2},
            "correctness": {"prompts": 2, "tokens": 8},
        },
        "simulator": {"speedup": 50, "load_s": 100},
    }


def candidate_profile(port: int, **env: str) -> dict[str, Any]:
    p = base_profile(port)
    p["description"] = "integration-test candidate: kernel, eager"
    p["baseline"] = "base.yaml"
    p["server"]["cuda_graphs"] = False
    p["server"]["verify_kernel"] = "kdtree"
    p["server"]["env"] = {"KDTREE_VERIFY": "1", **env}
    return p


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> dict[str, Any]:
        return json.loads(self.out)


class Kctl:
    """Runs the real `kctl` CLI in a subprocess against one state dir."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.state = tmp / "state"
        self.port = free_port()

    def write(self, name: str, profile: dict[str, Any]) -> str:
        path = self.tmp / name
        path.write_text(yaml.safe_dump(profile, sort_keys=False))
        return str(path)

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "kctl", "--state-dir", str(self.state), "--simulate", *args]

    def run(self, *args: str, timeout: float = 120) -> Run:
        proc = subprocess.run(
            self.argv(*args), capture_output=True, text=True, timeout=timeout, cwd=REPO
        )
        return Run(proc.returncode, proc.stdout, proc.stderr)

    def spawn(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
        )

    def status(self) -> dict[str, Any]:
        r = self.run("--json", "status")
        return r.json()

    def wait_for_status(self, want: str, timeout: float = 60, profile: str = "cand") -> None:
        """Poll the store until the deploy of ``profile`` reaches ``want`` (e.g. 'gating')."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.run("--json", "history", "-n", "5")
            rows = r.json()["result"] if r.code == 0 and r.out.strip() else []
            if any(
                row["profile"] == profile and row["kind"] == "deploy" and row["status"] == want
                for row in rows
            ):
                return
            time.sleep(0.1)
        raise AssertionError(f"deployment never reached status {want!r}")

    def cleanup(self) -> None:
        from kctl.runtime.local import LocalRuntime

        rt = LocalRuntime(self.state / "simulate")
        for inst in rt.running():
            rt.stop(inst, 5)


@pytest.fixture
def kctl(tmp_path: Path) -> Iterator[Kctl]:
    k = Kctl(tmp_path)
    k.write("base.yaml", base_profile(k.port))
    try:
        yield k
    finally:
        k.cleanup()


def serving_health(k: Kctl) -> tuple[str | None, str]:
    s = k.status()["result"]
    serving = s.get("serving")
    return (serving["profile"] if serving else None), s["health"]


__all__ = ["Kctl", "candidate_profile", "serving_health", "signal", "os"]


def signal_at_revert_start(proc: subprocess.Popen[str], sig: signal.Signals) -> tuple[str, str]:
    """Read a running deploy's stderr until its revert starts the baseline, send ``sig``,
    and wait for it to end (killed if it outlives the wait). Returns what stderr said up
    to the revert and after it."""
    assert proc.stderr is not None
    seen = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if "(revert)" in line and "starting" in line:
                break
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return "".join(seen), err
