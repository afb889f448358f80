"""Local process runtime: runs the server as a child process of this host, detached
into its own session so it outlives the kctl command that started it.

Used for ``--simulate`` (the simulator in place of SGLang) and for hosts that run SGLang
without Docker. Ownership is proved from the process itself, not only from the store:
every process started here carries ``KCTL_OWNER=<state dir>`` and
``KCTL_DEPLOYMENT_ID=<id>`` in its environment, which :meth:`LocalRuntime.running`
reads back from ``/proc`` to reconcile the store with what really runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from kctl.errors import RuntimeUnavailable
from kctl.runtime.base import Instance, InstanceState, LaunchSpec, port_listening

_PROC = Path("/proc")


def _start_ticks(pid: int) -> int | None:
    """The process start time in clock ticks since boot (field 22 of /proc/pid/stat),
    which tells a live process from a later one that reused its pid."""
    try:
        raw = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after the last ')'
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[19])


def _proc_state(pid: int) -> str | None:
    try:
        raw = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()[0]


def _parse_ref(ref: str) -> tuple[int, int]:
    kind, pid, ticks = ref.split(":")
    if kind != "pid":
        raise ValueError(f"not a local process reference: {ref!r}")
    return int(pid), int(ticks)


class LocalRuntime:
    """Runs serving processes on this host. ``owner`` (the state dir) scopes what it owns."""

    name = "local"

    def __init__(self, state_dir: Path, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.state_dir = Path(state_dir).resolve()
        self.owner = str(self.state_dir)
        self.log_dir = self.state_dir / "logs"
        self._sleep = sleep
        # children started by this kctl process: polling them reaps zombies and gives exit codes
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    # -- protocol ------------------------------------------------------------------------

    def check_available(self) -> None:
        if not _PROC.is_dir():
            raise RuntimeUnavailable(
                "the local runtime needs /proc (Linux) to track its processes",
                hint="run kctl on Linux, or use the docker runtime",
            )

    def start(self, spec: LaunchSpec) -> Instance:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{spec.deployment_id}.log"
        env = dict(os.environ)
        env.update(dict(spec.env))
        env["KCTL_OWNER"] = self.owner
        env["KCTL_DEPLOYMENT_ID"] = spec.deployment_id
        env["KCTL_PORT"] = str(spec.port)
        env["PYTHONUNBUFFERED"] = "1"
        with open(log_path, "ab") as log:
            log.write(f"--- kctl: starting {spec.deployment_id}: {' '.join(spec.argv)}\n".encode())
            log.flush()
            try:
                proc = subprocess.Popen(
                    list(spec.argv),
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                raise RuntimeUnavailable(
                    f"cannot start {spec.argv[0]!r}: {exc.strerror}",
                    hint="check the server command in the profile and that it is installed",
                ) from exc
        self._children[proc.pid] = proc
        ticks = _start_ticks(proc.pid) or 0
        return Instance(
            runtime=self.name,
            deployment_id=spec.deployment_id,
            ref=f"pid:{proc.pid}:{ticks}",
            log_path=str(log_path),
            port=spec.port,
        )

    def stop(self, instance: Instance, timeout_s: float) -> None:
        pid, ticks = _parse_ref(instance.ref)
        if not self._alive(pid, ticks):
            self._reap(pid)
            return
        self._signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self._alive(pid, ticks):
                self._reap(pid)
                return
            self._sleep(0.05)
        self._signal_group(pid, signal.SIGKILL)
        for _ in range(100):
            if not self._alive(pid, ticks):
                break
            self._sleep(0.05)
        self._reap(pid)

    def state(self, instance: Instance) -> InstanceState:
        pid, ticks = _parse_ref(instance.ref)
        if self._alive(pid, ticks):
            return InstanceState(running=True, detail=f"running (pid {pid})")
        # Liveness first, then the exit code: a child that exits between the two checks is
        # reaped by whichever poll sees it first, and Popen keeps its code for the next call.
        # wait(), not poll(): poll() answers None while another thread holds Popen's waitpid
        # lock (the gate's watcher and the main thread both ask), and the code would be lost
        # to "gone"; wait() retries until the code is known.
        child = self._children.get(pid)
        code = None
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = child.wait(timeout=2)
        if code is not None:
            detail = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
            return InstanceState(running=False, exit_code=code, detail=detail)
        return InstanceState(running=False, detail=f"not running (pid {pid} is gone)")

    def logs(self, instance: Instance, tail: int | None = None) -> str:
        path = Path(instance.log_path or self.log_dir / f"{instance.deployment_id}.log")
        try:
            text = path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        if tail is None:
            return text
        return "\n".join(text.splitlines()[-tail:])

    def running(self) -> list[Instance]:
        found = []
        for entry in _PROC.iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            env = self._environ(pid)
            if env.get("KCTL_OWNER") != self.owner or "KCTL_DEPLOYMENT_ID" not in env:
                continue
            ticks = _start_ticks(pid)
            if ticks is None or not self._alive(pid, ticks):
                continue
            dep = env["KCTL_DEPLOYMENT_ID"]
            found.append(
                Instance(
                    runtime=self.name,
                    deployment_id=dep,
                    ref=f"pid:{pid}:{ticks}",
                    log_path=str(self.log_dir / f"{dep}.log"),
                    port=int(env.get("KCTL_PORT", "0") or 0),
                )
            )
        return found

    def port_holder(self, port: int) -> str | None:
        if not port_listening(port):
            return None
        for inst in self.running():
            if inst.port == port:
                return f"kctl deployment {inst.deployment_id}"
        return f"a process listening on 127.0.0.1:{port}"

    # -- helpers -------------------------------------------------------------------------

    def _alive(self, pid: int, ticks: int) -> bool:
        child = self._children.get(pid)
        if child is not None and child.poll() is not None:
            return False
        state = _proc_state(pid)
        if state is None or state in ("Z", "X"):
            return False
        return ticks == 0 or _start_ticks(pid) == ticks

    def _reap(self, pid: int) -> None:
        child = self._children.pop(pid, None)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=1)

    @staticmethod
    def _signal_group(pid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)

    @staticmethod
    def _environ(pid: int) -> dict[str, str]:
        try:
            raw = (_PROC / str(pid) / "environ").read_bytes()
        except OSError:
            return {}
        env = {}
        for item in raw.split(b"\0"):
            key, sep, value = item.partition(b"=")
            if sep:
                env[key.decode(errors="replace")] = value.decode(errors="replace")
        return env
