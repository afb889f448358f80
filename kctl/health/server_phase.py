"""What a loading SGLang server says it is doing, read from its own log lines: the phase a
person watching a model load wants to see next to the deadline (weights, KV cache, CUDA
graphs ...). Pure; the lines are those :class:`~kctl.health.log.LogWatch` already read."""

from __future__ import annotations

import re
from collections.abc import Iterable

#: SGLang's own log lines (scheduler and HTTP server) and the phase each one begins
_PHASES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"Init torch distributed begin"), "initialising torch distributed"),
    (re.compile(r"Load weight begin|Loading safetensors checkpoint shards"), "loading weights"),
    (re.compile(r"Load weight end"), "weights loaded"),
    (re.compile(r"Memory pool end|KV Cache is allocated"), "KV cache allocated"),
    (re.compile(r"Capture cuda graph begin|Capturing batches"), "capturing CUDA graphs"),
    (re.compile(r"Capture cuda graph end"), "CUDA graphs captured"),
    (re.compile(r"max_total_num_tokens="), "scheduler ready"),
    (re.compile(r"Uvicorn running on|Application startup complete"), "HTTP server up, warming up"),
    (re.compile(r"The server is fired up"), "ready"),
)


def server_phase(lines: Iterable[str]) -> str:
    """The phase the last line that names one begins ("" when none does yet)."""
    found = ""
    for line in lines:
        for pattern, phase in _PHASES:
            if pattern.search(line):
                found = phase
                break
    return found
