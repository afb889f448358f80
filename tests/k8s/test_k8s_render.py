"""What the objects say: the same SGLang launch as kctl's docker runtime, the release's
multi-node flags, probes from the health section, GPUs, shm, labels with the stored
fingerprint, the rollout block; and what Kubernetes cannot express is refused with a fix."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from kctl.fleet.loader import load_fleet
from kctl.fleet.spec import FleetSpec, K8sSpec, RolloutSpec
from kctl.k8s import argo
from kctl.k8s.render import render
from kctl.k8s.target import NotExpressible, resolve
from kctl.launch import launch_spec, rebind
from kctl.profile.loader import load_profile
from kctl.profile.model import Profile
from kctl.profile.release import profile_release
from kctl.sglang.argv import check_argv
from tests.k8s.conftest import EXAMPLE, KDTREE, MULTINODE, TRITON


def _fleet(**k8s: Any) -> FleetSpec:
    base = load_fleet(EXAMPLE)
    return dataclasses.replace(base, k8s=dataclasses.replace(base.k8s, **k8s))


def _pods(objects: tuple[dict[str, Any], ...]) -> dict[str, dict[str, Any]]:
    spec = objects[0]["spec"]
    if objects[0]["kind"] == "Deployment":
        return {"single": spec["template"]}
    lwt = spec["leaderWorkerTemplate"]
    return {"leader": lwt["leaderTemplate"], "worker": lwt["workerTemplate"]}


def test_the_container_runs_what_the_docker_runtime_runs() -> None:
    profile = load_profile(KDTREE)
    rendered = render(profile, load_fleet(EXAMPLE))
    pod = _pods(rendered.objects)["single"]
    c = pod["spec"]["containers"][0]
    launch = launch_spec(profile, "d", simulate=False)
    # Docker's command is Kubernetes' args, bound where the fleet file says (every
    # interface of the pod) instead of the profile's loopback
    assert "127.0.0.1" in launch.argv and load_fleet(EXAMPLE).bind == "0.0.0.0"
    assert c["args"] == list(rebind(launch.argv, "0.0.0.0"))
    assert "command" not in c  # the image's entrypoint runs, as under docker run
    assert c["args"][:2] == ["sglang", "serve"]
    assert {e["name"]: e["value"] for e in c["env"]} == dict(launch.env)
    assert c["image"] == "registry.example.com/ml/" + _tag(profile)
    amounts = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": 8}  # the fleet's k8s block
    assert c["resources"] == {"requests": amounts, "limits": amounts}
    assert pod["spec"]["shareProcessNamespace"] is True
    assert pod["spec"]["terminationGracePeriodSeconds"] == 60
    assert pod["spec"]["nodeSelector"] == {"kctl.fleet": "kimi-k26"}
    shm = next(v for v in pod["spec"]["volumes"] if v["name"] == "dshm")
    assert shm == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/dev/shm"]["name"] == "dshm"
    assert mounts["/models"]["readOnly"] is True
    assert mounts["/root/.cache/huggingface"]["readOnly"] is False


def _tag(profile: Profile) -> str:
    from kctl.image.context import build_context

    return build_context(profile).tag


def test_a_profile_without_a_kernel_runs_its_base_image_without_a_registry() -> None:
    profile = load_profile(TRITON)
    rendered = render(profile, _fleet(registry=None))
    c = _pods(rendered.objects)["single"]["spec"]["containers"][0]
    assert c["image"] == profile.image.base == "lmsysorg/sglang:v0.5.10-cu130"


def test_probes_come_from_the_health_section_and_outlast_the_model_load() -> None:
    profile = load_profile(KDTREE)
    c = _pods(render(profile, load_fleet(EXAMPLE)).objects)["single"]["spec"]["containers"][0]
    start, ready, live = c["startupProbe"], c["readinessProbe"], c["livenessProbe"]
    assert start["httpGet"]["path"] == "/health" and live["httpGet"]["path"] == "/health"
    assert ready["httpGet"]["path"] == "/health_generate"  # require_generation: true
    window = start["periodSeconds"] * start["failureThreshold"]
    assert window == profile.health.deadline_s == 900 and window >= 330  # 5.5-minute load
    assert start["timeoutSeconds"] == ready["timeoutSeconds"] == 30
    assert all(p["httpGet"]["port"] == "http" for p in (start, ready, live))


def test_readiness_asks_health_when_the_profile_needs_no_generation(
    write: Callable[[str, str], str],
) -> None:
    path = write("p.yaml", f"extends: {TRITON}\nhealth: {{require_generation: false}}\n")
    c = _pods(render(load_profile(path), load_fleet(EXAMPLE)).objects)["single"]["spec"][
        "containers"
    ][0]
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"


def test_labels_carry_the_profile_and_the_fingerprint_kctl_stores() -> None:
    profile = load_profile(KDTREE)
    for obj in render(profile, load_fleet(EXAMPLE), with_argo=True).objects:
        meta = obj["metadata"]
        assert meta["labels"]["kctl.profile"] == "kdtree-graphs"
        assert meta["labels"]["kctl.profile-hash"] == profile.content_hash[:12]
        assert meta["annotations"]["kctl.profile-hash"] == profile.content_hash
        assert meta["namespace"] == "inference"
    dep = render(profile, load_fleet(EXAMPLE)).objects[0]
    # the selector names the fleet only: a new profile updates the same Deployment
    assert dep["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "sglang",
        "app.kubernetes.io/instance": "kimi-k26",
    }


def test_a_multi_node_replica_is_a_leader_worker_set_with_the_release_flags() -> None:
    profile = load_profile(KDTREE)
    rendered = render(profile, load_fleet(MULTINODE))
    lws, svc = rendered.objects[:2]
    assert lws["kind"] == "LeaderWorkerSet" and lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert lws["spec"]["replicas"] == 2 and lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    pods = _pods(rendered.objects)
    leader, worker = (pods[r]["spec"]["containers"][0] for r in ("leader", "worker"))
    base = list(rebind(launch_spec(profile, "d", simulate=False).argv, "0.0.0.0"))
    multi = ["--dist-init-addr", "$(LWS_LEADER_ADDRESS):20000", "--nnodes", "2", "--node-rank"]
    assert leader["args"] == [*base, *multi, "0"]
    assert worker["args"] == [*base, *multi, "$(LWS_WORKER_INDEX)"]
    assert leader["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert leader["resources"] == worker["resources"]
    # only the leader serves HTTP: probes and the Service are on the leader
    assert "readinessProbe" in leader and "readinessProbe" not in worker and "ports" not in worker
    assert svc["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    assert pods["worker"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.count": "4"}  # k8s.node_label
    # the release's own parser accepts the argv (the worker's rank as LWS fills it in)
    rel = profile_release(profile)
    argv = [*worker["args"][2:-1], "1"]
    assert [p for p in check_argv(rel, argv) if p.severity == "error"] == []


def test_the_rollout_block_becomes_the_rolling_update() -> None:
    profile = load_profile(KDTREE)
    dep = render(profile, load_fleet(EXAMPLE)).objects[0]["spec"]
    # replicas 4, min_healthy 3: one replica down at a time, no surge
    assert dep["strategy"]["rollingUpdate"] == {"maxUnavailable": 1, "maxSurge": 0}
    assert dep["minReadySeconds"] == 30
    assert dep["progressDeadlineSeconds"] > profile.health.deadline_s + 30
    assert dep["revisionHistoryLimit"] == profile.runtime.retain
    full = dataclasses.replace(
        load_fleet(EXAMPLE), rollout=RolloutSpec(canary=1, parallelism=2, min_healthy=4)
    )
    spec = render(profile, full).objects[0]["spec"]
    assert spec["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 2}


def test_the_argo_canary_follows_the_rollout_block() -> None:
    profile = load_profile(KDTREE)
    objs = render(profile, load_fleet(EXAMPLE), with_argo=True).objects
    dep, _, rollout, canary_svc, analysis = objs[:5]
    assert dep["spec"]["replicas"] == 0  # the Rollout owns the pods
    spec = rollout["spec"]
    assert spec["workloadRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "kimi-k26",
        "scaleDown": "progressively",
    }
    assert spec["replicas"] == 4
    assert spec["strategy"]["canary"]["steps"] == [
        {"setWeight": 25},
        {"analysis": {"templates": [{"templateName": "kimi-k26-smoke"}]}},
        {"setWeight": 50},
        {"pause": {"duration": "30s"}},
        {"setWeight": 75},
        {"pause": {"duration": "30s"}},
    ]
    assert (
        spec["strategy"]["canary"]["canaryService"]
        == canary_svc["metadata"]["name"]
        == "kimi-k26-canary"
    )
    job = analysis["spec"]["metrics"][0]["provider"]["job"]["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert job["command"][-2:] == ["http://kimi-k26-canary.inference.svc:30000", "3"]
    compile(argo.SMOKE, "smoke", "exec")  # the check the Job runs is valid Python


def test_no_smoke_requests_no_analysis() -> None:
    fleet = dataclasses.replace(
        load_fleet(EXAMPLE), rollout=RolloutSpec(canary=1, smoke_requests=0)
    )
    objs = render(load_profile(KDTREE), fleet, with_argo=True).objects
    assert [o["kind"] for o in objs][:5] == [
        "Deployment", "Service", "Rollout", "Service", "PodDisruptionBudget"
    ]  # fmt: skip
    assert all("analysis" not in s for s in objs[2]["spec"]["strategy"]["canary"]["steps"])


# -- refused: what Kubernetes cannot express ----------------------------------------------


def _refused(profile: Profile, fleet: FleetSpec, *, with_argo: bool = False) -> str:
    with pytest.raises(NotExpressible) as info:
        render(profile, fleet, with_argo=with_argo)
    assert info.value.exit_code == 2
    return str(info.value)


def test_a_kernel_image_needs_a_registry() -> None:
    text = _refused(load_profile(KDTREE), _fleet(registry=None))
    assert "exists only in the local Docker engine" in text
    assert "docker push REGISTRY/kctl/kdtree-graphs:" in text and "k8s.registry" in text


def test_a_local_runtime_profile_is_refused(write: Callable[[str, str], str]) -> None:
    path = write(
        "p.yaml", "server: {model_path: /m, host: 0.0.0.0}\nruntime: {kind: local, gpus: []}\n"
    )
    text = _refused(load_profile(path), _fleet())
    assert (
        "runtime.kind: 'local'" in text
        and "fix: render a profile with runtime.kind: docker" in text
    )


@pytest.mark.parametrize(
    ("yaml_text", "fleet", "expected"),
    [
        ("runtime: {gpus: [0, 1]}", {}, "device plugin picks"),
        ("server: {host: 127.0.0.1}", {"bind": None}, "fix: bind: 0.0.0.0 in"),
        ("server: {host: 0.0.0.0}", {"bind": "127.0.0.1"}, "bind: '127.0.0.1' is reachable only"),
        ("server: {tp: 8}", {"gpus_per_replica": 4}, "fix: gpus_per_replica: 8"),
        (
            "server: {extra_args: ['--nnodes', '2']}",
            {},
            "kctl render --k8s sets it from k8s.nodes_per_replica",
        ),
        ("server: {extra_args: ['--dist-init=x:1']}", {}, "kctl render --k8s sets it"),
    ],
    ids=[
        "device-indices",
        "loopback",
        "fleet-loopback",
        "too-few-gpus",
        "extra-nnodes",
        "extra-abbreviation",
    ],
)
def test_profiles_kubernetes_cannot_run_are_refused_with_a_fix(
    write: Callable[[str, str], str], yaml_text: str, fleet: dict[str, Any], expected: str
) -> None:
    path = write("p.yaml", f"extends: {TRITON}\n{yaml_text}\n")
    spec = dataclasses.replace(load_fleet(EXAMPLE), **fleet)
    assert expected in _refused(load_profile(path), spec)


@pytest.mark.parametrize(
    ("k8s", "expected"),
    [
        ({"version": "1.24"}, "fix: k8s.version: '1.25'"),
        ({"gpu_resource": "NVIDIA-GPU"}, "extended resource name"),
        ({"namespace": "Inference"}, "DNS-1123 label"),
        ({"nodes_per_replica": 3}, "divide evenly"),
    ],
    ids=["old-version", "swarm-resource-name", "namespace", "uneven-nodes"],
)
def test_fleets_kubernetes_cannot_run_are_refused(k8s: dict[str, Any], expected: str) -> None:
    assert expected in _refused(load_profile(TRITON), _fleet(**k8s))


def test_argo_does_not_drive_a_leader_worker_set() -> None:
    text = _refused(load_profile(KDTREE), load_fleet(MULTINODE), with_argo=True)
    assert "partition" in text


def test_every_problem_is_listed_at_once(write: Callable[[str, str], str]) -> None:
    path = write(
        "p.yaml", f"extends: {TRITON}\nserver: {{host: 127.0.0.1}}\nruntime: {{gpus: [0]}}\n"
    )
    with pytest.raises(NotExpressible) as info:
        resolve(load_profile(path), dataclasses.replace(_fleet(version="1.20"), bind=None))
    assert len(info.value.problems) == 3


def test_k8s_spec_defaults_render() -> None:
    fleet = FleetSpec(
        kind="fleet",
        name="f",
        source="f.yaml",
        bind="0.0.0.0",
        replicas=2,
        k8s=K8sSpec(cpu="8", memory="64Gi"),
    )
    objs = render(load_profile(TRITON), fleet).objects
    assert (
        objs[0]["metadata"]["namespace"] == "default"
        and "nodeSelector" not in objs[0]["spec"]["template"]["spec"]
    )


def test_a_newer_release_gets_its_own_spelling(write: Callable[[str, str], str]) -> None:
    path = write(
        "p.yaml",
        f"extends: {TRITON}\nimage: {{sglang: '0.5.23'}}\nserver: {{cuda_graphs: false}}\n",
    )
    profile = load_profile(path)
    lws = render(profile, load_fleet(MULTINODE)).objects[0]
    args = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["args"]
    base = rebind(launch_spec(profile, "d", simulate=False).argv, "0.0.0.0")
    assert args[: len(base)] == list(base)
    assert "--cuda-graph-backend-decode" in args and "--disable-cuda-graph" not in args
    assert lws["metadata"]["annotations"]["kctl.sglang-release"] == "0.5.23"
    rel = profile_release(profile)
    assert [p for p in check_argv(rel, args[2:]) if p.severity == "error"] == []
