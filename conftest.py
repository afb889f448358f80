"""What the whole test run shares: the two tiers, the xdist groups and the summaries.

**Tiers.** ``python -m pytest -m "not slow"`` is the in-process tier. The ``slow`` tier
holds the tests that drive real processes: ``python -m kctl`` subprocesses, simulator
servers in real time, dockerd and Swarm, Chromium, nvcc. Most slow modules carry
``pytestmark = pytest.mark.slow``; the modules in :data:`SLOW_MODULES` and every ``docker``
test are marked here.

**Parallel.** pyproject's ``addopts`` runs the tests on pytest-xdist workers with
``--dist loadgroup``: tests are independent (each has its own tmp dir, state dir and
ports), except those that share one Docker engine's state: the ``docker`` tests run in
the ``xdist_group`` :data:`DOCKER_GROUPS` names for their module, so each group runs on one
worker, in file order; so does each module of :data:`ONE_WORKER_MODULES`. ``-n 0`` runs in
this process.

**Summaries under xdist.** The fault suite's summary is built here from the test reports
(workers send them to the controller with their ``user_properties``), and the kernel
compile test's lines come back from each worker through ``workeroutput``.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent

#: modules of the slow tier with no ``pytestmark`` of their own (paths from the root)
SLOW_MODULES = frozenset(
    {
        "kernels/tests/test_compile.py",  # nvcc, four builds
        "kernels/tests/test_sglang_hook.py",  # a Python subprocess per case
        "kernels/tests/test_sglang_standalone.py",  # published wheels' trees in subprocesses
        "kernels/tests/test_bench_args.py",  # the bench scripts as subprocesses
        "tests/faults/test_security.py",  # the fault harness: kctl and simulator processes
        "tests/fleet/test_fleet_simulate.py",  # kctl --fleet against simulated replicas
        "tests/gate/test_gate_sim.py",  # the gate against a real simulator server
        "tests/health/test_health_processes.py",  # real server processes
        "tests/health/test_health_sim.py",  # the health wait against the simulator
        "tests/lock/test_deploy_lock.py",  # racing kctl processes
        "tests/profile/test_profile_faults.py",  # bad profiles through the CLI subprocess
        "tests/sim/test_faults.py",  # simulator processes
        "tests/sim/test_server.py",  # simulator processes
    }
)

#: modules whose tests share one module fixture and run in file order (the simulated fleet's
#: tests start from the state the one before left): each runs whole on one worker
ONE_WORKER_MODULES = frozenset(
    {
        "tests/fleet/test_fleet_simulate.py",
        "tests/gate/test_gate_sim.py",
        "tests/report/test_report_browser.py",
        "tests/faults/test_profiles.py",
        "tests/sim/test_calibration.py",
        "kernels/tests/test_sglang_plugin.py",
    }
)

#: docker modules that run beside the other docker tests, on a worker of their own: they
#: share nothing on the engine with them but the base image (read only). The docker fault
#: cases build, run and delete their own ``faults-*`` images, and their containers carry the
#: case's state dir as owner. Every other docker test joins the group ``docker``, in file
#: order: those build and run the same ``kctl/<profile>`` images of ``tests/docker/profiles``
#: (a second build of a tag while the Swarm tests copy it to their second node would move
#: the tag under the copy), and the Swarm tests turn the engine into a manager.
DOCKER_GROUPS = {"tests/faults/test_docker.py": "docker-faults"}

#: the kernel compile test's conftest keeps its summary lines in this list
_COMPILE_LINES = "_COMPILE_SUMMARY"


def _relpath(item: pytest.Item) -> str:
    try:
        return Path(str(item.path)).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return ""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # tryfirst: xdist's loadgroup reads the xdist_group marks in its own hook
    for item in items:
        path = _relpath(item)
        if path in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
        if path in ONE_WORKER_MODULES:
            item.add_marker(pytest.mark.xdist_group(path))
        if item.get_closest_marker("docker") is not None:
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.xdist_group(DOCKER_GROUPS.get(path, "docker")))


# -- the kernel compile test's summary, from the workers ------------------------------------


def _compile_lines(config: pytest.Config) -> list[str] | None:
    """The summary list of ``kernels/tests/conftest.py`` where that conftest is loaded."""
    want = ROOT / "kernels" / "tests" / "conftest.py"
    for plugin in config.pluginmanager.get_plugins():
        path = getattr(plugin, "__file__", None)
        if path and Path(path).resolve() == want:
            lines = getattr(plugin, _COMPILE_LINES, None)
            return lines if isinstance(lines, list) else None
    return None


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the lines to the controller
        workeroutput["compile_summary"] = list(_compile_lines(session.config) or [])


@pytest.hookimpl(optionalhook=True)  # an xdist hook: without xdist it is never called
def pytest_testnodedown(node: Any, error: Any) -> None:
    lines = getattr(node, "workeroutput", {}).get("compile_summary") or []
    target = _compile_lines(node.config)
    if target is not None:
        target.extend(lines)
    elif lines:  # the controller never loaded that conftest: print them ourselves
        _orphan_lines.extend(lines)


_orphan_lines: list[str] = []


# -- the fault suite's summary --------------------------------------------------------------


def _fault_group(nodeid: str) -> str | None:
    """``tests/faults/test_kill.py::x`` -> ``kill``; None for a test outside the suite."""
    path, _, _ = nodeid.partition("::")
    p = Path(path)
    if p.parent.name != "faults" or not p.name.startswith("test_"):
        return None
    return p.stem.removeprefix("test_")


def _fault_counts(stats: dict[str, list[Any]]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    seen: set[str] = set()
    for outcome in ("passed", "failed", "error", "skipped"):
        for rep in stats.get(outcome, []):
            nodeid = getattr(rep, "nodeid", "")
            group = _fault_group(nodeid)
            if group is None or outcome == "skipped" or nodeid in seen:
                continue
            if rep.when != "call" and outcome == "passed":
                continue
            seen.add(nodeid)
            g = groups[group]
            g[0] += 1
            g[1] += outcome == "passed"
            g[2] += sum(v for k, v in rep.user_properties if k == "lost_records")
    return groups


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _orphan_lines:
        terminalreporter.section("kdtree_mla compile test: kernels built")
        for line in _orphan_lines:
            terminalreporter.write_line(line)
    groups = _fault_counts(terminalreporter.stats)
    if not groups:
        return
    terminalreporter.section("fault suite: cases / survived / lost records")
    total = [0, 0, 0]
    for name in sorted(groups):
        cases, survived, lost = groups[name]
        total = [total[0] + cases, total[1] + survived, total[2] + lost]
        terminalreporter.write_line(
            f"faults {name}: {cases} cases / {survived} survived / {lost} lost records"
        )
    terminalreporter.write_line(
        f"faults total: {total[0]} cases / {total[1]} survived / {total[2]} lost records"
    )
