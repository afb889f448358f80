"""Fixtures for tests against a real Docker engine (marker ``docker``).

Without a reachable engine these tests skip with the reason, except under CI (env ``CI``
set), where they fail: CI must prove the docker path. ``scripts/ci-docker.sh`` starts an
engine and builds the base image the test serving images are built FROM.

Every container a test starts carries the test's own state dir as ``kctl.owner``, so tests
never see, reuse or prune containers of other runs on the same engine.
"""

from __future__ import annotations

import os
import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kctl.errors import KctlError

if TYPE_CHECKING:
    from docker import DockerClient

    from kctl.profile.model import Profile
    from kctl.runtime.base import Instance
    from kctl.runtime.docker import DockerRuntime

REPO = Path(__file__).resolve().parents[2]
PROFILES = Path(__file__).resolve().parent / "profiles"
BASE_IMAGE = os.environ.get("KCTL_TEST_BASE_IMAGE", "kctl-test-base:bookworm")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"docker tests must run under CI: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def engine() -> Iterator[DockerClient]:
    """A connected docker client; skip (fail under CI) without an engine or base image."""
    from kctl.runtime.docker import connect

    try:
        client = connect(timeout_s=120)
    except KctlError as exc:
        _unavailable(f"no docker engine: {exc.message} (run scripts/ci-docker.sh as root)")
        raise  # unreachable: skip/fail raise
    try:
        import docker.errors

        try:
            client.images.get(BASE_IMAGE)
        except docker.errors.ImageNotFound:
            _unavailable(f"base image {BASE_IMAGE} missing (run scripts/build-base-image.sh)")
        yield client
    finally:
        client.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def copy_profiles(dest: Path, port: int) -> Path:
    """The test profiles, copied to ``dest`` with ``server.port`` set to ``port``."""
    dest.mkdir(parents=True, exist_ok=True)
    for src in PROFILES.glob("*.yaml"):
        text = re.sub(r"(?m)^(\s*port:)\s*\d+", rf"\g<1> {port}", src.read_text())
        (dest / src.name).write_text(text)
    return dest


@pytest.fixture
def profiles(tmp_path: Path) -> Path:
    return copy_profiles(tmp_path / "profiles", free_port())


def load(path: Path) -> Profile:
    from kctl.profile.loader import load_profile

    return load_profile(path)


@pytest.fixture
def runtime(engine: DockerClient, tmp_path: Path) -> Iterator[DockerRuntime]:
    """A DockerRuntime owning only this test's containers; removes them afterwards."""
    from kctl.runtime.docker import DockerRuntime

    rt = DockerRuntime(tmp_path / "state", client=engine)
    try:
        yield rt
    finally:
        remove_owned(engine, str((tmp_path / "state").resolve()))


def remove_owned(engine: DockerClient, owner: str) -> None:
    for c in engine.containers.list(all=True, filters={"label": f"kctl.owner={owner}"}):
        c.remove(force=True)


def http_status(port: int, path: str = "/health", timeout: float = 2.0) -> int | None:
    """The HTTP status of GET 127.0.0.1:port/path, None when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return int(exc.code)
    except (OSError, urllib.error.URLError):
        return None


def wait_http_ok(rt: DockerRuntime, inst: Instance, port: int, timeout: float = 30.0) -> float:
    """Seconds until /health answers 200; fails at once when the container stops."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if http_status(port) == 200:
            return time.monotonic() - start
        state = rt.state(inst)
        if not state.running:
            pytest.fail(f"container stopped: {state.detail}\n{rt.logs(inst, tail=20)}")
        time.sleep(0.1)
    pytest.fail(f"/health not 200 within {timeout} s\n{rt.logs(inst, tail=20)}")


def kctl_env(tmp_path: Path) -> dict[str, str]:
    """Env for `python -m kctl` subprocesses: this checkout first on the path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["XDG_STATE_HOME"] = str(tmp_path / "xdg")
    return env


__all__ = ["BASE_IMAGE", "REPO", "copy_profiles", "free_port", "http_status", "load"]
