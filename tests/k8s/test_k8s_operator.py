"""What a cluster operator checks before applying the objects: a disruption budget that
keeps the rollout's floor, Guaranteed pods, the SGLang Model Gateway with its discovery
and the RBAC it needs, the smoke Job where its image is, and least privilege (network
policy, security contexts, no shared process namespace beyond the serving pod's need,
read-only model mounts, no hostPath created on the node)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kctl.errors import ProfileError
from kctl.fleet.loader import load_fleet
from kctl.fleet.spec import ClientSpec, FleetSpec, RolloutSpec, RouterSpec
from kctl.k8s import names
from kctl.k8s.render import Rendered, render
from kctl.k8s.target import NotExpressible
from kctl.profile.loader import load_profile
from tests.k8s.conftest import EXAMPLE, KDTREE, MULTINODE, TRITON
from tests.k8s.schemas import validate

ROUTER_HELP = Path(__file__).parent / "data" / "sglang-router-0.3.2-help.txt"
SERVING = {"app.kubernetes.io/name": "sglang", "app.kubernetes.io/instance": "kimi-k26"}


def _k8s(fleet: FleetSpec, **changes: Any) -> FleetSpec:
    return dataclasses.replace(fleet, k8s=dataclasses.replace(fleet.k8s, **changes))


def _all(rendered: Rendered, kind: str) -> list[dict[str, Any]]:
    return [o for o in rendered.objects if o["kind"] == kind]


def _one(rendered: Rendered, kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in _all(rendered, kind) if o["metadata"]["name"] == name]
    return found


def _templates(rendered: Rendered) -> Iterator[tuple[str, dict[str, Any]]]:
    for obj in rendered.objects:
        for path, template in names.pod_templates(obj):
            yield f"{obj['kind']}/{obj['metadata']['name']}:{path}", template


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.fixture(scope="module")
def single() -> Rendered:
    return render(load_profile(KDTREE), load_fleet(EXAMPLE), with_argo=True)


@pytest.fixture(scope="module")
def multi() -> Rendered:
    return render(load_profile(KDTREE), load_fleet(MULTINODE))


# -- the disruption budget ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("replicas", "min_healthy", "parallelism", "allowed"),
    [(4, 3, 1, 1), (4, 2, 1, 2), (4, None, 2, 2), (4, 4, 1, 0), (1, None, 1, 1)],
)
def test_the_disruption_budget_keeps_the_rollout_floor(
    replicas: int, min_healthy: int | None, parallelism: int, allowed: int
) -> None:
    fleet = dataclasses.replace(
        load_fleet(EXAMPLE),
        replicas=replicas,
        rollout=RolloutSpec(canary=1, parallelism=parallelism, min_healthy=min_healthy),
    )
    rendered = render(load_profile(TRITON), fleet)
    pdb = _one(rendered, "PodDisruptionBudget", "kimi-k26")
    assert pdb["spec"]["maxUnavailable"] == allowed == replicas - fleet.min_healthy
    dep = rendered.objects[0]
    # the budget counts exactly the workload's pods
    assert pdb["spec"]["selector"] == dep["spec"]["selector"] == {"matchLabels": SERVING}
    assert _matches(SERVING, dep["spec"]["template"]["metadata"]["labels"])
    validate(pdb, "1.31")


def test_a_multi_node_budget_counts_pods_of_whole_groups(multi: Rendered) -> None:
    pdb = _one(multi, "PodDisruptionBudget", "kimi-k26-2node")
    fleet = load_fleet(MULTINODE)
    # 2 groups, 1 must serve: one pod may go, which stops at most its own group
    assert pdb["spec"]["maxUnavailable"] == fleet.replicas - fleet.min_healthy == 1
    lws = multi.objects[0]["spec"]["leaderWorkerTemplate"]
    for template in (lws["leaderTemplate"], lws["workerTemplate"]):
        assert _matches(pdb["spec"]["selector"]["matchLabels"], template["metadata"]["labels"])


def test_a_pod_that_never_became_ready_does_not_block_a_drain_where_the_field_exists() -> None:
    for version, present in (("1.26", False), ("1.27", True), ("1.31", True)):
        rendered = render(load_profile(TRITON), _k8s(load_fleet(EXAMPLE), version=version))
        spec = _one(rendered, "PodDisruptionBudget", "kimi-k26")["spec"]
        assert ("unhealthyPodEvictionPolicy" in spec) is present, version
        if present:
            assert spec["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def test_the_router_gets_a_budget_only_when_one_of_its_pods_may_go() -> None:
    one = render(load_profile(TRITON), _k8s(load_fleet(EXAMPLE), router=RouterSpec(replicas=1)))
    assert [p["metadata"]["name"] for p in _all(one, "PodDisruptionBudget")] == ["kimi-k26"]
    two = render(load_profile(TRITON), load_fleet(EXAMPLE))  # router.replicas: 2
    pdb = _one(two, "PodDisruptionBudget", "kimi-k26-router")
    router = _one(two, "Deployment", "kimi-k26-router")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": router["spec"]["selector"]}


# -- Guaranteed QoS ------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["single", "multi"])
def test_every_pod_template_is_guaranteed(which: str, request: pytest.FixtureRequest) -> None:
    rendered: Rendered = request.getfixturevalue(which)
    seen = 0
    for where, template in _templates(rendered):
        for c in template["spec"]["containers"]:
            res = c["resources"]
            # Guaranteed: every container requests CPU and memory, equal to its limits
            assert res["requests"] == res["limits"], where
            assert {"cpu", "memory"} <= set(res["limits"]), where
            seen += 1
    # single (--argo): serving, smoke Job, router; multi: leader, worker, router
    assert seen == 3


def test_the_serving_pods_get_the_fleets_cpu_and_memory(single: Rendered) -> None:
    c = single.objects[0]["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"]["limits"] == {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": 8}


def test_a_fleet_without_cpu_and_memory_is_refused_with_the_fix() -> None:
    fleet = _k8s(load_fleet(EXAMPLE), cpu=None, memory=None)
    with pytest.raises(NotExpressible) as info:
        render(load_profile(TRITON), fleet)
    text = str(info.value)
    assert "k8s.cpu and k8s.memory not set" in text and "BestEffort" in text
    assert "fix: set both" in text and str(EXAMPLE) in text


def test_memory_that_does_not_hold_shm_is_refused() -> None:
    fleet = _k8s(load_fleet(EXAMPLE), memory="32Gi")  # the profile's shm_size is 32g
    with pytest.raises(NotExpressible, match=r"k8s.memory 32Gi does not exceed .*shm_size 32g"):
        render(load_profile(TRITON), fleet)
    render(load_profile(TRITON), _k8s(load_fleet(EXAMPLE), memory="33Gi"))


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ("cpu: 0", "k8s.cpu: must be a CPU quantity above 0"),
        ("cpu: 2 cores", "k8s.cpu: must be a CPU quantity above 0"),
        ("memory: 12 GB", "k8s.memory: must be a memory quantity above 0"),
        ("allowed_clients: [{cidr: 10.0.0.1/8}]", "k8s.allowed_clients[0].cidr: must be a CIDR"),
        ("allowed_clients: [{namespace: Mon}]", "k8s.allowed_clients[0].namespace: must be a namespace"),
        ("allowed_clients: [{namespace: a, cidr: 10.0.0.0/8}]", "k8s.allowed_clients[0]: names one client"),
        ("allowed_clients: [{}]", "k8s.allowed_clients[0]: names one client"),
        ("router: {memory: 4 gigs}", "k8s.router.memory: must be a memory quantity"),
        ("router: {image: 'Bad Image'}", "k8s.router.image: must be an image reference"),
        ("router: {replica: 2}", "k8s.router.replica: unknown key; did you mean 'replicas'?"),
    ],
)  # fmt: skip
def test_bad_k8s_fields_name_the_file_the_field_and_the_fix(
    write: Callable[[str, str], str], block: str, expected: str
) -> None:
    path = write("f.yaml", f"kind: fleet\nname: f\nk8s: {{{block}}}\n")
    with pytest.raises(ProfileError) as info:
        load_fleet(path)
    assert f"{path}: {expected}" in str(info.value), str(info.value)


def test_cpu_given_as_a_number_reads_as_a_quantity(write: Callable[[str, str], str]) -> None:
    k8s = load_fleet(write("f.yaml", "kind: fleet\nname: f\nk8s: {cpu: 32, memory: 1Ti}\n")).k8s
    assert (k8s.cpu, k8s.memory) == ("32", "1Ti")


# -- the router ----------------------------------------------------------------------------


def test_the_router_discovers_exactly_the_serving_pods(single: Rendered) -> None:
    dep = _one(single, "Deployment", "kimi-k26-router")
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["command"] == ["python3", "-m", "sglang_router.launch_router"]
    args = c["args"]
    assert "--service-discovery" in args
    start = args.index("--selector") + 1
    end = next(i for i in range(start, len(args)) if args[i].startswith("--"))
    selector = dict(a.split("=", 1) for a in args[start:end])
    # the Service's selector: every serving replica, never the router or the smoke Job
    assert selector == _one(single, "Service", "kimi-k26")["spec"]["selector"] == SERVING
    assert args[args.index("--service-discovery-port") + 1] == "30000"  # server.port
    assert args[args.index("--service-discovery-namespace") + 1] == "inference"
    assert args[args.index("--worker-startup-timeout-secs") + 1] == "900"  # health.deadline_s
    for where, template in _templates(single):
        role = template["metadata"]["labels"].get("kctl.role")
        serving = where.startswith("Deployment/kimi-k26:") and role is None
        assert _matches(selector, template["metadata"]["labels"]) is serving, where


def test_a_leader_worker_set_router_discovers_the_leaders_only(multi: Rendered) -> None:
    args = _one(multi, "Deployment", "kimi-k26-2node-router")["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert "leaderworkerset.sigs.k8s.io/worker-index=0" in args


def test_every_router_flag_is_one_sglang_router_0_3_2_accepts(single: Rendered) -> None:
    # the help text of `python -m sglang_router.launch_router --help`, sglang-router 0.3.2
    accepted = set(re.findall(r"\[(--[a-z0-9-]+)", ROUTER_HELP.read_text()))
    assert {"--service-discovery", "--selector", "--policy"} <= accepted
    args = _one(single, "Deployment", "kimi-k26-router")["spec"]["template"]["spec"]["containers"][
        0
    ]["args"]
    flags = {a for a in args if a.startswith("--")}
    assert flags and flags <= accepted, flags - accepted
    policy = args[args.index("--policy") + 1]
    assert policy in re.search(r"--policy \{([a-z_,]+)\}", ROUTER_HELP.read_text())[1].split(",")  # type: ignore[index]


def test_the_router_may_watch_pods_in_its_namespace_and_nothing_else(single: Rendered) -> None:
    sa = _one(single, "ServiceAccount", "kimi-k26-router")
    role = _one(single, "Role", "kimi-k26-router")
    binding = _one(single, "RoleBinding", "kimi-k26-router")
    dep = _one(single, "Deployment", "kimi-k26-router")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "inference"}
    ]
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]
    assert {o["metadata"]["namespace"] for o in (sa, role, binding, dep)} == {"inference"}


def test_the_router_service_and_probes(single: Rendered) -> None:
    svc = _one(single, "Service", "kimi-k26-router")
    dep = _one(single, "Deployment", "kimi-k26-router")
    template = dep["spec"]["template"]
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert _matches(svc["spec"]["selector"], template["metadata"]["labels"])
    (c,) = template["spec"]["containers"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readiness"
    assert c["livenessProbe"]["httpGet"]["path"] == "/liveness"
    # a new router pod is ready before the old one goes
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    for obj in (svc, dep):
        validate(obj, "1.31")


def test_a_new_profile_does_not_restart_the_router() -> None:
    fleet = load_fleet(EXAMPLE)
    a, b = (render(load_profile(p), fleet) for p in (TRITON, KDTREE))
    ta = _one(a, "Deployment", "kimi-k26-router")["spec"]["template"]
    tb = _one(b, "Deployment", "kimi-k26-router")["spec"]["template"]
    assert a.objects[0]["spec"]["template"] != b.objects[0]["spec"]["template"]
    assert ta == tb  # same pod template: applying the candidate leaves the router running
    assert ta["spec"]["containers"][0]["image"] == load_profile(KDTREE).image.base


def test_a_router_image_of_its_own_runs_anywhere() -> None:
    fleet = _k8s(load_fleet(EXAMPLE), router=RouterSpec(image="registry.example.com/ml/smg:0.3.2"))
    spec = _one(render(load_profile(TRITON), fleet), "Deployment", "kimi-k26-router")["spec"]
    pod = spec["template"]["spec"]
    assert pod["containers"][0]["image"] == "registry.example.com/ml/smg:0.3.2"
    assert "nodeSelector" not in pod and "affinity" not in pod


# -- the smoke Job -------------------------------------------------------------------------


def test_the_smoke_job_runs_where_the_candidate_image_is(single: Rendered) -> None:
    analysis = _one(single, "AnalysisTemplate", "kimi-k26-smoke")
    job = analysis["spec"]["metrics"][0]["provider"]["job"]
    pod = job["spec"]["template"]["spec"]
    serving = single.objects[0]["spec"]["template"]
    assert pod["nodeSelector"] == serving["spec"]["nodeSelector"]
    (term,) = pod["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    wanted = term["labelSelector"]["matchLabels"]
    # the nodes that run a pod of the candidate profile, whose image the Job runs
    assert _matches(wanted, serving["metadata"]["labels"])
    assert wanted["kctl.profile-hash"] == serving["metadata"]["labels"]["kctl.profile-hash"]
    assert pod["containers"][0]["image"] == serving["spec"]["containers"][0]["image"]
    # and it is no serving pod: not in the Service, the router, the budget
    assert not _matches(SERVING, job["spec"]["template"]["metadata"]["labels"])
    assert not _matches(SERVING, job["metadata"]["labels"])


# -- least privilege -----------------------------------------------------------------------


def test_the_network_policy_admits_the_router_the_smoke_job_and_the_named_clients(
    single: Rendered,
) -> None:
    np = _one(single, "NetworkPolicy", "kimi-k26")
    spec = np["spec"]
    assert spec["podSelector"] == {"matchLabels": SERVING} and spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 30000}]
    router_labels = _one(single, "Deployment", "kimi-k26-router")["spec"]["template"]["metadata"]
    smoke = _one(single, "AnalysisTemplate", "kimi-k26-smoke")["spec"]["metrics"][0]
    smoke_labels = smoke["provider"]["job"]["spec"]["template"]["metadata"]["labels"]
    peers = rule["from"]
    assert _matches(peers[0]["podSelector"]["matchLabels"], router_labels["labels"])
    assert _matches(peers[1]["podSelector"]["matchLabels"], smoke_labels)
    assert peers[2:] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]  # fleets/k8s-example.yaml's allowed_clients
    assert all(peer for peer in peers)  # an empty peer would admit everyone
    validate(np, "1.31")


def test_clients_from_the_fleet_file_and_nothing_else() -> None:
    clients = (ClientSpec(cidr="10.20.0.0/16"), ClientSpec(namespace="batch"))
    fleet = _k8s(load_fleet(EXAMPLE), allowed_clients=clients)
    np = _one(render(load_profile(TRITON), fleet), "NetworkPolicy", "kimi-k26")
    assert np["spec"]["ingress"][0]["from"][1:] == [
        {"ipBlock": {"cidr": "10.20.0.0/16"}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "batch"}}},
    ]
    none = _k8s(load_fleet(EXAMPLE), allowed_clients=())
    np = _one(render(load_profile(TRITON), none), "NetworkPolicy", "kimi-k26")
    (router_only,) = np["spec"]["ingress"][0]["from"]  # no --argo: no smoke Job either
    assert router_only["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "sglang-router"


def test_a_multi_node_replica_talks_within_the_fleet_on_any_port(multi: Rendered) -> None:
    rules = _one(multi, "NetworkPolicy", "kimi-k26-2node")["spec"]["ingress"]
    fleet_pods = {
        "app.kubernetes.io/name": "sglang",
        "app.kubernetes.io/instance": "kimi-k26-2node",
    }
    assert rules[1] == {"from": [{"podSelector": {"matchLabels": fleet_pods}}]}  # every port
    lwt = multi.objects[0]["spec"]["leaderWorkerTemplate"]
    for template in (lwt["leaderTemplate"], lwt["workerTemplate"]):
        assert _matches(fleet_pods, template["metadata"]["labels"])


@pytest.mark.parametrize("which", ["single", "multi"])
def test_every_container_runs_with_least_privilege(
    which: str, request: pytest.FixtureRequest
) -> None:
    rendered: Rendered = request.getfixturevalue(which)
    for where, template in _templates(rendered):
        spec = template["spec"]
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["capabilities"] == {"drop": ["ALL"]}, where
            assert "add" not in sc["capabilities"] and not sc.get("privileged"), where
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, where
            if c["name"] == "sglang":  # SGLang's images run as root (docs/kubernetes.md)
                assert "runAsNonRoot" not in sc, where
            else:  # the router and the smoke Job
                assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 65534, where
                assert sc["readOnlyRootFilesystem"] is True, where


@pytest.mark.parametrize("which", ["single", "multi"])
def test_a_shared_process_namespace_only_where_the_server_needs_it(
    which: str, request: pytest.FixtureRequest
) -> None:
    rendered: Rendered = request.getfixturevalue(which)
    for where, template in _templates(rendered):
        spec = template["spec"]
        serving = spec["containers"][0]["name"] == "sglang"
        # the serving pod: the pause process reaps and SIGTERM reaches a loading server;
        # one container, so the namespace shows it nothing else
        assert spec.get("shareProcessNamespace", False) is serving, where
        if serving:
            assert len(spec["containers"]) == 1 and "initContainers" not in spec, where
            assert spec["automountServiceAccountToken"] is False, where


def test_host_directories_are_never_created_and_the_model_is_read_only(
    write: Callable[[str, str], str],
) -> None:
    # a profile that mounts the model directory read-write: rendered read-only all the same
    path = write(
        "p.yaml",
        f"extends: {TRITON}\nruntime:\n  volumes:\n"
        "    - {host: /models, container: /models, read_only: false}\n"
        "    - {host: /var/cache/hf, container: /root/.cache/huggingface, read_only: false}\n"
        "    - {host: /srv/extra, container: /extra, read_only: true}\n",
    )
    pod = render(load_profile(path), load_fleet(EXAMPLE)).objects[0]["spec"]["template"]["spec"]
    host = [v for v in pod["volumes"] if "hostPath" in v]
    assert [v["hostPath"]["type"] for v in host] == ["Directory"] * 3
    mounts = {
        m["mountPath"]: m["readOnly"]
        for m in pod["containers"][0]["volumeMounts"]
        if m["name"] != "dshm"
    }
    assert mounts == {"/models": True, "/root/.cache/huggingface": False, "/extra": True}


def test_the_yaml_has_no_anchors(single: Rendered, multi: Rendered) -> None:
    # a dict shared between two places is written as &id001 / *id001: valid YAML, but
    # not what a reviewer reads nor what every tool accepts
    for rendered in (single, multi):
        assert not re.search(r"[&*]id\d+", rendered.to_yaml())
