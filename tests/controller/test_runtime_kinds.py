"""The runtime kinds as data: what the planner and the commands ask instead of comparing
kind names, and the one factory."""

from __future__ import annotations

from pathlib import Path

import pytest

from kctl.errors import UsageError
from kctl.runtime import KINDS, create, kind_of
from kctl.runtime.docker import DockerRuntime
from kctl.runtime.local import LocalRuntime


def test_each_kind_says_what_it_needs() -> None:
    assert set(KINDS) == {"local", "docker"}
    assert kind_of("docker").builds_images and kind_of("docker").runs_images
    assert "GPU arch" in kind_of("docker").preflight_checks
    assert not kind_of("local").builds_images and not kind_of("local").runs_images
    assert kind_of("local").preflight_checks == ("runtime", "port")


def test_an_unknown_kind_is_refused_with_the_known_ones() -> None:
    with pytest.raises(UsageError, match="unknown runtime kind 'podman'") as info:
        kind_of("podman")
    assert info.value.hint == "use one of: local, docker"
    assert info.value.exit_code == 2


def test_create_makes_the_kind_named_without_reaching_it(tmp_path: Path) -> None:
    local = create("local", tmp_path)
    docker = create("docker", tmp_path)
    assert isinstance(local, LocalRuntime) and local.name == "local"
    assert isinstance(docker, DockerRuntime) and docker.owner == str(tmp_path.resolve())
    assert docker._client is None  # no engine was asked
