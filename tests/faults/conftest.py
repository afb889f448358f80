"""Fixtures of the fault-injection suite; its per-group summary is printed by the root
``conftest.py`` (so that it also counts the cases pytest-xdist workers ran).

Each test module is one group (``test_kill.py`` -> ``kill``). At the end of a run that
collected any of them, one line per group is printed:

    faults kill: 14 cases / 14 survived / 0 lost records

*survived*: the case passed, i.e. kctl's exit code and message, the host's final state
(checked over HTTP and with ``kctl status --json``) and the store all came out as the
case asserts. *lost records*: deployment records present before the fault that are
missing, or that had ended and were changed, afterwards (``kctl history --json``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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
