"""Helpers the fleet tests share (simulated orchestrator and real Swarm alike)."""

from __future__ import annotations

import json
import random
import socket
import urllib.request
from typing import Any


def free_range(n: int) -> int:
    """A first port with ``n`` ports after it that bind, below the ephemeral range (where
    the local ports of outgoing connections could take one between the check and the use)."""
    for _ in range(100):
        first = random.randrange(21000, 29000)
        try:
            for i in range(n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", first + i))
        except OSError:
            continue
        return first
    raise RuntimeError("no free port range")


def get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=5) as r:
        return dict(json.loads(r.read()))
