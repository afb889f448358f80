"""DockerRuntime against a real engine, running the simulator serving image over real HTTP
on 127.0.0.1 (host network)."""

from __future__ import annotations

import dataclasses
import json
import socket
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kctl.errors import PreflightFailed, RuntimeUnavailable
from kctl.image import ensure_image
from kctl.launch import launch_spec
from kctl.profile.model import Profile, VolumeSpec
from kctl.runtime.base import LaunchSpec
from kctl.runtime.docker.preflight import docker_preflight

from .conftest import load, wait_http_ok

if TYPE_CHECKING:
    from docker import DockerClient

    from kctl.runtime.docker import DockerRuntime

pytestmark = pytest.mark.docker


def _spec(engine: DockerClient, profile: Profile, deployment_id: str, **env: str) -> LaunchSpec:
    tag = ensure_image(
        profile, repo_root=Path("."), state_dir=Path(profile.source).parent, client=engine
    )
    spec = launch_spec(profile, deployment_id, simulate=False, image=tag)
    if env:
        spec = dataclasses.replace(spec, env=tuple(sorted({**dict(spec.env), **env}.items())))
    return spec


def test_start_health_stop_reuse_prune(
    engine: DockerClient, runtime: DockerRuntime, profiles: Path
) -> None:
    profile = load(profiles / "baseline.yaml")
    port = profile.server.port
    first = runtime.start(_spec(engine, profile, "d1"))
    assert first.extra["reused"] == "false" and first.port == port
    wait_http_ok(runtime, first, port)
    assert runtime.state(first).running
    assert runtime.port_holder(port) == f"kctl container {first.extra['name']} (deployment d1)"
    assert [i.ref for i in runtime.running()] == [first.ref]
    # the server got the profile's flags through the unchanged sglang command
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5) as r:
        info = json.load(r)
    assert info["attention_backend"] == "triton" and info["port"] == port
    assert "The server is fired up and ready to roll!" in runtime.logs(first, tail=50)

    runtime.stop(first, 5)
    stopped = runtime.state(first)
    assert not stopped.running and stopped.exit_code is not None
    assert engine.containers.get(first.ref).status == "exited"  # kept for rollback
    assert runtime.port_holder(port) is None
    runtime.stop(first, 5)  # idempotent

    # a later deployment of the same server restarts the stopped container (fast rollback)
    again = runtime.start(_spec(engine, profile, "d2"))
    assert again.ref == first.ref and again.extra["reused"] == "true"
    assert again.deployment_id == "d2" and again.extra["created_for"] == "d1"
    wait_http_ok(runtime, again, port)
    runtime.stop(again, 5)

    # a different server (other env) gets its own container
    other = runtime.start(_spec(engine, profile, "d3", KCTL_SIM_SLOWDOWN="2"))
    assert other.ref != first.ref and other.extra["reused"] == "false"
    wait_http_ok(runtime, other, port)
    runtime.stop(other, 5)
    third = runtime.start(_spec(engine, profile, "d4", KCTL_SIM_SLOWDOWN="3"))
    runtime.stop(third, 5)

    # retention: keep the newest stopped one, never the protected (known-good) one
    removed = runtime.prune(1, protect=[first.ref])
    assert removed == [other.extra["name"]]
    assert {
        c.id
        for c in engine.containers.list(all=True, filters={"label": f"kctl.owner={runtime.owner}"})
    } == {
        first.ref,
        third.ref,
    }
    assert runtime.gc(0, protect=["d1"]) == [third.extra["name"]]


def test_prune_and_running_never_touch_foreign_containers(
    engine: DockerClient, runtime: DockerRuntime, profiles: Path
) -> None:
    from .conftest import BASE_IMAGE

    # not labelled kctl.managed, even though its name looks like kctl's
    foreign = engine.containers.run(
        BASE_IMAGE,
        ["sleep", "60"],
        detach=True,
        name=f"kctl-foreign-{time.time_ns()}",
        init=True,
        labels={"kctl.owner": runtime.owner or ""},
        network_mode="none",
    )
    try:
        foreign_stopped = engine.containers.create(
            BASE_IMAGE, ["true"], labels={"kctl.owner": runtime.owner or ""}, network_mode="none"
        )
        try:
            assert runtime.running() == []
            assert runtime.prune(0) == []
            foreign.reload()
            assert foreign.status == "running"
            engine.containers.get(foreign_stopped.id)  # still there
        finally:
            foreign_stopped.remove(force=True)
    finally:
        foreign.remove(force=True)


@pytest.mark.parametrize("fault", ["crash_at_start", "crash_while_loading"])
def test_crash_in_container_is_seen_fast_with_exit_code_and_log_tail(
    engine: DockerClient, runtime: DockerRuntime, profiles: Path, fault: str
) -> None:
    profile = load(profiles / "baseline.yaml")
    inst = runtime.start(_spec(engine, profile, "crash", KCTL_SIM_FAULT=fault))
    start = time.monotonic()
    while runtime.state(inst).running and time.monotonic() - start < 15:
        time.sleep(0.05)
    state = runtime.state(inst)
    assert not state.running, "the crashing server is still running"
    assert time.monotonic() - start < 10
    assert state.exit_code not in (None, 0)
    assert state.detail.startswith(f"exited with code {state.exit_code}")
    assert not state.oom_killed and state.restart_count == 0
    assert runtime.logs(inst, tail=20).strip(), "no log tail from the crashed container"


def test_docker_preflight_on_a_real_engine(
    engine: DockerClient, runtime: DockerRuntime, profiles: Path, tmp_path: Path
) -> None:
    profile = load(profiles / "baseline.yaml")
    port = profile.server.port
    checks = docker_preflight(profile, runtime=runtime)
    assert [c.name for c in checks] == ["docker", "port", "gpu-arch"]

    # a foreign listener on the port fails preflight; nothing was started
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        with pytest.raises(PreflightFailed, match=rf"port {port} is taken by a process listening"):
            docker_preflight(profile, runtime=runtime)

    # the deployment being replaced may hold the port
    current = runtime.start(_spec(engine, profile, "current"))
    wait_http_ok(runtime, current, port)
    docker_preflight(profile, runtime=runtime, serving=current)
    with pytest.raises(PreflightFailed, match="is taken by kctl container"):
        docker_preflight(profile, runtime=runtime, serving=None)

    missing = dataclasses.replace(
        profile,
        runtime=dataclasses.replace(
            profile.runtime, volumes=(VolumeSpec(str(tmp_path / "no-such-model"), "/models"),)
        ),
    )
    with pytest.raises(
        PreflightFailed, match=r"runtime\.volumes\[0\]\.host: .*no-such-model does not exist"
    ):
        docker_preflight(missing, runtime=runtime, serving=current)


def test_unreachable_engine_is_a_clear_exit_5(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from kctl.runtime.docker import DockerRuntime, connect

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    with pytest.raises(RuntimeUnavailable) as err:
        connect(timeout_s=5)
    assert err.value.exit_code == 5
    assert "start dockerd / check DOCKER_HOST / permission on /var/run/docker.sock" in str(
        err.value
    )
    with pytest.raises(RuntimeUnavailable):
        DockerRuntime().check_available()


def test_state_reports_oom_kill_and_restarts(engine: DockerClient, runtime: DockerRuntime) -> None:
    """What health's fail-fast reads: real inspect data of an OOM-killed container and of
    one the engine restarted (kctl itself sets no restart policy; an operator might)."""
    from kctl.runtime.base import Instance

    from .conftest import BASE_IMAGE

    labels = {"kctl.managed": "true", "kctl.owner": runtime.owner or "", "kctl.deployment": "x"}
    hog = engine.containers.run(
        BASE_IMAGE, ["python3", "-c", "x = bytearray(512 << 20); import time; time.sleep(30)"],
        detach=True, mem_limit="64m", memswap_limit="64m", network_mode="none", labels=labels,
    )  # fmt: skip
    flaky = engine.containers.run(
        BASE_IMAGE, ["python3", "-c", "raise SystemExit(3)"], detach=True, network_mode="none",
        restart_policy={"Name": "on-failure", "MaximumRetryCount": 2}, labels=labels,
    )  # fmt: skip
    oom = Instance(runtime="docker", deployment_id="x", ref=hog.id)
    restarted = Instance(runtime="docker", deployment_id="x", ref=flaky.id)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (
        runtime.state(oom).running or runtime.state(restarted).restart_count < 2
        or runtime.state(restarted).running
    ):  # fmt: skip
        time.sleep(0.1)
    state = runtime.state(oom)
    assert (state.running, state.oom_killed, state.exit_code) == (False, True, 137)
    assert state.detail == "OOM killed (exit code 137)"
    state = runtime.state(restarted)
    assert (state.running, state.exit_code, state.restart_count) == (False, 3, 2)
    assert state.detail == "exited with code 3, restarted 2 times"
    gone = Instance(runtime="docker", deployment_id="x", ref="0" * 64)
    assert runtime.state(gone).detail == "container not found"
    assert runtime.logs(gone) == ""
