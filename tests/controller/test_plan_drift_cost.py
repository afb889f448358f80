"""``kctl plan``'s cost of the drift check, estimated from the stored rates: the requests
the deploy's check sends, with their short streams where the gate's would be long."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kctl.controller.plan import _check_cost
from kctl.controller.steps import Measure
from kctl.gate import estimate_duration, plan_workload
from kctl.gate.drift import DRIFT_BUDGET_S
from kctl.profile.loader import load_profile

REPO = Path(__file__).resolve().parents[2]
#: the simulated triton-graphs baseline's stored medians (tok/s, real-time scale)
RATES = {5700: 52.12, 23000: 8.0, 91000: 2.01}


def test_plan_estimates_the_short_check_the_deploy_sends() -> None:
    workload = plan_workload(load_profile(str(REPO / "profiles" / "kdtree-graphs.yaml")).gate)
    assert (workload.contexts, workload.output_tokens) == ((5700, 23000, 91000), 128)
    step = Measure(role="baseline", profile="triton-graphs", source="checked",
                   check_requests=6, check_budget_s=DRIFT_BUDGET_S, measure_requests=15)  # fmt: skip
    cost = _check_cost((step,), workload, RATES)
    assert cost is not None
    assert (cost["requests"], cost["bound_s"], cost["measure_requests"]) == (6, 300.0, 15)
    # 2 x 128 tokens at 5.7k and 23k, 2 x 33 at 91k (16 s of decode at 2.01 tok/s): about
    # 130 s, where two requests of the gate's whole stream per context take about 225 s
    assert cost["estimated_s"] == 129.9
    whole = dataclasses.replace(
        workload,
        warmups=(),
        measured=tuple(r for r in workload.measured if r.index < 2),
        concurrent=(),
        probes=(),
    )
    assert round(estimate_duration(whole, RATES)) == 224
    # no stored rates yet: no estimate; no check in the plan: no cost
    assert _check_cost((step,), workload, {})["estimated_s"] is None  # type: ignore[index]
    assert _check_cost((), workload, RATES) is None
