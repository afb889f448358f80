"""What one streamed ``/generate`` response said besides its speed: the inter-token
latencies and SGLang's speculative-decoding fields. Pure.

The client feeds each chunk's arrival time and ``meta_info`` to a :class:`ChunkTrace`.
ITL follows SGLang's ``bench_serving``: the gap between two chunks is spread evenly over
the tokens the later chunk brought (speculative decoding delivers several at once), so
there is one latency per token after the first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: the ``meta_info`` field with a request's mean speculative acceptance length: the same
#: name in every release kctl knows (0.5.9 on); the counters beside it were renamed
ACCEPT_LENGTH_FIELD = "spec_accept_length"


@dataclass
class ChunkTrace:
    """Token-carrying chunk times and the last ``meta_info`` of one stream."""

    #: (arrival time, cumulative completion_tokens) of each chunk that brought tokens
    points: list[tuple[float, int]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def add(self, now: float, meta: Mapping[str, Any]) -> None:
        """Record one chunk: its arrival time and its ``meta_info``."""
        ct = int(meta.get("completion_tokens") or 0)
        if ct > (self.points[-1][1] if self.points else 0):
            self.points.append((now, ct))
        self.meta = dict(meta)

    def itl_s(self) -> tuple[float, ...]:
        """Seconds per token after the first, one value per token (see the module doc)."""
        out: list[float] = []
        for (t1, c1), (t2, c2) in zip(self.points, self.points[1:]):
            out.extend([(t2 - t1) / (c2 - c1)] * (c2 - c1))
        return tuple(out)

    def accept_length(self) -> float | None:
        """The mean acceptance length SGLang reports for the request (None without
        speculative decoding): ``spec_accept_length``, else completion tokens over
        ``spec_verify_ct``."""
        value = self.meta.get(ACCEPT_LENGTH_FIELD)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return float(value)
        verify = self.meta.get("spec_verify_ct")
        ct = self.meta.get("completion_tokens")
        if isinstance(verify, int) and verify > 0 and isinstance(ct, int):
            return ct / verify
        return None
