"""Asking a server the correctness probes: each probe's greedy output, or its error.

One way for every gate that asks them: the host gate (:func:`kctl.gate.runner.measure`),
the fleet's canary (both sides before either's throughput) and its smoke gate of each
moved replica (:mod:`kctl.fleet.canary`). The comparison is :mod:`.correctness`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kctl.errors import GateError
from kctl.gate.client import Endpoint, greedy_ids
from kctl.gate.measurement import ProbeOutput
from kctl.gate.workload import Probe


def ask_probe(endpoint: Endpoint, probe: Probe, timeout_s: float) -> ProbeOutput:
    """The greedy output of ``probe`` at ``endpoint``, or the reason it has none (the
    server's error, a timeout): a failed probe is recorded, never raised."""
    try:
        ids = greedy_ids(
            endpoint.host,
            endpoint.port,
            probe.input_ids(),
            probe.tokens,
            timeout_s=timeout_s,
            api_key=endpoint.api_key,
        )
    except GateError as exc:
        return ProbeOutput(probe.index, error=exc.message)
    return ProbeOutput(probe.index, tuple(ids))


def _no_check() -> None:
    return None


def ask_probes(
    endpoint: Endpoint,
    probes: Sequence[Probe],
    timeout_s: float,
    *,
    alive: Callable[[], None] = _no_check,
    done: Callable[[int, int], None] | None = None,
) -> tuple[ProbeOutput, ...]:
    """Every probe in order. ``alive`` is asked before each and after a failed one (it
    raises when the server has gone); ``done(n, total)`` follows each answer."""
    out: list[ProbeOutput] = []
    for probe in probes:
        alive()
        answer = ask_probe(endpoint, probe, timeout_s)
        if answer.error is not None:
            alive()
        out.append(answer)
        if done is not None:
            done(len(out), len(probes))
    return tuple(out)
