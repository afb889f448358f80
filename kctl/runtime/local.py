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
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from kctl.errors import KctlError, RuntimeUnavailable
from kctl.poll import poll_until
from kctl.profile.model import Profile
from kctl.runtime.base import Instance, InstanceState, LaunchSpec, port_listening
from kctl.runtime.logrelay import SCRUB_ENV
from kctl.secrets import resolve, resolve_env
from kctl.statedir import check_dir, ensure_dir, inside, open_fd, read_text, write_new

_PROC = Path("/proc")
#: the variables of kctl's environment a server gets (besides ``LC_*`` and ``KCTL_*``):
#: what a Python server needs to find itself, its libraries and its GPUs
PASSED_ENV = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "TZ",
        "TMPDIR",
        "PYTHONPATH",
        "VIRTUAL_ENV",
        "LD_LIBRARY_PATH",
        "CUDA_HOME",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "HF_HOME",
        "XDG_CACHE_HOME",
    }
)


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


def _passed_env(spec: LaunchSpec) -> dict[str, str]:
    """What of kctl's own environment a server (or its log relay) gets: :data:`PASSED_ENV`,
    ``LC_*`` and ``KCTL_*``, less any variable a secret reference of the profile names."""
    referenced = {ref.env for _, ref in spec.secrets} | (
        {spec.api_key.env} if spec.api_key is not None else set()
    )
    return {
        k: v
        for k, v in os.environ.items()
        if (k in PASSED_ENV or k.startswith(("LC_", "KCTL_"))) and k not in referenced
    }


#: seconds between two looks at a process being stopped
STOP_POLL_S = 0.05
#: how long a process group has to go after SIGKILL before kctl reaps what it can
KILL_WAIT_S = 5.0


class _StillRunning(KctlError):
    """A stopped process outlived its wait (caught in :meth:`LocalRuntime._gone_within`)."""


class LocalRuntime:
    """Runs serving processes on this host. ``owner`` (the state dir) scopes what it owns."""

    name = "local"

    def __init__(
        self,
        state_dir: Path,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.state_dir = Path(state_dir).resolve()
        self.owner = str(self.state_dir)
        self.log_dir = self.state_dir / "logs"
        self._sleep = sleep
        self._clock = clock
        # children started by this kctl process: polling them reaps zombies and gives exit codes
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._relays: list[subprocess.Popen[bytes]] = []

    # -- protocol ------------------------------------------------------------------------

    def check_available(self) -> None:
        # before anything changes: a symlinked or foreign state dir or logs/ is refused
        check_dir(self.state_dir)
        check_dir(self.log_dir)
        if not _PROC.is_dir():
            raise RuntimeUnavailable(
                "the local runtime needs /proc (Linux) to track its processes",
                hint="run kctl on Linux, or use the docker runtime",
            )

    def server_env(self, spec: LaunchSpec, secrets: dict[str, str]) -> dict[str, str]:
        """The server's whole environment, explicit: a few of kctl's own variables the
        server needs to run at all (:data:`PASSED_ENV`, ``LC_*`` and kctl's ``KCTL_*``),
        the profile's ``server.env``, its ``secrets`` (read by the caller) and kctl's
        ownership markers. Nothing else of kctl's environment reaches the server (a
        credential exported for another tool included)."""
        env = _passed_env(spec)
        env.update(dict(spec.env))
        env.update(secrets)
        env["KCTL_OWNER"] = self.owner
        env["KCTL_DEPLOYMENT_ID"] = spec.deployment_id
        env["KCTL_PORT"] = str(spec.port)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _argv(self, spec: LaunchSpec, key: str | None) -> list[str]:
        """The argv, with ``--config <file>`` holding the API key when the profile sets
        one: SGLang reads ``api-key`` from it, and ``ps`` shows the path only."""
        argv = list(spec.argv)
        path = self.state_dir / "secrets" / f"{spec.deployment_id}.yaml"
        if key is None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return argv
        ensure_dir(path.parent)
        write_new(path, json.dumps({"api-key": key}).encode())  # JSON is YAML
        return [*argv, "--config", str(path)]

    def start(self, spec: LaunchSpec) -> Instance:
        ensure_dir(self.state_dir)
        ensure_dir(self.log_dir)
        log_path = self.log_dir / f"{spec.deployment_id}.log"
        secrets = resolve_env(spec.secrets)
        key = None if spec.api_key is None else resolve(spec.api_key, "server.api_key")
        env = self.server_env(spec, secrets)
        argv = self._argv(spec, key)
        with os.fdopen(open_fd(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab") as log:
            log.write(f"--- kctl: starting {spec.deployment_id}: {' '.join(argv)}\n".encode())
            log.flush()
            values = [*secrets.values(), *([key] if key else [])]
            # with secrets, the server writes through the relay that takes them out (SGLang
            # logs its ServerArgs, the API key included); else straight to the file
            relay = self._relay(spec, log_path, values) if values else None
            try:
                proc = subprocess.Popen(
                    argv,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=relay.stdin if relay is not None else log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                raise RuntimeUnavailable(
                    f"cannot start {spec.argv[0]!r}: {exc.strerror}",
                    hint="check the server command in the profile and that it is installed",
                ) from exc
            finally:
                if relay is not None and relay.stdin is not None:
                    relay.stdin.close()  # the server holds the pipe's write end now
        if relay is not None:
            self._relays.append(relay)
        self._children[proc.pid] = proc
        ticks = _start_ticks(proc.pid) or 0
        return Instance(
            runtime=self.name,
            deployment_id=spec.deployment_id,
            ref=f"pid:{proc.pid}:{ticks}",
            log_path=str(log_path),
            port=spec.port,
        )

    def _relay(
        self, spec: LaunchSpec, log_path: Path, values: list[str]
    ) -> subprocess.Popen[bytes]:
        """:mod:`kctl.runtime.logrelay`, appending to ``log_path`` what the server writes,
        ``values`` taken out (handed over in its environment, not its argv)."""
        self._relays = [r for r in self._relays if r.poll() is None]  # reap finished ones
        env = _passed_env(spec) | {SCRUB_ENV: json.dumps(values)}
        env.pop("KCTL_OWNER", None)  # not a server: running() must not count it
        return subprocess.Popen(
            [sys.executable, "-m", "kctl.runtime.logrelay", str(log_path)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def stop(self, instance: Instance, timeout_s: float) -> None:
        with contextlib.suppress(FileNotFoundError):  # the API key file, if any
            os.unlink(self.state_dir / "secrets" / f"{instance.deployment_id}.yaml")
        pid, ticks = _parse_ref(instance.ref)
        if not self._alive(pid, ticks):
            self._reap(pid)
            return
        self._signal_group(pid, signal.SIGTERM)
        if self._gone_within(pid, ticks, timeout_s):
            self._reap(pid)
            return
        self._signal_group(pid, signal.SIGKILL)
        self._gone_within(pid, ticks, KILL_WAIT_S)
        self._reap(pid)

    def _gone_within(self, pid: int, ticks: int, seconds: float) -> bool:
        """Whether the process is gone within ``seconds`` (looked at every 50 ms)."""
        try:
            poll_until(
                lambda: self._alive(pid, ticks), lambda alive: not alive, deadline_s=seconds,
                interval_s=STOP_POLL_S, clock=self._clock, sleep=self._sleep,
                timed_out=lambda _: _StillRunning(f"pid {pid} still runs after {seconds:g} s"),
            )  # fmt: skip
        except _StillRunning:
            return False
        return True

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
        path = inside(
            self.state_dir, instance.log_path or self.log_dir / f"{instance.deployment_id}.log"
        )
        try:
            text = read_text(path)
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

    def preflight(self, profile: Profile, serving: Instance | None) -> None:
        """Nothing beyond the port: a local server needs no engine, image or mounts."""

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
