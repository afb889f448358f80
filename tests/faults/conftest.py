"""Fixtures of the fault-injection suite, and its per-group summary.

Each test module is one group (``test_kill.py`` -> ``kill``). At the end of a run that
collected any of them, one line per group is printed:

    faults kill: 14 cases / 14 survived / 0 lost records

*survived*: the case passed, i.e. kctl's exit code and message, the host's final state
(checked over HTTP and with ``kctl status --json``) and the store all came out as the
case asserts. *lost records*: deployment records present before the fault that are
missing, or that had ended and were changed, afterwards (``kctl history --json``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.harness import Case

HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "known_defect(id): expects the fixed behaviour of a defect listed in issue 33",
    )


@pytest.fixture
def case(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Case]:
    """A fresh state dir and port, fast gate."""
    c = Case(tmp_path, request.node)
    try:
        yield c
    finally:
        c.cleanup()


@pytest.fixture
def slow_case(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Case]:
    """A fresh state dir and port, with steps about a second long to land a signal in."""
    c = Case(tmp_path, request.node, slow_gate=True)
    try:
        yield c
    finally:
        c.cleanup()


def _group(nodeid: str) -> str | None:
    path, _, _ = nodeid.partition("::")
    p = Path(path)
    if p.parent.name != "faults" or not p.name.startswith("test_"):
        return None
    return p.stem.removeprefix("test_")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    groups: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    seen: set[str] = set()
    for outcome in ("passed", "failed", "error", "skipped"):
        for rep in terminalreporter.stats.get(outcome, []):
            group = _group(getattr(rep, "nodeid", ""))
            if group is None or outcome == "skipped" or rep.nodeid in seen:
                continue
            if rep.when != "call" and outcome == "passed":
                continue
            seen.add(rep.nodeid)
            g = groups[group]
            g[0] += 1
            g[1] += outcome == "passed"
            g[2] += sum(v for k, v in rep.user_properties if k == "lost_records")
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
