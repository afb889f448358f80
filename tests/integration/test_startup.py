"""`kctl --help` and `kctl status` must start fast: no docker, torch or jinja2 import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("docker", "torch", "jinja2")

PROBE = """
import sys
from kctl.cli import main
try:
    code = main({args!r})
except SystemExit as e:
    code = e.code
heavy = sorted(m for m in {heavy!r} if m in sys.modules)
print("HEAVY=" + ",".join(heavy))
"""


@pytest.mark.parametrize(
    "args",
    [["--help"], ["status"], ["--simulate", "status"], ["history"], ["lock", "show"]],
)
def test_light_commands_do_not_import_heavy_modules(tmp_path: Path, args: list[str]) -> None:
    full = ["--state-dir", str(tmp_path), *args]
    code = PROBE.format(args=full, heavy=HEAVY)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "HEAVY=\n" in out.stdout, out.stdout + out.stderr
