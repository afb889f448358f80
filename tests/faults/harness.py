"""The fault suite's harness: real ``kctl`` processes (``python -m kctl`` of this checkout)
driving real simulator processes over real HTTP, one state dir and one port per case.

Nothing here imports kctl: the suite judges the CLI from the outside, by its exit codes,
its messages, what answers on the port and what ``kctl history --json`` keeps, so it
stays valid while kctl's inside is rewritten.

A case's processes are found by a tag in their environment (``KCTL_FAULTS_CASE``): kctl
starts its servers with its own environment plus the profile's, so every server of a case
carries the tag of the case that ran it, and the case's teardown stops exactly those.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
TAG = "KCTL_FAULTS_CASE"

#: names a server announces as ``served_model_name``: what answers on the port, by HTTP
BASE_NAME = "faults-base"
CAND_NAME = "faults-cand"

_handed_out: set[int] = set()


def free_port() -> int:
    """A port nothing listens on, never handed out twice in one session."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no free port")


# -- profiles -------------------------------------------------------------------------------


def base_profile(port: int, *, slow_gate: bool = False) -> dict[str, Any]:
    """The known-good shape (Triton + CUDA graphs), scaled down so a deploy takes seconds.

    ``slow_gate`` stretches the gate and the loads so that a signal or a kill sent when a
    step is announced lands inside that step (about a second each)."""
    return {
        "description": "fault suite baseline: triton + CUDA graphs",
        "server": {
            "model_path": "/models/sim-model",
            "served_model_name": BASE_NAME,
            "host": "127.0.0.1",
            "port": port,
            "tp": 1,
            "attention_backend": "triton",
            "cuda_graphs": True,
            "verify_kernel": "none",
            "speculative": {
                "algorithm": "EAGLE3",
                "draft_model_path": "/models/sim-draft",
                "num_steps": 3,
                "eagle_topk": 1,
                "num_draft_tokens": 4,
            },
        },
        "runtime": {"kind": "local", "stop_timeout_s": 2},
        # health deadlines read simulated time: 600 s at 50x is 12 s of wall time
        "health": {"deadline_s": 600, "poll_interval_s": 0.05, "request_timeout_s": 3},
        "gate": {
            # 23k only: the kernel's margin there (2.2x) makes the verdict certain
            "contexts": [23000],
            # 32 tokens, not fewer: a 40 ms stall of a loaded machine inside a shorter stream
            # could halve its measured rate and erase the kernel's margin
            "output_tokens": 64 if slow_gate else 32,
            "repeats": 2 if slow_gate else 1,
            "warmup": 1 if slow_gate else 0,
            "request_timeout_s": 20,
            "policy": {"min_ratio": 1.0, "max_extra_repeats": 0},
            "correctness": {"prompts": 2, "tokens": 4},
        },
        # 50 s of simulated load at 50x: one second with the port closed
        "simulator": {"speedup": 50, "load_s": 50},
    }


def cand_profile(port: int, *, slow_gate: bool = False, **env: str) -> dict[str, Any]:
    """The kernel candidate (kdtree verify + CUDA graphs), gated against base.yaml; it
    wins at 23k, so without a fault it is promoted. ``env`` adds server variables
    (``KCTL_SIM_FAULT``, ``KCTL_SIM_SLOWDOWN``...)."""
    p = base_profile(port, slow_gate=slow_gate)
    p["description"] = "fault suite candidate: kdtree verify + CUDA graphs"
    p["baseline"] = "base.yaml"
    p["server"]["served_model_name"] = CAND_NAME
    p["server"]["verify_kernel"] = "kdtree"
    p["server"]["env"] = {"KDTREE_VERIFY": "1", **env}
    return p


def _record(row: dict[str, Any]) -> dict[str, Any]:
    """A history row without ``serving``: which record serves is the store's pointer, not
    part of the record."""
    return {k: v for k, v in row.items() if k != "serving"}


# -- processes ------------------------------------------------------------------------------


@dataclass
class Run:
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err

    def json(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.out)
        return data

    def __str__(self) -> str:
        return f"exit {self.code}\n--- stdout\n{self.out}\n--- stderr\n{self.err}"


class Proc:
    """A running kctl whose stderr is read line by line, so a test can act at a step."""

    def __init__(self, popen: subprocess.Popen[str]) -> None:
        self.popen = popen
        self.out: list[str] = []
        self.err: list[str] = []
        self._cond = threading.Condition()
        self._threads = [
            threading.Thread(target=self._read, args=(popen.stdout, self.out), daemon=True),
            threading.Thread(target=self._read, args=(popen.stderr, self.err), daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _read(self, stream: Any, sink: list[str]) -> None:
        for line in stream:
            with self._cond:
                sink.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_line(self, pattern: str, timeout: float = 60.0, nth: int = 1) -> str:
        """Block until the ``nth`` stderr line matching ``pattern`` is printed."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                hits = [line for line in self.err if rx.search(line)]
                if len(hits) >= nth:
                    return hits[nth - 1]
                left = deadline - time.monotonic()
                if left <= 0 or (self.popen.poll() is not None and not self._alive()):
                    raise AssertionError(
                        f"kctl never printed {pattern!r} (#{nth}); exit {self.popen.poll()}\n"
                        + "".join(self.err)
                    )
                self._cond.wait(min(left, 0.2))

    def _alive(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)

    def finish(self, timeout: float = 90.0) -> Run:
        try:
            code = self.popen.wait(timeout=timeout)
        finally:
            if self.popen.poll() is None:
                self.popen.kill()
                self.popen.wait()
        for t in self._threads:
            t.join(timeout=5)
        for stream in (self.popen.stdout, self.popen.stderr):
            if stream is not None:
                stream.close()
        return Run(code, "".join(self.out), "".join(self.err))


def tagged_pids(tag: str) -> list[int]:
    """Processes whose environment carries this case's tag (kctl and its servers)."""
    needle = f"{TAG}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2 :].startswith(("Z", "X")):
            continue
        if needle in env.split(b"\0"):
            found.append(int(entry.name))
    return found


def http_get(port: int, path: str, timeout: float = 3.0) -> tuple[int, bytes] | None:
    """(status, body) of GET 127.0.0.1:port/path; None when nothing answers."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    except OSError:
        return None
    finally:
        conn.close()


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


# -- one case -------------------------------------------------------------------------------


class Case:
    """One fault case: its own state dir, port, profiles, processes and store record."""

    def __init__(self, tmp: Path, item: Any = None, *, slow_gate: bool = False) -> None:
        self.tmp = tmp
        self.state = tmp / "state"
        self.port = free_port()
        self.tag = uuid.uuid4().hex
        self.item = item
        self.lost = 0
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
        )
        self.env["XDG_STATE_HOME"] = str(tmp / "xdg")
        self.env[TAG] = self.tag
        for name in [k for k in self.env if k.startswith("KCTL_SIM_")]:
            del self.env[name]
        self.base = self.write("base.yaml", base_profile(self.port, slow_gate=slow_gate))
        self.cand = self.write("cand.yaml", cand_profile(self.port, slow_gate=slow_gate))
        self.slow_gate = slow_gate

    # profiles
    def write(self, name: str, profile: dict[str, Any] | str | bytes) -> str:
        path = self.tmp / name
        if isinstance(profile, bytes):
            path.write_bytes(profile)
        elif isinstance(profile, str):
            path.write_text(profile)
        else:
            path.write_text(yaml.safe_dump(profile, sort_keys=False))
        return str(path)

    def candidate(self, name: str = "cand.yaml", **env: str) -> str:
        """A candidate profile file with these server variables."""
        return self.write(name, cand_profile(self.port, slow_gate=self.slow_gate, **env))

    # kctl
    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "kctl", "--state-dir", str(self.state), "--simulate", *args]

    def _env(self, extra: dict[str, str] | None) -> dict[str, str]:
        return {**self.env, **(extra or {})}

    def run(self, *args: str, timeout: float = 120, env: dict[str, str] | None = None) -> Run:
        proc = subprocess.run(
            self.argv(*args),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.tmp,
            env=self._env(env),
        )
        return Run(proc.returncode, proc.stdout, proc.stderr)

    def spawn(self, *args: str, env: dict[str, str] | None = None) -> Proc:
        popen = subprocess.Popen(
            self.argv(*args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=self.tmp,
            env=self._env(env),
        )
        return Proc(popen)

    def status(self) -> tuple[int, dict[str, Any]]:
        r = self.run("--json", "status")
        assert r.out.strip(), str(r)
        return r.code, r.json()["result"]

    def history(self) -> list[dict[str, Any]]:
        r = self.run("--json", "history", "-n", "1000")
        assert r.code == 0, str(r)
        rows: list[dict[str, Any]] = r.json()["result"]
        return rows

    # the host
    def serving(self) -> str | None:
        """Who answers on the port, by HTTP: the served model name, or None."""
        got = http_get(self.port, "/model_info")
        if got is None:
            return None
        code, body = got
        if code != 200:
            return f"HTTP {code}"
        return str(json.loads(body).get("served_model_name"))

    def healthy(self) -> bool:
        got = http_get(self.port, "/health", timeout=10)
        return got is not None and got[0] == 200

    def servers(self) -> list[int]:
        """Pids of this case's servers (its tagged processes other than kctl itself)."""
        out = []
        for pid in tagged_pids(self.tag):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"kctl.sim" in cmd or b"sglang.launch_server" in cmd:
                out.append(pid)
        return out

    def wait_port(self, want_open: bool, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if port_open(self.port) == want_open:
                return
            time.sleep(0.05)
        raise AssertionError(f"port {self.port} never became {'open' if want_open else 'closed'}")

    def cleanup(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = tagged_pids(self.tag)
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + 3
            while pids and time.monotonic() < deadline:
                pids = [p for p in pids if Path(f"/proc/{p}").exists() and _alive(p)]
                time.sleep(0.05)

    # the store
    @property
    def db(self) -> Path:
        return self.state / "simulate" / "kctl.db"

    def journal(self) -> list[tuple[str, int, str, str]]:
        """The journal's rows (txn, seq, step, state), read straight from the store file
        (its format is kctl's stable state-dir format); [] when there is no store yet."""
        if not self.db.exists() or self.db.stat().st_size == 0:
            return []
        conn = sqlite3.connect(f"{self.db.resolve().as_uri()}?mode=ro", uri=True, timeout=10)
        try:
            rows = conn.execute("SELECT txn, seq, step, state FROM journal ORDER BY rowid")
            return [(str(a), int(b), str(c), str(d)) for a, b, c, d in rows.fetchall()]
        except sqlite3.OperationalError:
            return []  # the schema is being created
        finally:
            conn.close()

    def wait_journal(
        self, step: str, nth: int, old_txns: set[str], *, done: bool = False, timeout: float = 30
    ) -> None:
        """Block until a transaction not in ``old_txns`` has journalled ``step`` ``nth``
        times: its intent is on disk, so kctl is inside the step or just past it; with
        ``done``, until that entry is also marked done (a start: the process runs and is
        recorded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rows = [r for r in self.journal() if r[0] not in old_txns and r[2] == step]
            if len(rows) >= nth and (not done or rows[nth - 1][3] == "done"):
                if done:
                    time.sleep(0.1)  # the start's own record is the next commit
                return
            time.sleep(0.005)
        raise AssertionError(f"the journal never showed step {step!r} #{nth}: {self.journal()}")

    def check_store(
        self, before: list[dict[str, Any]], after: list[dict[str, Any]] | None = None
    ) -> list[dict[str, Any]]:
        """Assert that no record of ``before`` is lost, and none that had ended is
        rewritten; count the offenders for the group summary. Returns ``after``."""
        after = self.history() if after is None else after
        by_id = {r["id"]: r for r in after}
        lost = [r["id"] for r in before if r["id"] not in by_id]
        rewritten = [
            r["id"]
            for r in before
            if r["ended_at"] and r["id"] in by_id and _record(by_id[r["id"]]) != _record(r)
        ]
        self.lost += len(lost) + len(rewritten)
        if self.item is not None:
            self.item.user_properties.append(("lost_records", len(lost) + len(rewritten)))
        assert not lost, f"records lost: {lost}"
        assert not rewritten, "records rewritten: " + "; ".join(
            f"{i}: {next(r for r in before if r['id'] == i)} -> {by_id[i]}" for i in rewritten
        )
        return after

    # the end state every recovery must reach
    def assert_serves(self, name: str | None) -> dict[str, Any]:
        """``name`` answers on the port (None: nothing does), and `status` agrees."""
        assert self.serving() == name, f"serving {self.serving()!r}, want {name!r}"
        code, st = self.status()
        if name is None:
            assert st["serving"] is None, st
        else:
            assert self.healthy()
            assert code == 0, st
            assert st["health"] == "healthy", st
            want = Path(self.base if name == BASE_NAME else self.cand).stem
            assert st["serving"]["profile"] == want, st
            assert not st["interrupted"] and not st["degraded"], st
        return st

    # common set-ups
    def establish(self) -> None:
        """The known-good baseline deployed, measured and serving."""
        r = self.run("deploy", self.base)
        assert r.code == 0, str(r)
        assert self.serving() == BASE_NAME

    def promote(self) -> None:
        """The baseline known-good, then the candidate promoted over it."""
        r = self.run("deploy", self.cand)
        assert r.code == 0, str(r)
        assert self.serving() == CAND_NAME


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return not stat[stat.rindex(")") + 2 :].startswith(("Z", "X"))


@contextlib.contextmanager
def case_of(tmp: Path, item: Any = None, **kw: Any) -> Iterator[Case]:
    c = Case(tmp, item, **kw)
    try:
        yield c
    finally:
        c.cleanup()
