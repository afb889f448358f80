"""The gate report as a person sees it, in headless Chromium: one simulated store holds a
rejected (the README's scenario: kdtree-eager, 5.7k context below the baseline), a promoted
(kdtree-graphs), a crashed and a never-ready deployment, each written by ``kctl deploy``
itself; every page renders with no console error and no network, and a screenshot of each
is kept (``KCTL_REPORT_ARTIFACTS``)."""

from __future__ import annotations

import json
import re
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from kctl.gate import GateResult
from kctl.gate.drift import DriftCheck
from kctl.store import Store

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Deployed:
    """One ``kctl deploy`` of the scenario: its exit code, output and the report it wrote."""

    code: int
    out: str
    err: str
    deployment_id: str
    report: Path
    reason: str


@dataclass
class Scenario:
    state: Path
    profiles: Path
    runs: dict[str, Deployed]

    def kctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "kctl", "--state-dir", str(self.state), "--simulate", *args]
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=180, cwd=self.profiles.parent
        )

    def store(self) -> Store:
        return Store.open(self.state / "simulate", read_only=True)


def _deploy(sc: Scenario, profile: str) -> Deployed:
    r = sc.kctl("--json", "deploy", f"profiles/{profile}")
    result = json.loads(r.stdout)["result"]
    assert result is not None, r.stderr
    return Deployed(
        r.returncode,
        r.stdout,
        r.stderr,
        result["deployment_id"],
        Path(result["report"]),
        result["reason"],
    )


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    """The README's deploys on a copy of the shipped profiles (on a free port), then a
    candidate that crashes while loading and one that never becomes ready."""
    root = tmp_path_factory.mktemp("report-scenario")
    profiles = root / "profiles"
    shutil.copytree(REPO / "profiles", profiles)
    base = profiles / "_kimi-k26-base.yaml"
    data = yaml.safe_load(base.read_text())
    data["server"]["port"] = _free_port()
    base.write_text(yaml.safe_dump(data, sort_keys=False))
    # These tests are about the report, not the gate's statistics. On a loaded 2-core
    # machine the simulator's rates move by up to about 12% (its timings are wall-clock), so
    # a ratio interval near a threshold can come out INCONCLUSIVE. Each copy below keeps its
    # outcome out of reach of that noise: kdtree-graphs (about 1.05 at 5.7k) asks only 0.75,
    # and kdtree-eager (about 0.93 at 5.7k) must reach 1.15 there, so it fails at 5.7k and
    # passes at 23k and 91k (about 2x) as in the README.
    for name, policy in (
        ("kdtree-graphs.yaml", {"min_ratio": 0.75}),
        ("kdtree-eager.yaml", {"min_ratio_per_context": {5700: 1.15}}),
    ):
        path = profiles / name
        data = yaml.safe_load(path.read_text())
        data["gate"] = {"policy": policy}
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    for name, fault, deadline in (
        ("crash", "crash_while_loading", 900),
        ("never-ready", "never_ready", 60),
    ):
        (profiles / f"{name}.yaml").write_text(
            yaml.safe_dump(
                {
                    "extends": "kdtree-eager.yaml",
                    "description": f"the kernel, eager, with the simulator's {fault} fault",
                    "server": {"env": {"KDTREE_VERIFY": "1", "KCTL_SIM_FAULT": fault}},
                    "health": {"deadline_s": deadline},
                }
            )
        )
    sc = Scenario(root / "state", profiles, {})
    try:
        sc.runs["rejected"] = _deploy(sc, "kdtree-eager.yaml")
        sc.runs["promoted"] = _deploy(sc, "kdtree-graphs.yaml")
        sc.runs["crashed"] = _deploy(sc, "crash.yaml")
        sc.runs["never-ready"] = _deploy(sc, "never-ready.yaml")
        yield sc
    finally:
        sc.kctl("stop", "--yes")


def _measured(store: Store, deployment_id: str) -> int:
    """Decode-rate samples the report should plot: the candidate's measured requests and
    those of the baseline measurement made during the same deploy."""
    dep = store.get_deployment(deployment_id)
    gate = GateResult.from_dict(store.gate_result(dep.id) or {})
    n = sum(1 for s in gate.candidate.samples if s.phase == "measure" and s.ok)
    for row in store.measurements(store.get_deployment(dep.baseline_id or "").profile_hash):
        n += sum(
            1
            for s in row.data["samples"]
            if s["phase"] == "measure" and s["decode_tps"] is not None
        )
        break
    return n


def test_outcomes_are_the_scenarios(scenario: Scenario) -> None:
    runs = scenario.runs
    assert runs["rejected"].code == 3, runs["rejected"].err
    assert runs["promoted"].code == 0, runs["promoted"].err
    assert runs["crashed"].code == 3 and "simulated crash while loading" in runs["crashed"].reason
    assert runs["never-ready"].code == 3 and "not healthy after 60 s" in runs["never-ready"].reason


def test_deploy_writes_a_private_report_next_to_the_state(scenario: Scenario) -> None:
    for run in scenario.runs.values():
        assert run.report == scenario.state / "simulate" / "reports" / f"{run.deployment_id}.html"
        assert stat.S_IMODE(run.report.stat().st_mode) == 0o600
    status = scenario.kctl("status")
    last = scenario.runs["never-ready"]
    assert f"report: {last.report} (deployment {last.deployment_id})" in status.stdout


def test_readme_scenario_shows_the_crossover_and_the_verdict(
    open_report: Any, scenario: Scenario
) -> None:
    run = scenario.runs["rejected"]
    seen = open_report(run.report, "rejected-kdtree-eager")
    page = seen.page
    assert page.get_attribute("body", "data-charts") == "rendered"
    verdict = page.inner_text("#verdict")
    assert verdict.startswith("FAIL: kdtree-eager was rejected")
    assert "5700: ratio " in verdict and "23000" not in verdict and "91000" not in verdict
    for layer in ("rate_crossover", "ratio_crossover"):
        (label,) = seen.texts(layer)
        found = re.fullmatch(r"crossover ≈ ([\d,]+) tokens", label)
        assert found is not None, label
        assert 5700 < int(found.group(1).replace(",", "")) < 23000
    with scenario.store() as store:
        assert seen.marks("rate_points") == _measured(store, run.deployment_id)
        gate = GateResult.from_dict(store.gate_result(run.deployment_id) or {})
        steps = store.journal(run.deployment_id)
    assert seen.marks("ratio_points") == len(gate.verdict.rows) == 3
    assert seen.marks("ratio_interval") == 3
    assert seen.marks("rate_threshold") >= 1
    assert seen.marks("timeline_bars") == len(steps)
    assert seen.marks("accept_line") >= 1 and seen.marks("ttft_line") >= 1
    assert "3 of 3 greedy probes match" in page.inner_text("#probes")
    assert "--disable-cuda-graph" in page.inner_text("#diff")
    assert seen.console_errors == [] and seen.blocked == []


def _num(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def test_promoted_report(open_report: Any, scenario: Scenario) -> None:
    run = scenario.runs["promoted"]
    seen = open_report(run.report, "promoted-kdtree-graphs")
    page = seen.page
    assert page.inner_text("#verdict").startswith("PASS: kdtree-graphs was promoted")
    assert seen.marks("ratio_points") == 3
    # the drift check of the stored baseline measurement, as the deploy reported it: steady
    # here (the stored measurement reused), unless a loaded machine slowed its few requests
    # beyond the tolerance (then the baseline was measured again, and the page says that)
    check = DriftCheck.from_dict(json.loads(run.out)["result"]["baseline_check"])
    if check.steady:
        outcome, source = "reused", "stored measurement reused"
        assert "the baseline still serves as it was measured" in page.inner_text("#baseline-check")
    else:
        outcome = f"measured again ({check.reason.partition(':')[0]})"
        source = "measured during this deploy"
    assert page.inner_text("#baseline-check-outcome") == outcome
    assert source in page.inner_text("table.facts")
    said = page.inner_text("#baseline-check")
    assert "sent the running baseline 6 requests over 3 contexts" in said, said
    shown = [
        [cell.inner_text() for cell in row.query_selector_all("td")]
        for row in page.query_selector_all("#baseline-check-table tr")[1:]
    ]
    assert shown == [
        [str(r.context), _num(r.stored, 2), _num(r.now, 2), _num(r.ratio, 3),
         "-" if r.lo is None else f"{r.lo:.3f} to {r.hi:.3f}", f"{r.completed}/{r.sent}",
         r.outcome]
        for r in check.rows
    ], shown  # fmt: skip
    assert [row[0] for row in shown] == ["5700", "23000", "91000"]
    assert seen.console_errors == [] and seen.blocked == []


@pytest.mark.parametrize("name", ["crashed", "never-ready"])
def test_report_without_a_gate_says_so(open_report: Any, scenario: Scenario, name: str) -> None:
    seen = open_report(scenario.runs[name].report, f"{name}-candidate")
    page = seen.page
    assert page.get_attribute("body", "data-charts") == "rendered"
    assert page.inner_text("#verdict").startswith("No gate verdict for")
    assert "the gate did not run: the deployment ended rejected before it" in page.inner_text(
        "#verdict"
    )
    assert "health failed" in page.inner_text("table.facts")
    assert seen.marks("ratio_points") == 0  # no ratio without a candidate measurement
    assert seen.marks("timeline_bars") >= 3  # stop, start, wait-healthy, the revert
    assert seen.console_errors == [] and seen.blocked == []


def test_history_adds_the_baseline_trend(
    open_report: Any, scenario: Scenario, tmp_path: Path
) -> None:
    out = tmp_path / "with-history.html"
    r = scenario.kctl(
        "report", scenario.runs["promoted"].deployment_id, "--history", "--out", str(out)
    )
    assert r.returncode == 0, r.stderr
    assert f"report: {out}" in r.stdout
    seen = open_report(out, "promoted-with-history")
    assert seen.marks("history_line") >= 1
    assert seen.console_errors == [] and seen.blocked == []
