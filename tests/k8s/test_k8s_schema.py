"""Every rendered object passes schema validation for the Kubernetes version its fleet
names: every shipped profile on every shipped fleet, with and without the Argo canary; and
the validation is real: broken objects fail it."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from kctl.fleet.loader import load_fleet
from kctl.fleet.spec import FleetSpec
from kctl.k8s import names
from kctl.k8s.render import Rendered, render
from kctl.k8s.target import NotExpressible
from kctl.profile.loader import load_profile
from tests.k8s.conftest import EXAMPLE, FLEETS, KDTREE, MULTINODE, PROFILES
from tests.k8s.schemas import validate


def test_the_shipped_fleets_are_here() -> None:
    assert EXAMPLE in FLEETS and MULTINODE in FLEETS
    assert {p.stem for p in PROFILES} >= {"triton-graphs", "kdtree-eager", "kdtree-graphs"}


def _cases() -> list[tuple[Path, Path, bool]]:
    cases = []
    for fleet in FLEETS:
        multi = load_fleet(fleet).k8s.nodes_per_replica > 1
        for profile in PROFILES:
            cases += [(profile, fleet, False)] + ([] if multi else [(profile, fleet, True)])
    return cases


@pytest.mark.parametrize(
    ("profile", "fleet", "argo"),
    _cases(),
    ids=lambda v: v.stem if isinstance(v, Path) else ("argo" if v else "plain"),
)
def test_every_shipped_profile_on_every_fleet_validates(
    profile: Path, fleet: Path, argo: bool
) -> None:
    spec = load_fleet(fleet)
    loaded = load_profile(profile)
    if spec.k8s.registry is None and loaded.image.kernel_source is not None:
        # a fleet that names no registry cannot run a kctl-built image: refused, not skipped
        with pytest.raises(NotExpressible, match="k8s.registry"):
            render(loaded, spec, with_argo=argo)
        return
    rendered = render(loaded, spec, with_argo=argo)
    kinds = [o["kind"] for o in rendered.objects]
    expected = "LeaderWorkerSet" if spec.k8s.nodes_per_replica > 1 else "Deployment"
    assert kinds[:2] == [expected, "Service"]
    served = ["PodDisruptionBudget", "NetworkPolicy"]
    gateway = ["ServiceAccount", "Role", "RoleBinding", "Deployment", "Service"]
    gateway += ["PodDisruptionBudget"] if spec.k8s.router.replicas > 1 else []
    canary = ["Rollout", "Service", "AnalysisTemplate"] if argo else []
    assert kinds[2:] == canary + served + gateway
    used: list[str] = []
    for obj in rendered.objects:
        used += validate(obj, spec.k8s.version)
        assert names.problems(obj) == []
    # the core schemas used are exactly those of the version the fleet names
    assert used and set(used) == {spec.k8s.version}


def _with_version(fleet: FleetSpec, version: str) -> FleetSpec:
    return dataclasses.replace(fleet, k8s=dataclasses.replace(fleet.k8s, version=version))


def _versions() -> list[str]:
    minor = int(kubernetes_validate.latest_version().split(".")[1])
    return [f"1.{m}" for m in range(25, minor + 1)]


@pytest.mark.parametrize("version", _versions())
@pytest.mark.parametrize("fleet", [EXAMPLE, MULTINODE], ids=lambda p: p.stem)
def test_every_kubernetes_version_from_the_oldest_rendered_for(fleet: Path, version: str) -> None:
    spec = _with_version(load_fleet(fleet), version)
    rendered = render(load_profile(KDTREE), spec, with_argo=fleet == EXAMPLE)
    assert rendered.version == version and f"Kubernetes {version}" in rendered.to_yaml()
    for obj in rendered.objects:
        assert set(validate(obj, version)) <= {version}


# -- the validation is real --------------------------------------------------------------


@pytest.fixture(scope="module")
def single() -> Rendered:
    return render(load_profile(KDTREE), load_fleet(EXAMPLE), with_argo=True)


@pytest.fixture(scope="module")
def multi() -> Rendered:
    return render(load_profile(KDTREE), load_fleet(MULTINODE))


def _obj(rendered: Rendered, kind: str) -> dict[str, Any]:
    return copy.deepcopy(next(o for o in rendered.objects if o["kind"] == kind))


def _container(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]


def test_a_misspelled_field_fails(single: Rendered) -> None:
    dep = _obj(single, "Deployment")
    _container(dep)["livenessProbes"] = _container(dep).pop("livenessProbe")
    with pytest.raises(kubernetes_validate.ValidationError, match="livenessProbes"):
        validate(dep, "1.31")


def test_a_port_given_as_a_string_fails(single: Rendered) -> None:
    dep = _obj(single, "Deployment")
    _container(dep)["ports"][0]["containerPort"] = "30000"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(dep, "1.31")


def test_a_service_without_ports_entries_of_the_right_shape_fails(single: Rendered) -> None:
    svc = _obj(single, "Service")
    svc["spec"]["ports"] = [{"name": "http", "targetPort": "http"}]  # no port: required
    with pytest.raises(kubernetes_validate.ValidationError, match="port"):
        validate(svc, "1.31")


def test_a_field_newer_than_the_named_version_fails(single: Rendered) -> None:
    # a container's resizePolicy arrived in 1.27: valid for 1.27, refused for 1.26
    dep = _obj(single, "Deployment")
    _container(dep)["resizePolicy"] = [{"resourceName": "cpu", "restartPolicy": "NotRequired"}]
    validate(dep, "1.27")
    with pytest.raises(kubernetes_validate.ValidationError, match="resizePolicy"):
        validate(dep, "1.26")


def test_a_worker_template_without_a_container_name_fails(multi: Rendered) -> None:
    lws = _obj(multi, "LeaderWorkerSet")
    del lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["name"]
    with pytest.raises(kubernetes_validate.ValidationError, match="name"):
        validate(lws, "1.31")


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "leaderWorkerTemplate", "restartPolicy"), "Always"),
        (("spec", "leaderWorkerTemplate", "size"), 0),
        (("spec", "startupPolicy"), "WorkersFirst"),
        (("spec", "rolloutStrategy", "type"), "Recreate"),
        (("spec", "leaderWorkerTemplate", "workers"), 2),
    ],
    ids=["restartPolicy", "size", "startupPolicy", "rollout-type", "unknown-field"],
)
def test_a_broken_leader_worker_set_envelope_fails(
    multi: Rendered, path: tuple[str, ...], value: Any
) -> None:
    lws = _obj(multi, "LeaderWorkerSet")
    node = lws
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        validate(lws, "1.31")


def test_a_leader_worker_set_without_a_worker_template_fails(multi: Rendered) -> None:
    lws = _obj(multi, "LeaderWorkerSet")
    del lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    with pytest.raises(jsonschema.ValidationError, match="workerTemplate"):
        validate(lws, "1.31")


def test_broken_argo_objects_fail(single: Rendered) -> None:
    rollout = _obj(single, "Rollout")
    rollout["spec"]["strategy"]["canary"]["steps"][0] = {"setWeight": 150}
    with pytest.raises(jsonschema.ValidationError):
        validate(rollout, "1.31")
    analysis = _obj(single, "AnalysisTemplate")
    job = analysis["spec"]["metrics"][0]["provider"]["job"]["spec"]
    job["template"]["spec"]["restartPolicy"] = 3
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(analysis, "1.31")


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda c: c["resources"]["limits"].update({"nvidia-gpu": 8}), "extended resource name"),
        (lambda c: c["resources"]["limits"].update({"nvidia.com/gpu": "8 GPUs"}), "quantity"),
        (lambda c: c["ports"][0].update(name="http-server-port"), "IANA service name"),
        (lambda c: c.update(name="SGLang"), "DNS-1123 label"),
    ],
    ids=["resource-name", "quantity", "port-name", "container-name"],
)
def test_values_the_api_server_refuses_and_the_schemas_allow_are_caught(
    single: Rendered, edit: Any, expected: str
) -> None:
    dep = _obj(single, "Deployment")
    edit(_container(dep))
    validate(dep, "1.31")  # the schema has no word on these values
    found = names.problems(dep)
    assert found and expected in found[0], found


def test_a_label_the_api_server_refuses_is_caught(single: Rendered) -> None:
    dep = _obj(single, "Deployment")
    dep["spec"]["template"]["metadata"]["labels"]["kctl.profile-hash"] = "x" * 64
    validate(dep, "1.31")
    assert any("label value" in p for p in names.problems(dep))
