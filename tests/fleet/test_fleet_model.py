"""The fleet's pure parts: the fleet file loader, the Swarm service spec, the rollout
plan, replica identity checks and the waits, driven by recorded orchestrator views."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kctl.errors import FleetPaused, HealthFailed, ProfileError
from kctl.fleet.loader import load_fleet
from kctl.fleet.plan import Observed, plan_fleet_deploy, plan_fleet_rollback
from kctl.fleet.service import Placement, service_spec
from kctl.fleet.verify import replica_problems
from kctl.fleet.view import Node, Replica, ServiceView
from kctl.fleet.watch import RolloutFailed, Waiter
from kctl.launch import launch_spec
from kctl.profile.loader import load_profile

REPO = Path(__file__).resolve().parents[2]
DOCKER_PROFILES = REPO / "tests" / "docker" / "profiles"


def write(tmp: Path, text: str) -> str:
    path = tmp / "fleet.yaml"
    path.write_text(text)
    return str(path)


def test_the_shipped_example_fleet_loads() -> None:
    fleet = load_fleet(REPO / "fleets" / "example.yaml")
    assert (fleet.name, fleet.replicas, fleet.min_healthy) == ("kimi-k26", 4, 3)
    assert fleet.port(3) == 30003 and fleet.port(0, spare=True) == 30004


def test_every_problem_is_named_with_file_and_field(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "kind: flet\nname: Bad_Name\nreplicas: 0\nswarm: {node_label: nolabel}\n"
        "rollout: {paralelism: 2}\nsource: x\n",
    )
    with pytest.raises(ProfileError) as err:
        load_fleet(path)
    assert err.value.exit_code == 2
    assert err.value.problems == [
        f"{path}: source: set by kctl, not by the file; remove it (got 'x')",
        f"{path}: kind: must be 'fleet': a fleet file says so in its first line (got 'flet')",
        f"{path}: name: must be a lower-case DNS label of at most 40 characters, e.g. 'kimi-k26' (got 'Bad_Name')",
        f"{path}: replicas: must be a positive integer (got 0)",
        f"{path}: swarm.node_label: must be a node label 'key=value', e.g. 'gpu=pro6000' (got 'nolabel')",
        f"{path}: rollout.paralelism: unknown key; did you mean 'parallelism'? (got 2)",
    ]
    assert str(err.value).startswith("6 problems in fleet file")


def test_a_whole_file_rule_and_bad_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, "kind: fleet\nname: a\nreplicas: 2\nrollout: {canary: 2}\n")
    with pytest.raises(ProfileError, match=r"rollout.canary \(2\) must be below replicas"):
        load_fleet(path)
    path = write(tmp_path, "kind: fleet\nname: [\n")
    with pytest.raises(ProfileError, match="invalid YAML"):
        load_fleet(path)
    with pytest.raises(ProfileError, match="must be a mapping with kind: fleet"):
        load_fleet(write(tmp_path, "- a\n"))


def _pair() -> tuple[Any, Any]:
    return load_profile(DOCKER_PROFILES / "candidate.yaml"), load_profile(
        DOCKER_PROFILES / "baseline.yaml"
    )


def test_service_spec_is_the_one_host_launch_on_host_networking(tmp_path: Path) -> None:
    fleet = load_fleet(REPO / "fleets" / "example.yaml")
    cand, _ = _pair()
    launch = launch_spec(cand, "d-1", simulate=False, image="kctl/candidate:abc")
    spec = service_spec(fleet, cand, launch, owner="/s", placement=Placement.of(fleet))
    task = spec["TaskTemplate"]
    c = task["ContainerSpec"]
    assert spec["Name"] == "kimi-k26" and spec["Mode"] == {"Replicated": {"Replicas": 4}}
    # the launch kctl renders on one host, bound where the fleet file says (bind: 0.0.0.0)
    at = launch.argv.index("--host") + 1
    assert launch.argv[at] == "127.0.0.1" and fleet.bind == "0.0.0.0"
    assert c["Args"] == [*launch.argv[:at], "0.0.0.0", *launch.argv[at + 1 :]]
    assert c["Image"] == "kctl/candidate:abc"
    assert "KCTL_SLOT={{.Task.Slot}}" in c["Env"] and "KCTL_PORT_BASE=30000" in c["Env"]
    assert (
        c["Healthcheck"]["Test"][:3] == ["CMD", "python3", "-c"]
        and "/health" in c["Healthcheck"]["Test"][3]
    )
    assert task["Networks"] == [{"Target": "host"}]
    assert task["Placement"]["Constraints"] == ["node.labels.kctl.fleet==kimi-k26"]
    assert task["Resources"]["Reservations"]["GenericResources"] == [
        {"DiscreteResourceSpec": {"Kind": "NVIDIA-GPU", "Value": 8}}
    ]
    assert (
        spec["UpdateConfig"]["Order"] == "stop-first"
        and spec["UpdateConfig"]["FailureAction"] == "rollback"
    )
    canary = service_spec(fleet, cand, launch, role="canary", owner="/s")
    assert (
        canary["Name"] == "kimi-k26-canary"
        and "KCTL_PORT_BASE=30004" in canary["TaskTemplate"]["ContainerSpec"]["Env"]
    )
    assert canary["TaskTemplate"]["RestartPolicy"]["Condition"] == "none"
    assert service_spec(fleet, cand, launch, owner="/s") == spec  # pure


def test_without_bind_replicas_bind_the_profiles_own_address(tmp_path: Path) -> None:
    fleet = replace(load_fleet(REPO / "fleets" / "example.yaml"), bind=None)
    cand, _ = _pair()
    launch = launch_spec(cand, "d-1", simulate=False, image="kctl/candidate:abc")
    spec = service_spec(fleet, cand, launch, owner="/s")
    assert spec["TaskTemplate"]["ContainerSpec"]["Args"] == list(launch.argv)


def test_bind_must_be_an_address(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"fleet.yaml: bind: must be an address to bind"):
        load_fleet(write(tmp_path, "kind: fleet\nname: f\nbind: '0.0.0.0 && id'\n"))


def test_placement_by_hostnames_excludes_the_other_nodes() -> None:
    fleet = load_fleet(REPO / "fleets" / "example.yaml")
    two = replace(fleet, swarm=replace(fleet.swarm, node_label=None, nodes=("a", "b")))
    assert Placement.of(two, ("a", "b", "c", "d")).constraints == (
        "node.hostname!=c",
        "node.hostname!=d",
    )
    one = replace(two, swarm=replace(two.swarm, nodes=("a",)))
    assert Placement.of(one).constraints == ("node.hostname==a",)


def test_plans() -> None:
    fleet = load_fleet(REPO / "fleets" / "example.yaml")
    cand, base = _pair()
    fresh = plan_fleet_deploy(fleet, cand, base, Observed(None))
    assert [s.name for s in fresh.steps] == [
        "create-service", "wait-fleet", "verify-fleet", "record-serving",
        "start-canary", "wait-canary", "canary-gate",
        "roll-waves", "remove-canary", "verify-fleet", "record-serving",
    ]  # fmt: skip
    assert [s.name for s in fresh.revert] == [
        "remove-canary",
        "roll-back",
        "wait-fleet",
        "verify-fleet",
    ]
    live = plan_fleet_deploy(fleet, cand, base, Observed("baseline", base.content_hash))
    assert live.steps[0].name == "start-canary" and live.to_dict()["steps"][0]["port"] == 30004
    established = plan_fleet_deploy(fleet, base, None, Observed(None))
    assert [s.name for s in established.revert] == ["remove-canary", "roll-back"]
    assert [s.name for s in plan_fleet_rollback("baseline").steps] == [
        "remove-canary", "roll-back", "wait-fleet", "verify-fleet",
    ]  # fmt: skip


def replica(
    slot: int, dep: str = "d-new", state: str = "running", node_state: str = "ready", **kw: Any
) -> Replica:
    base = dict(
        slot=slot, task=f"t{slot}-{dep}", node="n1", node_state=node_state, state=state,
        desired="running", deployment=dep, profile="candidate", profile_hash="h", image="img",
        args=("a",), host="127.0.0.1", port=30000 + slot,
    )  # fmt: skip
    base.update(kw)
    return Replica(**base)  # type: ignore[arg-type]


def view(*replicas: Replica, dep: str = "d-new", update: str = "updating") -> ServiceView:
    return ServiceView(
        name="f", id="s", version=1, deployment=dep, profile="candidate", profile_hash="h",
        image="img", desired_replicas=2, update_state=update, replicas=replicas,
    )  # fmt: skip


class Recorded:
    """A driver answering from a list of recorded views, one per look."""

    name = "recorded"
    orchestrator = "Swarm"

    def __init__(self, views: list[ServiceView], nodes: list[Node]) -> None:
        self.views = views
        self.node_list = nodes

    def service(self, role: str) -> ServiceView | None:
        return self.views.pop(0) if len(self.views) > 1 else self.views[0]

    def logs(self, role: str, tail: int) -> str:
        return ""

    def nodes(self) -> list[Node]:
        return self.node_list


def waiter(views: list[ServiceView], nodes: list[Node] | None = None) -> Waiter:
    clock = iter(range(1000))
    driver = Recorded(views, nodes or [])
    return Waiter(driver, lambda: float(next(clock)), lambda s: None)  # type: ignore[arg-type]


def test_waves_call_back_once_per_moved_replica_then_finish() -> None:
    moved: list[int] = []
    views = [
        view(replica(1, "d-old"), replica(2, "d-old")),
        view(replica(1), replica(2, "d-old")),
        view(replica(1), replica(2, "d-old")),
        view(replica(1), replica(2), update="completed"),
    ]
    waiter(views).waves("d-new", 100, lambda r: moved.append(r.slot))
    assert moved == [1, 2]


def test_a_swarm_rollback_fails_the_waves_and_a_node_down_pauses_them() -> None:
    rolled = [
        view(replica(1), replica(2, "d-old")),
        view(replica(1, "d-old"), replica(2, "d-old"), dep="d-old", update="rollback_started"),
    ]
    with pytest.raises(RolloutFailed, match="Swarm rolled the update back"):
        waiter(rolled).waves("d-new", 100, lambda r: None)
    down = [view(replica(1), replica(2, "d-old", state="running", node_state="down"))]
    with pytest.raises(FleetPaused, match="n1 went Down"):
        waiter(down).waves("d-new", 100, lambda r: None)
    # the node of slot 2 was lost and Swarm is placing slot 2 elsewhere: still a pause
    moving = [
        view(replica(1, "d-old", node="n2"), replica(2, "d-old")),
        view(replica(1), replica(2, state="pending", node="")),
    ]
    lost = [Node("n1", "ready", "active", ""), Node("n2", "down", "active", "")]
    with pytest.raises(FleetPaused, match=r"node\(s\) n2 went Down"):
        waiter(moving, lost).waves("d-new", 100, lambda r: None)
    stuck = [view(replica(1), replica(2, state="starting"))]
    with pytest.raises(RolloutFailed, match="did not finish within 5 s"):
        waiter(stuck).waves("d-new", 5, lambda r: None)


def test_unplaceable_replicas_fail_at_once() -> None:
    pending = [
        view(
            replica(
                1, state="pending", error="no suitable node (insufficient resources on 1 node)"
            ),
            replica(2, state="pending", error="no suitable node (x)"),
        )
    ]
    with pytest.raises(HealthFailed, match="Swarm finds no node for 2 replica"):
        waiter(pending).fleet("d-new", 100, "baseline")


def test_replica_problems_name_each_mismatch() -> None:
    cand, _ = _pair()
    launch = launch_spec(cand, "d-new", simulate=False, image="img")
    fleet = load_fleet(REPO / "fleets" / "example.yaml")
    spec = service_spec(fleet, cand, launch, owner="/s")
    good = dict(
        profile_hash=cand.content_hash, args=tuple(spec["TaskTemplate"]["ContainerSpec"]["Args"])
    )
    v = view(replica(1, **good), replica(2, "d-old", image="other", **{**good, "args": ("x",)}))
    problems = replica_problems(cand, spec, v)
    assert problems == [
        "replica 2 on n1 runs candidate (d-old), not candidate (d-new)",
        "replica 2 on n1 runs image other, not img",
        "replica 2 on n1 runs other flags: x",
    ]
    assert replica_problems(cand, spec, view(replica(1, **good), replica(2, **good))) == []


def _node(id_: str, host: str, state: str = "ready", avail: str = "active", **labels: str) -> Node:
    return Node(host, state, avail, "", id=id_, labels=tuple(sorted(labels.items())))


def test_images_go_to_every_node_that_may_run_a_replica(tmp_path: Path) -> None:
    from kctl.fleet.images import eligible, missing_engines

    fleet = load_fleet(write(
        tmp_path,
        "kind: fleet\nname: a\nswarm:\n  node_label: gpu=pro6000\n"
        "  engines: {gpu-2: 'ssh://root@gpu-2'}\n",
    ))  # fmt: skip
    assert fleet.swarm.engines == {"gpu-2": "ssh://root@gpu-2"}
    nodes = [
        _node("n1", "gpu-1", gpu="pro6000"),
        _node("n2", "gpu-2", gpu="pro6000"),
        _node("n3", "gpu-3", gpu="pro6000"),
        _node("n4", "gpu-4", state="down", gpu="pro6000"),
        _node("n5", "gpu-5", avail="drain", gpu="pro6000"),
        _node("n6", "cpu-1"),
    ]
    ok = eligible(nodes, fleet.swarm)
    assert [n.hostname for n in ok] == ["gpu-1", "gpu-2", "gpu-3"]
    # gpu-1 built the image, gpu-2 has an engine entry; gpu-3 has neither: refused with the fix
    err = missing_engines(ok, fleet.swarm, {"n1"}, fleet.source)
    assert err is not None and err.exit_code == 2
    assert f"{fleet.source}: node(s) gpu-3 may run the fleet's replicas" in err.message
    assert "swarm.engines: {gpu-3: ssh://root@gpu-3}" in (err.hint or "")
    assert missing_engines(ok[:2], fleet.swarm, {"n1"}, fleet.source) is None
    only = replace(fleet.swarm, nodes=("gpu-1",))
    assert [n.hostname for n in eligible(nodes, only)] == ["gpu-1"]


def test_an_engine_entry_must_be_an_endpoint_string(tmp_path: Path) -> None:
    path = write(tmp_path, "kind: fleet\nname: a\nswarm: {engines: {gpu-2: 7}}\n")
    with pytest.raises(ProfileError) as err:
        load_fleet(path)
    assert err.value.problems == [f"{path}: swarm.engines.gpu-2: must be a string (got 7)"]


def test_a_node_engine_that_does_not_answer_is_a_precondition(tmp_path: Path) -> None:
    from kctl.errors import RuntimeUnavailable
    from kctl.fleet.images import connect_engine

    with pytest.raises(RuntimeUnavailable) as err:
        connect_engine(f"unix://{tmp_path}/none.sock")
    assert err.value.exit_code == 5
    assert f"the Docker engine unix://{tmp_path}/none.sock (fleet file swarm.engines)" in str(
        err.value
    )


def test_plan_on_a_swarm_fleet_shows_the_service_spec_and_asks_no_one(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    path = write(tmp_path, "kind: fleet\nname: a\nreplicas: 3\nswarm:\n  nodes: [gpu-1, gpu-2]\n"
                 "  engines: {gpu-2: 'ssh://root@gpu-2'}\n")  # fmt: skip
    state = tmp_path / "state"
    p = subprocess.run(
        [sys.executable, "-m", "kctl", "--state-dir", str(state), "--json", "plan",
         str(REPO / "profiles" / "kdtree-graphs.yaml"), "--fleet", path],
        capture_output=True, text=True, timeout=60, cwd=REPO, env={**os.environ, "DOCKER_HOST": "unix:///nonexistent"},
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)["result"]
    assert plan["orchestrator"] == "Swarm" and plan["image"].startswith("kctl/kdtree-graphs:")
    assert (
        plan["steps"][0] == "create the fleet's service: 3 replicas of the baseline triton-graphs"
    )
    assert plan["node_engines"] == {"gpu-2": "ssh://root@gpu-2"}
    assert "swarm.nodes ['gpu-1', 'gpu-2']" in plan["placement_note"]
    spec = plan["service_spec"]
    assert spec["TaskTemplate"]["ContainerSpec"]["Image"] == plan["image"]
    assert spec["Mode"]["Replicated"]["Replicas"] == 3
    assert not state.exists()


def test_a_fleet_is_settled_only_once_the_orchestrator_is_done_replacing_tasks() -> None:
    """Swarm may still replace a slot after every replica looked right: an update that has
    not touched a slot yet, or a rollback under way. The waits and the verify must not stop
    there."""
    both = (replica(1), replica(2))
    assert not view(*both, update="updating").settled_on("d-new")
    assert not view(*both, update="rollback_started").settled_on("d-new")
    assert view(*both, update="completed").settled_on("d-new")
    assert view(*both, update="rollback_completed").settled_on("d-new")
    assert view(*both, update="").settled_on("d-new")  # never updated: a new service
