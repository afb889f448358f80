"""kernels/tests: the package and its test support (kdtree_mla, kdtree_mla_testing) are imported
from this checkout, not installed. Tests that need torch skip with a reason when it is missing
(pytest.importorskip in their modules)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_COMPILE_SUMMARY: list[str] = []


@pytest.fixture
def compile_summary() -> list[str]:
    """Lines the compile test adds: which kernels each build holds (printed after the run)."""
    return _COMPILE_SUMMARY


def pytest_terminal_summary(terminalreporter):
    if _COMPILE_SUMMARY:
        terminalreporter.section("kdtree_mla compile test: kernels built")
        for line in _COMPILE_SUMMARY:
            terminalreporter.write_line(line)
