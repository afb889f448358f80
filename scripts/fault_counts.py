"""Print the fault suite's cases per group, as pytest collects them, in the form of the
table in docs/reliability.md ("Cases now"). A group is a module ``tests/faults/test_<group>.py``,
as the suite's own summary names them (tests/faults/conftest.py).

    python scripts/fault_counts.py

tests/packaging/test_reliability_figures.py fails when the doc's table and this disagree.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def collected() -> dict[str, int]:
    """Cases per group, from ``pytest --collect-only`` of tests/faults (one process)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/faults", "--collect-only", "-q", "-n", "0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    groups: Counter[str] = Counter()
    for line in proc.stdout.splitlines():
        path, sep, _ = line.partition("::")
        name = Path(path).name
        if sep and Path(path).parent.name == "faults" and name.startswith("test_"):
            groups[name.removeprefix("test_").removesuffix(".py")] += 1
    return dict(sorted(groups.items()))


def table(counts: dict[str, int]) -> str:
    rows = ["| group | cases |", "| --- | ---: |"]
    rows += [f"| {group} | {n} |" for group, n in counts.items()]
    rows.append(f"| **total** | **{sum(counts.values())}** |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table(collected()))
