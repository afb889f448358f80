"""A second Swarm node on this machine, for the fleet tests: a second ``dockerd`` with its
own data root, exec root, pid file and socket, started under ``unshare --uts`` with its own
hostname (Swarm keys nodes by hostname), joined to the manager as a worker on 127.0.0.2.

All nodes share this machine's network namespace, so replicas need distinct host ports
(the fleet's port per slot) and Swarm's overlay network is not used (host networking).
The node holds no image at first: kctl copies the serving images to it through its socket
(the fleet file's ``swarm.engines``). It advertises two GPUs as Swarm generic resources
(``NVIDIA-GPU``), with no device behind them: Swarm only does the bookkeeping.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from docker import DockerClient

#: where the node's engine listens; short, since the exec root holds unix sockets (108 bytes)
ROOT_PREFIX = "/tmp/kn-"
#: the GPUs the node advertises to Swarm (generic resources: bookkeeping, no device behind)
GPUS = ("GPU-0", "GPU-1")


class SecondNode:
    def __init__(self, manager: DockerClient, hostname: str) -> None:
        self.manager = manager
        self.hostname = hostname
        self.root = Path(tempfile.mkdtemp(prefix=ROOT_PREFIX))
        self.socket = f"unix://{self.root}/docker.sock"
        self.proc: subprocess.Popen[bytes] | None = None
        self.client: DockerClient | None = None

    def start(self) -> None:
        """Start (or restart, with the same data root) the node's dockerd and wait for it."""
        import docker

        cmd = (
            f"hostname {self.hostname} && exec dockerd --data-root {self.root}/data "
            f"--exec-root {self.root}/exec --pidfile {self.root}/docker.pid -H {self.socket} "
            "--bridge=none --iptables=false --ip6tables=false "
            + " ".join(f"--node-generic-resource NVIDIA-GPU={g}" for g in GPUS)
        )
        log = open(self.root / "dockerd.log", "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            ["unshare", "--uts", "sh", "-c", cmd],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
        log.close()
        end = time.monotonic() + 60
        while not self._answers():  # a killed engine leaves its socket file behind
            if self.proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"the second node's dockerd did not start:\n{self.log()}")
            time.sleep(0.3)
        self.client = docker.DockerClient(base_url=self.socket, timeout=60)
        self.client.ping()

    def _answers(self) -> bool:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            try:
                sock.connect(self.socket.removeprefix("unix://"))
            except OSError:
                return False
        return True

    def join(self) -> None:
        assert self.client is not None
        token = self.manager.swarm.attrs["JoinTokens"]["Worker"]
        self.client.swarm.join(
            remote_addrs=["127.0.0.1:2377"], join_token=token,
            listen_addr="127.0.0.2:2377", advertise_addr="127.0.0.2",
        )  # fmt: skip
        self.wait_state("ready")

    def wait_state(self, state: str, timeout: float = 60) -> float:
        """Seconds until the manager reports the node in ``state`` (ready, down)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.state() == state:
                return time.monotonic() - t0
            time.sleep(0.5)
        raise AssertionError(f"node {self.hostname} not {state} after {timeout} s: {self.state()}")

    def state(self) -> str | None:
        for n in self.manager.api.nodes():
            if n["Description"]["Hostname"] == self.hostname:
                return str(n["Status"]["State"])
        return None

    def kill(self) -> None:
        """SIGKILL the node's dockerd (its containers keep running, as on a real host)."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        if self.client is not None:
            self.client.close()
            self.client = None

    def log(self) -> str:
        path = self.root / "dockerd.log"
        return path.read_text(errors="replace")[-3000:] if path.is_file() else ""

    def close(self) -> None:
        """Leave the swarm, stop the engine (it stops its containers), forget the node."""
        if self.client is not None:
            with contextlib.suppress(Exception):  # best effort on teardown
                self.client.swarm.leave(force=True)
            self.client.close()
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
        for n in self.manager.api.nodes():
            if n["Description"]["Hostname"] == self.hostname:
                with contextlib.suppress(Exception):
                    self.manager.api.remove_node(n["ID"], force=True)
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        for mnt in reversed([m for m in mounts if m.startswith(f"{self.root}/")]):
            subprocess.run(["umount", "-l", mnt], capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)
