"""The paths of a fleet file: a ``unix://`` endpoint (the Swarm manager, a node's engine)
is a host path, normalized like a profile's, and refused with ``..``."""

from __future__ import annotations

from pathlib import Path

import pytest

from kctl.errors import ProfileError
from kctl.fleet.loader import load_fleet


def _write(tmp: Path, text: str) -> str:
    path = tmp / "fleet.yaml"
    path.write_text(text)
    return str(path)


def test_a_socket_path_with_dotdot_is_refused_with_the_field(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "kind: fleet\nname: f\nswarm:\n  manager: unix:///var/run/../../tmp/docker.sock\n"
        "  engines: {gpu-2: 'unix:///a/../b.sock', gpu-3: 'ssh://root@gpu-3'}\n",
    )
    with pytest.raises(ProfileError) as info:
        load_fleet(path)
    fix = "write the path itself, without '..'"
    assert info.value.problems == [
        f"{path}: swarm.manager: the socket path contains '..'; {fix} (here "
        "'unix:///tmp/docker.sock', if that is what is meant) "
        "(got 'unix:///var/run/../../tmp/docker.sock')",
        f"{path}: swarm.engines.gpu-2: the socket path contains '..'; {fix} (here "
        "'unix:///b.sock', if that is what is meant) (got 'unix:///a/../b.sock')",
    ]


def test_socket_paths_are_normalized_and_other_endpoints_kept(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "kind: fleet\nname: f\nswarm:\n  manager: unix:///var//run/./docker.sock\n"
        "  engines: {gpu-2: 'unix:///run/d.sock/', gpu-3: 'ssh://root@gpu-3'}\n",
    )
    swarm = load_fleet(path).swarm
    assert swarm.manager == "unix:///var/run/docker.sock"
    assert swarm.engines == {"gpu-2": "unix:///run/d.sock", "gpu-3": "ssh://root@gpu-3"}


def test_a_profile_that_runs_no_image_is_refused_for_a_fleet(tmp_path: Path) -> None:
    from kctl.controller.context import Context
    from kctl.errors import UsageError
    from kctl.fleet.rollout import deploy_fleet

    profile = tmp_path / "local.yaml"
    profile.write_text(
        "description: a host process\nserver:\n  model_path: /models/m\nruntime:\n  kind: local\n"
    )
    fleet = _write(tmp_path, "kind: fleet\nname: f\nreplicas: 1\n")
    with pytest.raises(UsageError, match="runtime.kind is 'local'; a fleet runs images") as info:
        deploy_fleet(Context(state_dir=tmp_path / "state"), str(profile), fleet)
    assert info.value.hint == "set runtime.kind: docker in the profile"
    assert not (tmp_path / "state").exists()  # refused before anything was written
