"""Fleet rollouts on a real two-node Docker Swarm: the real `kctl` CLI (subprocesses) rolls
the simulator serving image out over a 2-replica service, while a client sends requests to
the replicas' ports the whole time. The manager is the engine `scripts/ci-docker.sh` starts;
the worker is a second dockerd on the same machine (:mod:`tests.docker.swarmnode`), which
holds no image until kctl copies the serving images to it (the fleet file's
``swarm.engines``).

One swarm and one fleet serve the whole module (CI time): the first test establishes the
baseline, one replica on each node; every later test starts from it, checks that it does,
and leaves the fleet on the baseline again, except the last (promoted).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from kctl.fleet.probe import Prober
from tests.fleet.harness import Run, Watched, check_served
from tests.fleet.ports import free_range, get_json

from .conftest import PROFILES, REPO, http_status, kctl_env
from .swarmnode import SecondNode

if TYPE_CHECKING:
    from docker import DockerClient

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPLICAS = 2


@dataclass
class Swarm:
    manager: DockerClient
    worker: SecondNode

    def clients(self) -> list[DockerClient]:
        return [self.manager, *([self.worker.client] if self.worker.client else [])]


@pytest.fixture(scope="module")
def swarm(engine: DockerClient) -> Iterator[Swarm]:
    """The engine as the manager of a two-node Swarm (left as it was found afterwards)."""
    state = (engine.info().get("Swarm") or {}).get("LocalNodeState")
    created = state != "active"
    if created:
        engine.swarm.init(advertise_addr="127.0.0.1", listen_addr="127.0.0.1:2377")
    engine.swarm.reload()
    worker = SecondNode(engine, f"kctl-node2-{os.getpid() % 100000}")
    try:
        worker.start()
        worker.join()
        yield Swarm(engine, worker)
    finally:
        worker.close()
        if created:
            engine.swarm.leave(force=True)


class Fleet:
    def __init__(
        self,
        tmp: Path,
        swarm: Swarm,
        name: str = "kt",
        nodes: str = "",
        gpus: int = 0,
        replicas: int = REPLICAS,
    ) -> None:
        self.tmp, self.swarm, self.engine = tmp, swarm, swarm.manager
        self.state = tmp / "state"
        self.first = free_range(REPLICAS + 1)
        self.profiles = tmp / "profiles"
        self.profiles.mkdir(parents=True)
        for src in PROFILES.glob("*.yaml"):
            text = src.read_text().replace("repeats: 2", "repeats: 4")
            text = text.replace("max_extra_repeats: 2", "max_extra_repeats: 8")
            (self.profiles / src.name).write_text(text)
        self.file = tmp / "fleet.yaml"
        self.file.write_text(
            f"kind: fleet\nname: {name}-{os.getpid() % 100000}\nreplicas: {replicas}\ngpus_per_replica: {gpus}\nports: {{first: {self.first}}}\n"
            "rollout: {canary: 1, parallelism: 1, monitor_s: 4, smoke_requests: 2}\n"
            f"swarm: {{engines: {{{swarm.worker.hostname}: '{swarm.worker.socket}'}}{nodes}}}\n"
        )
        self.owner = str((self.state / "fleets").resolve())

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "kctl", "--state-dir", str(self.state), *args]

    def run(self, *args: str, timeout: float = 240) -> Run:
        p = subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=timeout,
                           cwd=REPO, env=kctl_env(self.tmp))  # fmt: skip
        return Run(p.returncode, p.stdout, p.stderr)

    def watch_deploy(self, name: str) -> Watched:
        return Watched(self.argv("deploy", str(self.profiles / f"{name}.yaml"), "--fleet",
                                 str(self.file)), kctl_env(self.tmp), REPO)  # fmt: skip

    def deploy(self, name: str) -> Run:
        return self.run("deploy", str(self.profiles / f"{name}.yaml"), "--fleet", str(self.file))

    def status(self) -> tuple[int, dict[str, Any]]:
        r = self.run("--json", "status", "--fleet", str(self.file))
        return r.code, dict(json.loads(r.out)["result"])

    def endpoints(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", self.first + i) for i in range(REPLICAS)]

    def assert_all_on(self, profile: str) -> dict[str, Any]:
        """Every replica runs ``profile`` (the orchestrator's spec) and the server on each
        replica's port says it is one of that profile's (its flags). Returns the status."""
        code, st = self.status()
        assert code == 0, (st["problems"], st["interrupted"], st["service"], st["replicas"])
        assert [r["profile"] for r in st["replicas"]] == [profile] * REPLICAS, st["replicas"]
        assert all(r["healthy"] for r in st["replicas"]), st["replicas"]
        assert st["canary"] is None and not st["problems"]
        assert st["serving"]["profile_name"] == profile
        eager = profile != "baseline"  # the candidates run eager, the baseline with graphs
        for host, port in self.endpoints():
            assert http_status(port) == 200
            info = get_json(f"http://{host}:{port}/server_info")
            assert info["port"] == port and info["disable_cuda_graph"] is eager, info
        return st


@pytest.fixture(scope="module")
def fleet(swarm: Swarm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    f = Fleet(tmp_path_factory.mktemp("fleet"), swarm)
    try:
        first = f.deploy("baseline")
        assert first.code == 0, first.explain()
        # the worker held no image: kctl copied the baseline's there before creating the service
        assert re.search(
            rf"copied kctl/baseline:\w+ to node\(s\) {swarm.worker.hostname}", first.err
        )
        st = f.assert_all_on("baseline")
        nodes = {r["node"] for r in st["replicas"]}
        assert nodes == {swarm.manager.info()["Name"], swarm.worker.hostname}, st["replicas"]
        listed = {n["hostname"]: (n["state"], n["engine"]) for n in st["nodes"]}
        assert listed[swarm.worker.hostname] == ("ready", swarm.worker.socket), listed
        yield f
    finally:
        _remove_services(f)


def test_a_node_kctl_cannot_put_the_image_on_is_refused_before_any_change(fleet: Fleet) -> None:
    other = fleet.tmp / "no-engines.yaml"
    other.write_text(f"kind: fleet\nname: kt-none-{os.getpid() % 100000}\nreplicas: 2\n"
                     f"ports: {{first: {fleet.first}}}\n")  # fmt: skip
    r = fleet.run("deploy", str(fleet.profiles / "baseline.yaml"), "--fleet", str(other))
    assert r.code == 2, r.explain()
    worker = fleet.swarm.worker.hostname
    assert f"node(s) {worker} may run the fleet's replicas" in r.err, r.err
    assert f"swarm.engines: {{{worker}: ssh://root@{worker}}}" in r.err, r.err
    # an entry that points at another node's engine (the manager's) is refused too
    manager = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    other.write_text(other.read_text() + f"swarm: {{engines: {{{worker}: '{manager}'}}}}\n")
    r = fleet.run("deploy", str(fleet.profiles / "baseline.yaml"), "--fleet", str(other))
    assert r.code == 2, r.explain()
    assert f"swarm.engines.{worker} ({manager}) is not the engine of node {worker}" in r.err
    assert not fleet.engine.services.list(filters={"name": f"kt-none-{os.getpid() % 100000}"})
    fleet.assert_all_on("baseline")


def test_canary_rejected_by_the_gate_leaves_every_replica_on_the_baseline(fleet: Fleet) -> None:
    fleet.assert_all_on("baseline")
    with Prober(fleet.endpoints()) as probe:
        r = fleet.deploy("regression")
    assert r.code == 3, r.explain()
    # measured side by side on a shared 2-core machine the 3x slowdown may come out as
    # INCONCLUSIVE rather than FAIL: either is the gate rejecting it
    assert re.search(r"gate (FAIL|INCONCLUSIVE)", r.err) and "every replica back on" in r.err
    fleet.assert_all_on("baseline")
    check_served(probe.result, min_sent=21, what="a canary rejected by the gate")
    assert probe.result.failed == 0  # the incumbents never moved


def test_candidate_never_healthy_is_rolled_back(fleet: Fleet) -> None:
    fleet.assert_all_on("baseline")
    with Prober(fleet.endpoints()) as probe:
        r = fleet.deploy("crash")
    assert r.code == 3, r.explain()
    assert "the canary failed" in r.err, r.err
    fleet.assert_all_on("baseline")
    check_served(probe.result, min_sent=21, what="a never-healthy candidate")


def _candidate_container(f: Fleet, slot: int) -> Any:
    """The candidate's container of replica ``slot``, on whichever node runs it."""
    wanted = {"label": ["kctl.role=main", "kctl.profile=candidate"]}
    for c in (c for engine in f.swarm.clients() for c in engine.containers.list(filters=wanted)):
        labels = c.labels
        if labels.get("kctl.owner", "").startswith(f.owner) and labels.get(
            "com.docker.swarm.task.name", ""
        ).split(".")[1:2] == [str(slot)]:
            return c
    raise AssertionError(f"no candidate container in slot {slot}")


def test_replica_killed_mid_wave_rolls_every_replica_back(fleet: Fleet) -> None:
    fleet.assert_all_on("baseline")
    with Prober(fleet.endpoints()) as probe:
        run = fleet.watch_deploy("candidate")
        line = run.wait_for(r"replica (\d) .* smoke gate passed")
        slot = int(re.search(r"replica (\d)", line).group(1))  # type: ignore[union-attr]
        _candidate_container(fleet, slot).kill()  # SIGKILL, inside Swarm's monitor window
        r = run.finish()
    assert r.code == 3, r.explain()
    assert "Swarm rolled the update back" in r.err, r.err
    fleet.assert_all_on("baseline")
    check_served(probe.result, min_sent=21, what="an abort after a replica was killed mid-wave")


def test_kctl_sigkilled_mid_wave_then_status_and_rollback_recover(fleet: Fleet) -> None:
    fleet.assert_all_on("baseline")
    with Prober(fleet.endpoints()) as probe:
        run = fleet.watch_deploy("candidate")
        run.wait_for(r"rolling 2 replicas to candidate")
        os.kill(run.proc.pid, signal.SIGKILL)
        run.finish()
        code, st = fleet.status()
        assert code == 4, st
        assert st["interrupted"] and st["problems"], st
        assert "kctl rollback --fleet" in st["hint"]
        r = fleet.run("rollback", "--fleet", str(fleet.file))
    assert r.code == 0, r.explain()
    assert "closed interrupted rollout" in r.err
    fleet.assert_all_on("baseline")
    check_served(
        probe.result, min_sent=21, what="a rollout whose kctl was killed, then rolled back"
    )
    hist = json.loads(fleet.run("--json", "history", "--fleet", str(fleet.file)).out)["result"]
    assert [h["status"] for h in hist[:2]] == ["promoted", "interrupted"], hist[:2]


def test_sigterm_mid_wave_rolls_every_replica_back(fleet: Fleet) -> None:
    """SIGTERM is an abort, not a kill: kctl rolls the fleet back first, then exits 3."""
    fleet.assert_all_on("baseline")
    with Prober(fleet.endpoints()) as probe:
        run = fleet.watch_deploy("candidate")
        run.wait_for(r"rolling 2 replicas to candidate")
        run.proc.send_signal(signal.SIGTERM)
        r = run.finish()
    assert r.code == 3, r.explain()
    assert "interrupted by SIGTERM; rolling the fleet back" in r.err, r.err
    assert "every replica back on" in r.err, r.err
    fleet.assert_all_on("baseline")
    check_served(probe.result, min_sent=21, what="a rollout aborted by SIGTERM")
    hist = json.loads(fleet.run("--json", "history", "--fleet", str(fleet.file)).out)["result"]
    assert hist[0]["status"] == "rejected", hist[0]


def test_promoted_rollout_moves_every_replica_and_serves_throughout(fleet: Fleet) -> None:
    fleet.assert_all_on("baseline")
    with Prober(fleet.endpoints()) as probe:
        r = fleet.deploy("candidate")
    assert r.code == 0, r.explain()
    assert "PROMOTED" in r.out and r.err.count("smoke gate passed") == REPLICAS
    fleet.assert_all_on("candidate")
    check_served(probe.result, min_sent=21, what="a promoted rollout")


def test_gpus_are_reserved_per_replica_and_passed_to_each_server(
    fleet: Fleet, tmp_path: Path
) -> None:
    """The worker advertises GPU-0 and GPU-1: two replicas of one GPU each get one each,
    passed to the server as CUDA_VISIBLE_DEVICES; a further replica finds no GPU left and
    the rollout fails at once with Swarm's reason."""
    worker = fleet.swarm.worker
    on_worker = f", nodes: [{worker.hostname}]"
    f = Fleet(tmp_path / "two", fleet.swarm, name="kt-gpu", nodes=on_worker, gpus=1)
    more = Fleet(tmp_path / "one", fleet.swarm, name="kt-gpu-more", nodes=on_worker, gpus=1,
                 replicas=1)  # fmt: skip
    try:
        r = f.deploy("baseline")
        assert r.code == 0, r.explain()
        f.assert_all_on("baseline")
        assert worker.client is not None
        seen = []
        for c in worker.client.containers.list(filters={"label": "kctl.role=main"}):
            if c.labels.get("kctl.owner", "").startswith(f.owner):
                # the server runs under the container's init: read every process's environment
                env = c.exec_run(["sh", "-c", "cat /proc/[0-9]*/environ"]).output.decode()
                seen += sorted({e.split("=", 1)[1] for e in env.split("\0")
                                if e.startswith("CUDA_VISIBLE_DEVICES=")})  # fmt: skip
        assert sorted(seen) == ["0", "1"], seen
        r = more.deploy("baseline")
        assert r.code == 3 and "Swarm finds no node for 1 replica(s)" in r.err, r.explain()
        assert "insufficient resources" in r.err, r.err
        assert not more.engine.services.list(
            filters={"name": f"kt-gpu-more-{os.getpid() % 100000}"}
        )
    finally:
        _remove_services(f)
        _remove_services(more)


def test_secrets_reach_the_replicas_as_docker_secrets(
    fleet: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A profile with a token and an API key as references: kctl creates the Docker
    secrets at deploy time, each replica's start wrapper reads the mounted files (the
    token into the server's environment, the key's file as --config), the replicas answer
    401 without the key, kctl's own gates and verification send it, and the service
    spec Swarm keeps holds neither value."""
    token, key = "hf_swarmTOKEN5e1f07", "sk-swarmKEY90aa3c"
    monkeypatch.setenv("KCTL_TEST_HF_TOKEN", token)  # kctl_env passes this environment on
    key_file = tmp_path / "api-key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    f = Fleet(tmp_path / "sec", fleet.swarm, name="kt-sec")
    data = yaml.safe_load((f.profiles / "baseline.yaml").read_text())
    data["server"]["secrets"] = {"HF_TOKEN": {"env": "KCTL_TEST_HF_TOKEN"}}
    data["server"]["api_key"] = {"file": str(key_file)}
    (f.profiles / "keyed.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    name = f"kt-sec-{os.getpid() % 100000}"
    try:
        r = f.deploy("keyed")
        assert r.code == 0 and "ESTABLISHED" in r.out, r.explain()
        status = f.run("status", "--fleet", str(f.file))  # verification sends the key
        assert status.code == 0, status.explain()
        for port in (f.first, f.first + 1):
            assert http_status(port) == 200  # /health is open
            assert http_status(port, "/get_model_info") == 401
        (svc,) = f.engine.services.list(filters={"name": name})
        spec = json.dumps(svc.attrs)
        assert token not in spec and key not in spec
        mounted = svc.attrs["Spec"]["TaskTemplate"]["ContainerSpec"]["Secrets"]
        assert {m["File"]["Name"] for m in mounted} == {"kctl-env-HF_TOKEN", "kctl-sglang-config"}
        assert all(m["SecretName"].startswith(f"kctl-{name}-") for m in mounted), mounted
        owned = f.engine.secrets.list(filters={"label": f"kctl.fleet={name}"})
        assert {s.name for s in owned} == {m["SecretName"] for m in mounted}
        seen = []
        for c in f.engine.containers.list(filters={"label": "kctl.role=main"}):
            if c.labels.get("kctl.owner", "").startswith(f.owner):
                env = c.exec_run(["sh", "-c", "cat /proc/[0-9]*/environ"]).output.decode()
                argv = c.exec_run(["sh", "-c", "cat /proc/[0-9]*/cmdline"]).output.decode()
                seen.append((f"HF_TOKEN={token}" in env.split("\0"), key in argv,
                             "/run/secrets/kctl-sglang-config" in argv))  # fmt: skip
        assert seen and all(s == (True, False, True) for s in seen), seen
        for text in (r.out, r.err, status.out, status.err):
            assert token not in text and key not in text
    finally:
        _remove_services(f)
        time.sleep(2)  # Swarm refuses to remove a secret a task still uses
        for secret in f.engine.secrets.list(filters={"label": f"kctl.fleet={name}"}):
            with contextlib.suppress(Exception):
                secret.remove()


def _remove_services(f: Fleet) -> None:
    for svc in f.engine.services.list(filters={"label": "kctl.managed=true"}):
        if svc.attrs["Spec"]["Labels"].get("kctl.owner", "").startswith(f.owner):
            svc.remove()


def test_a_node_down_mid_wave_pauses_the_rollout_then_rollback_recovers(
    fleet: Fleet, tmp_path: Path
) -> None:
    """Runs last: it kills the worker's dockerd. A fleet placed on the worker alone (so Swarm
    has nowhere else to move its replicas) loses the node as its waves begin: kctl pauses
    (exit 4), rolls nothing back, and says so; the replicas keep serving (their containers
    outlive the daemon, as on a real host). With the node back, `kctl rollback --fleet`
    returns every replica to the known-good."""
    _remove_services(fleet)  # the module's fleet: one of its replicas is on the worker
    worker = fleet.swarm.worker
    f = Fleet(tmp_path, fleet.swarm, name="kt-down", nodes=f", nodes: [{worker.hostname}]")
    try:
        first = f.deploy("baseline")
        assert first.code == 0, first.explain()
        st = f.assert_all_on("baseline")
        assert {r["node"] for r in st["replicas"]} == {worker.hostname}, st["replicas"]
        with Prober(f.endpoints()) as probe:
            run = f.watch_deploy("candidate")
            run.wait_for(r"rolling 2 replicas to candidate")
            killed = time.monotonic()
            worker.kill()
            r = run.finish()
        print(
            f"kctl paused {time.monotonic() - killed:.1f} s after the worker's dockerd was killed"
        )
        assert r.code == 4, r.explain()
        assert (
            f"node(s) {worker.hostname} went Down" in r.err and "nothing was rolled back" in r.err
        )
        check_served(probe.result, min_sent=21, what="a rollout paused for a node Down")
        code, st = f.status()
        assert code == 4 and st["interrupted"], st
        worker.start()
        print(f"worker Ready again {worker.wait_state('ready'):.1f} s after its restart")
        back = f.run("rollback", "--fleet", str(f.file))
        assert back.code == 0, back.explain()
        f.assert_all_on("baseline")
        hist = json.loads(f.run("--json", "history", "--fleet", str(f.file)).out)["result"]
        assert [h["status"] for h in hist[:2]] == ["promoted", "aborted"], hist[:2]
    finally:
        _remove_services(f)
