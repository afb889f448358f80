"""What the fleet tests on Swarm (``tests/docker/test_fleet_swarm.py``) and under
``--simulate`` (``tests/fleet/test_fleet_simulate.py``) share: a finished kctl command, a
deploy watched while it runs, and the availability bound of a rollout."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from kctl.fleet.probe import Availability

#: requests no replica answered, allowed in a rollout or an abort of 2 replicas
MAX_FAILED = 3


@dataclass
class Run:
    code: int
    out: str
    err: str

    def explain(self) -> str:
        return f"exit {self.code}\n--- stdout\n{self.out}\n--- stderr\n{self.err}"


class Watched:
    """A kctl command running in the background; its stderr lines collected as they come."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env=env
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def wait_for(self, pattern: str, timeout: float = 120) -> str:
        """The first stderr line matching ``pattern``; fails when the command ends first."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            done = self.proc.poll() is not None and not self._reader.is_alive()
            for line in list(self.lines):
                if re.search(pattern, line):
                    return line
            if done:
                break
            time.sleep(0.02)
        raise AssertionError(f"no line {pattern!r}; stderr:\n{''.join(self.lines)}")

    def finish(self, timeout: float = 240) -> Run:
        assert self.proc.stdout is not None
        out = self.proc.stdout.read()  # not communicate(): the reader thread owns stderr
        self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        self.proc.stdout.close()
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        return Run(self.proc.returncode, out, "".join(self.lines))


def check_served(avail: Availability, what: str, *, min_sent: int) -> None:
    """The endpoint served through ``what``: at least ``min_sent`` requests went out (the
    probe ran through it) and at most :data:`MAX_FAILED` found no replica."""
    print(f"availability during {what}: {avail.to_dict()}")
    assert avail.sent >= min_sent, avail.to_dict()
    assert avail.failed <= MAX_FAILED, avail.to_dict()
