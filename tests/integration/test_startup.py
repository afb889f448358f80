"""`kctl --help` and `kctl status` must start fast: no docker, torch or jinja2 import."""

from __future__ import annotations

import os
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


def test_status_of_a_docker_deployment_with_no_engine_says_so(tmp_path: Path) -> None:
    """The one Docker client (the SDK) reads the container; no torch or jinja2."""
    from kctl.profile import load_profile
    from kctl.runtime.base import Instance
    from kctl.store import Store

    repo = Path(__file__).resolve().parents[2]
    profile = load_profile(repo / "profiles" / "triton-graphs.yaml")
    with Store.open(tmp_path) as store:
        dep = store.new_deployment("deploy", profile, runtime="docker")
        store.update_deployment(
            dep.id,
            status="promoted",
            instance=Instance(runtime="docker", deployment_id=dep.id, ref="f" * 64, port=30000),
        )
        store.set_serving(dep.id)
    code = PROBE.format(args=["--state-dir", str(tmp_path), "status"], heavy=HEAVY[1:])
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert "HEAVY=\n" in out.stdout, out.stdout + out.stderr
    assert f"cannot check {dep.id}: docker engine not reachable at unix://{tmp_path}" in out.stdout
