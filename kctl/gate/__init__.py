"""The throughput and correctness gate.

- :mod:`.workload`: the plan of requests (pure),
- :mod:`.client`: the timed streaming ``/generate`` request and the greedy probe (on
  :class:`kctl.sglang.client.SGLangClient`),
- :mod:`.stats`: samples and per-bucket statistics (pure),
- :mod:`.measurement`: what a run against one server recorded (JSON round-trip),
- :mod:`.correctness`: greedy outputs vs the baseline's (pure),
- :mod:`.probes`: asking a server the correctness probes (every gate asks them so),
- :mod:`.verdict`: the judge (pure), :mod:`.report`: the table (pure),
- :mod:`.runner`: :func:`measure` and :func:`run_gate`, the only part that does I/O.
"""

from kctl.gate.client import Endpoint, greedy_ids, stream_generate
from kctl.gate.measurement import Measurement, ProbeOutput
from kctl.gate.report import render_table
from kctl.gate.runner import GateProgress, GateResult, measure, run_gate
from kctl.gate.stats import Sample, Summary, summarize
from kctl.gate.verdict import CorrectnessResult, Crossover, Verdict, check_correctness, judge
from kctl.gate.workload import Workload, estimate_duration, plan_workload

__all__ = [
    "CorrectnessResult",
    "Crossover",
    "Endpoint",
    "GateProgress",
    "GateResult",
    "Measurement",
    "ProbeOutput",
    "Sample",
    "Summary",
    "Verdict",
    "Workload",
    "check_correctness",
    "estimate_duration",
    "greedy_ids",
    "judge",
    "measure",
    "plan_workload",
    "render_table",
    "run_gate",
    "stream_generate",
    "summarize",
]
