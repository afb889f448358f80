"""kctl at the floors of its declared dependencies (pyproject.toml's ``>=X``).

``scripts/ci-floors.sh`` pins every runtime dependency (and the test extras the CLI tests
import) at its floor in a fresh virtual environment that sees no system packages, installs
kctl into it without dependencies, and runs the CLI tests there. A floor that fails here is
a floor that lies. It needs PyPI: under CI it must run; elsewhere it is skipped, with the
reason, when PyPI cannot be reached.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
    except OSError:
        return False
    return True


def test_the_cli_tests_pass_at_the_declared_floors(tmp_path: Path) -> None:
    if not os.environ.get("CI") and not _pypi_reachable():
        pytest.skip("PyPI cannot be reached: the floors cannot be installed")
    env = {**os.environ, "FLOORS_VENV": str(tmp_path / "venv")}
    run = subprocess.run(
        ["bash", str(REPO / "scripts" / "ci-floors.sh")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    tail = (run.stdout + run.stderr)[-6000:]
    assert run.returncode == 0, tail
    assert "== floors: " in run.stdout and " passed" in run.stdout, tail
