"""kctl reaches the real Docker engine over ``ssh://``: docker's SSH transport (paramiko,
the ``ssh`` extra) logs in to the test SSH server of :mod:`tests.fleet.sshd`, which answers
``docker system dial-stdio`` by piping the channel to this engine's unix socket. The engine
seen over SSH is the one seen over its socket (same ID, same images), through the code a
fleet file's ``swarm.engines`` and ``swarm.manager`` entries use."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kctl.fleet.images import connect_engine
from kctl.fleet.swarm import SwarmDriver
from tests.docker.conftest import BASE_IMAGE
from tests.fleet.sshd import DIAL_STDIO, SSHServer, ssh_home

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = pytest.mark.docker


def _socket_path() -> str:
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if not host.startswith("unix://"):
        pytest.skip(f"the SSH fixture pipes to a unix socket; DOCKER_HOST is {host}")
    return host.removeprefix("unix://")


@pytest.fixture
def sshd(
    engine: DockerClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SSHServer]:
    with SSHServer(_socket_path()) as server:
        monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
        monkeypatch.setenv("HOME", str(ssh_home(tmp_path / "home", server)))
        yield server


def test_kctl_reaches_the_engine_over_ssh(engine: DockerClient, sshd: SSHServer) -> None:
    client = connect_engine(sshd.url)  # as a fleet file's swarm.engines entry
    try:
        assert client.info()["ID"] == engine.info()["ID"]
        assert client.images.get(BASE_IMAGE).id == engine.images.get(BASE_IMAGE).id
    finally:
        client.close()
    driver = SwarmDriver("ssh-test", "owner", manager=sshd.url)  # as swarm.manager
    try:
        assert driver.client.version()["ApiVersion"] == engine.version()["ApiVersion"]
    finally:
        driver.close()
    assert sshd.logins >= 2 and set(sshd.commands) == {DIAL_STDIO}
