"""What one gate run against one server recorded: every sample, the per-bucket summary,
the correctness probes' greedy outputs and the timings. JSON round-trips through
:meth:`Measurement.to_dict` / :meth:`Measurement.from_dict` because the store keeps it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from kctl.errors import GateError
from kctl.gate.stats import Sample, Summary, summarize

#: bump when the dict layout changes incompatibly; from_dict refuses newer layouts
MEASUREMENT_SCHEMA = 1


@dataclass(frozen=True)
class ProbeOutput:
    """The greedy output of one correctness probe; ``error`` when the probe failed."""

    index: int
    output_ids: tuple[int, ...] = ()
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "output_ids": list(self.output_ids), "error": self.error}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProbeOutput:
        return cls(
            index=d["index"], output_ids=tuple(d.get("output_ids", ())), error=d.get("error")
        )


@dataclass(frozen=True)
class Measurement:
    """A gate workload measured against one server."""

    #: identifies what the numbers are comparable with (gate workload, model, GPU, host):
    #: supplied by the caller, compared by the store when it looks up a baseline
    fingerprint: str
    samples: tuple[Sample, ...] = ()
    summaries: tuple[Summary, ...] = ()
    probes: tuple[ProbeOutput, ...] = ()
    #: (name, seconds) pairs, e.g. ("warmup", 12.1), ("measure", 80.3), ("total", 95.0)
    timings: tuple[tuple[str, float], ...] = ()
    #: free-form description of the server measured (profile name, deployment id ...)
    label: str = ""
    meta: dict[str, str] = field(default_factory=dict)

    def summary(self, context: int, concurrency: int = 1) -> Summary | None:
        """The summary of one bucket, None when it was not measured."""
        for s in self.summaries:
            if s.context == context and s.concurrency == concurrency:
                return s
        return None

    def with_samples(self, extra: tuple[Sample, ...]) -> Measurement:
        """A copy with ``extra`` samples appended and the summaries recomputed."""
        samples = self.samples + extra
        return replace(self, samples=samples, summaries=summarize(samples))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (schema-versioned)."""
        return {
            "schema": MEASUREMENT_SCHEMA,
            "fingerprint": self.fingerprint,
            "label": self.label,
            "meta": dict(self.meta),
            "samples": [s.to_dict() for s in self.samples],
            "summaries": [s.to_dict() for s in self.summaries],
            "probes": [p.to_dict() for p in self.probes],
            "timings": [[k, v] for k, v in self.timings],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Measurement:
        """Inverse of :meth:`to_dict`; raises GateError on an unknown schema."""
        schema = d.get("schema")
        if schema != MEASUREMENT_SCHEMA:
            raise GateError(
                f"stored measurement has schema {schema!r}, this kctl reads {MEASUREMENT_SCHEMA}",
                hint="measure the baseline again (kctl bench BASELINE_PROFILE)",
            )
        return cls(
            fingerprint=d["fingerprint"],
            label=d.get("label", ""),
            meta=dict(d.get("meta", {})),
            samples=tuple(Sample.from_dict(s) for s in d.get("samples", ())),
            summaries=tuple(Summary.from_dict(s) for s in d.get("summaries", ())),
            probes=tuple(ProbeOutput.from_dict(p) for p in d.get("probes", ())),
            timings=tuple((str(k), float(v)) for k, v in d.get("timings", ())),
        )
