"""docs/reliability.md's table of the fault suite's cases is the output of
``scripts/fault_counts.py`` (pytest's own collection of tests/faults), not a hand count:
adding or removing a fault case without running the script fails here."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "reliability.md"
START = "<!-- fault_counts: begin -->"
END = "<!-- fault_counts: end -->"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "fault_counts", REPO / "scripts" / "fault_counts.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _doc_table() -> str:
    text = DOC.read_text()
    found = re.search(re.escape(START) + r"\n(.*?)\n" + re.escape(END), text, re.S)
    assert found, f"{DOC} lost its {START} ... {END} table"
    return found.group(1).strip()


def test_the_docs_case_counts_are_the_collected_ones() -> None:
    script = _script()
    counts = script.collected()
    assert counts.get("kill", 0) > 0 and counts.get("profiles", 0) > 0  # the walk found them
    assert _doc_table() == script.table(counts), (
        "docs/reliability.md's case counts are stale: paste `python scripts/fault_counts.py`"
    )


def test_the_table_is_what_the_summary_groups_are() -> None:
    # the groups are the modules the suite's own summary names (tests/faults/conftest.py)
    modules = sorted(
        p.stem.removeprefix("test_") for p in (REPO / "tests" / "faults").glob("test_*.py")
    )
    assert list(_script().collected()) == modules
