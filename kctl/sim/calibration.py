"""The simulator's speed table: decode tokens/s per (verify path, CUDA graphs) and context
length, plus a prefill model for TTFT. Loaded from ``calibration.json`` next to this file
(or ``KCTL_SIM_CALIBRATION``); the measured rows come from ``shared/data/inservice-2x.json``
and every other row says it is an estimate.

Standard library only: this package is copied into test images without the rest of kctl.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_PATH = Path(__file__).with_name("calibration.json")
VERIFY_PATHS = ("triton", "kdtree")


class CalibrationError(ValueError):
    """The calibration file is unreadable or malformed (the message names the field)."""


@dataclass(frozen=True)
class Row:
    verify_path: str
    cuda_graphs: bool
    context_tokens: int
    tokens_per_second: float
    estimate: bool
    note: str


@dataclass(frozen=True)
class Prefill:
    tokens_per_second: float
    overhead_s: float


@dataclass(frozen=True)
class Calibration:
    """A validated speed table. Look-ups are pure functions of their arguments."""

    rows: tuple[Row, ...]
    prefill: Prefill
    model_load_seconds: float
    source: str

    def series(self, verify_path: str, cuda_graphs: bool) -> list[Row]:
        """The rows of one (path, graphs) series, sorted by context length."""
        found = [
            r for r in self.rows if r.verify_path == verify_path and r.cuda_graphs == cuda_graphs
        ]
        return sorted(found, key=lambda r: r.context_tokens)

    def decode_tps(self, verify_path: str, cuda_graphs: bool, context_tokens: int) -> float:
        """Decode tokens/s at ``context_tokens``: log-log interpolation between rows,
        clamped to the first/last row outside the table."""
        rows = self.series(verify_path, cuda_graphs)
        if not rows:
            raise CalibrationError(f"no calibration rows for {verify_path} graphs={cuda_graphs}")
        ctx = max(1, int(context_tokens))
        xs = [r.context_tokens for r in rows]
        if ctx <= xs[0]:
            return rows[0].tokens_per_second
        if ctx >= xs[-1]:
            return rows[-1].tokens_per_second
        i = bisect.bisect_right(xs, ctx)
        lo, hi = rows[i - 1], rows[i]
        if lo.context_tokens == ctx:
            return lo.tokens_per_second
        # speed falls roughly as a power of context: a straight line in log-log space
        t = (math.log(ctx) - math.log(lo.context_tokens)) / (
            math.log(hi.context_tokens) - math.log(lo.context_tokens)
        )
        log_tps = math.log(lo.tokens_per_second) + t * (
            math.log(hi.tokens_per_second) - math.log(lo.tokens_per_second)
        )
        return math.exp(log_tps)

    def ttft_s(self, uncached_tokens: int) -> float:
        """Uncompressed time to first token for a prompt of which ``uncached_tokens`` miss
        the prefix cache."""
        return self.prefill.overhead_s + max(0, uncached_tokens) / self.prefill.tokens_per_second


def _field(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise CalibrationError(f"{where}.{key}: missing")
    value = obj[key]
    # bool is an int subclass; a number field must not accept true/false
    if isinstance(value, bool) and kind is not bool:
        raise CalibrationError(f"{where}.{key}: must be a number (got {value!r})")
    if not isinstance(value, kind):
        raise CalibrationError(f"{where}.{key}: wrong type (got {value!r})")
    return value


def parse(data: Any, source: str = "<calibration>") -> Calibration:
    """Validate the JSON document ``data`` and build a :class:`Calibration`."""
    if not isinstance(data, dict):
        raise CalibrationError(f"{source}: top level must be an object")
    raw_rows = _field(data, "rows", list, source)
    rows: list[Row] = []
    seen: set[tuple[str, bool, int]] = set()
    for i, raw in enumerate(raw_rows):
        where = f"{source}: rows[{i}]"
        if not isinstance(raw, dict):
            raise CalibrationError(f"{where}: must be an object")
        path = _field(raw, "verify_path", str, where)
        if path not in VERIFY_PATHS:
            raise CalibrationError(f"{where}.verify_path: must be one of {VERIFY_PATHS}")
        row = Row(
            verify_path=path,
            cuda_graphs=_field(raw, "cuda_graphs", bool, where),
            context_tokens=_field(raw, "context_tokens", int, where),
            tokens_per_second=float(_field(raw, "tokens_per_second", (int, float), where)),
            estimate=_field(raw, "estimate", bool, where),
            note=_field(raw, "note", str, where),
        )
        if row.context_tokens <= 0 or row.tokens_per_second <= 0:
            raise CalibrationError(f"{where}: context_tokens and tokens_per_second must be > 0")
        key = (row.verify_path, row.cuda_graphs, row.context_tokens)
        if key in seen:
            raise CalibrationError(f"{where}: duplicate row for {key}")
        seen.add(key)
        rows.append(row)
    for path in VERIFY_PATHS:
        for graphs in (False, True):
            if not any(r.verify_path == path and r.cuda_graphs == graphs for r in rows):
                raise CalibrationError(f"{source}: rows: no row for {path} cuda_graphs={graphs}")
    raw_prefill = _field(data, "prefill", dict, source)
    prefill = Prefill(
        tokens_per_second=float(_field(raw_prefill, "tokens_per_second", (int, float), "prefill")),
        overhead_s=float(_field(raw_prefill, "overhead_s", (int, float), "prefill")),
    )
    if prefill.tokens_per_second <= 0 or prefill.overhead_s < 0:
        raise CalibrationError(f"{source}: prefill: tokens_per_second must be > 0, overhead_s >= 0")
    load = float(_field(data, "model_load_seconds", (int, float), source))
    return Calibration(rows=tuple(rows), prefill=prefill, model_load_seconds=load, source=source)


def load(path: str | Path | None = None) -> Calibration:
    """Read and validate a calibration file (default: the packaged ``calibration.json``)."""
    p = Path(path) if path else DEFAULT_PATH
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CalibrationError(f"{p}: cannot read calibration: {exc}") from exc
    return parse(data, str(p))
