"""Helpers the fleet tests share (simulated orchestrator and real Swarm alike)."""

from __future__ import annotations

import json
import os
import random
import socket
import urllib.request
from typing import Any

#: the ports :func:`free_range` draws from: below the ephemeral range (where the local ports
#: of outgoing connections could take one between the check and the use)
LOW, HIGH = 21000, 29000
#: slices the range is cut into, one per pytest-xdist worker (``gw0``, ``gw1``...)
SLICES = 8


def port_slice(worker: str | None) -> tuple[int, int]:
    """The ports ``[low, high)`` that the xdist worker named ``worker`` draws from: its own
    slice, so two workers never check the same range at the same time; the whole range
    when not under xdist (``worker`` is None)."""
    if not worker or not worker.startswith("gw") or not worker[2:].isdigit():
        return LOW, HIGH
    width = (HIGH - LOW) // SLICES
    low = LOW + (int(worker[2:]) % SLICES) * width
    return low, low + width


def free_range(n: int) -> int:
    """A first port with ``n`` ports after it that bind, in this worker's slice of
    :data:`LOW`..:data:`HIGH`."""
    low, high = port_slice(os.environ.get("PYTEST_XDIST_WORKER"))
    for _ in range(100):
        first = random.randrange(low, high - n)
        try:
            for i in range(n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", first + i))
        except OSError:
            continue
        return first
    raise RuntimeError(f"no {n} free ports in {low}..{high}")


def get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=5) as r:
        return dict(json.loads(r.read()))
