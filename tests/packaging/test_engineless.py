"""The README's test command on a machine without a reachable Docker engine.

Every module with Docker tests runs in a fresh pytest, outside CI, with ``DOCKER_HOST``
pointing at nothing: an unreachable TCP engine, and a unix socket that does not exist (a
machine with no engine installed). The Docker tests must skip with the reason and the run
must end green, also for a test that runs after them and collects garbage: a socket a
failed connect leaked would surface there as an error under ``filterwarnings = error``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

#: the test modules that hold Docker-engine tests (marker ``docker``)
DOCKER_MODULES = ("tests/faults/test_docker.py", "tests/docker")

AFTER = """
import gc


def test_collect_after_the_docker_tests() -> None:
    gc.collect()
"""


@pytest.mark.parametrize(
    "docker_host",
    ["tcp://127.0.0.1:1", "unix:///nonexistent/kctl-no-engine/docker.sock"],
    ids=["unreachable-tcp", "no-engine"],
)
def test_docker_tests_skip_cleanly_without_an_engine(tmp_path: Path, docker_host: str) -> None:
    after = tmp_path / "test_after_docker.py"
    after.write_text(AFTER)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["DOCKER_HOST"] = docker_host
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         *DOCKER_MODULES, str(after)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    summary = out.strip().splitlines()[-1]
    assert not re.search(r"\b(failed|errors?)\b", summary), summary
    skipped = re.search(r"(\d+) skipped", summary)
    assert skipped is not None and int(skipped.group(1)) > 0, summary
    reasons = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    docker_skips = [r for r in reasons if "docker engine" in r]
    assert docker_skips, out
    assert re.search(r"\b\d+ passed", summary), summary  # the test after them ran
