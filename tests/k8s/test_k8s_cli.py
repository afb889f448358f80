"""``kctl render --k8s`` through the real CLI: YAML on stdout, files with --out, the --json
envelope, refusals with exit 2; and the fleet file's own validation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from kctl.cli import main
from kctl.fleet.loader import load_fleet
from kctl.k8s.render import render
from kctl.profile.loader import load_profile
from tests.k8s.conftest import EXAMPLE, KDTREE, MULTINODE, REPO, TRITON
from tests.k8s.schemas import validate


def test_yaml_on_stdout_is_what_render_returns(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "--k8s", str(KDTREE), "--fleet", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Rendered by kctl render --k8s for Kubernetes 1.31")
    docs = [d for d in yaml.safe_load_all(out) if d is not None]
    expected = render(load_profile(KDTREE), load_fleet(EXAMPLE)).objects
    assert docs == list(expected)
    for doc in docs:
        validate(doc, "1.31")


def test_out_writes_one_valid_file_per_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "k8s"
    args = ["render", "--k8s", str(KDTREE), "--fleet", str(EXAMPLE), "--out", str(out), "--argo"]
    assert main(args) == 0
    files = sorted(p.name for p in out.iterdir())
    assert files == [
        "kimi-k26-canary.service.yaml",
        "kimi-k26-router.deployment.yaml",
        "kimi-k26-router.poddisruptionbudget.yaml",
        "kimi-k26-router.role.yaml",
        "kimi-k26-router.rolebinding.yaml",
        "kimi-k26-router.service.yaml",
        "kimi-k26-router.serviceaccount.yaml",
        "kimi-k26-smoke.analysistemplate.yaml",
        "kimi-k26.deployment.yaml",
        "kimi-k26.networkpolicy.yaml",
        "kimi-k26.poddisruptionbudget.yaml",
        "kimi-k26.rollout.yaml",
        "kimi-k26.service.yaml",
    ]
    for path in out.iterdir():
        (doc,) = list(yaml.safe_load_all(path.read_text()))
        validate(doc, "1.31")
    assert "wrote 13 objects for Kubernetes 1.31" in capsys.readouterr().out


def test_json_envelope(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--json", "render", "--k8s", str(KDTREE), "--fleet", str(MULTINODE)]) == 0
    env = json.loads(capsys.readouterr().out)
    assert env["schema"] == "kctl.result/v1" and env["command"] == "render" and env["ok"]
    result = env["result"]
    assert result["kubernetes_version"] == "1.31" and result["workload"] == "LeaderWorkerSet"
    assert result["profile_hash"] == load_profile(KDTREE).content_hash
    assert [o["kind"] for o in result["objects"]] == [
        "LeaderWorkerSet", "Service", "PodDisruptionBudget", "NetworkPolicy",
        "ServiceAccount", "Role", "RoleBinding", "Deployment", "Service",
    ]  # fmt: skip
    assert result["files"] is None and result["manifests"][0]["kind"] == "LeaderWorkerSet"


def test_a_refusal_exits_2_with_the_fix(
    write: Callable[[str, str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = write("f.yaml", "kind: fleet\nname: f\nreplicas: 2\n")  # no k8s.registry
    assert main(["render", "--k8s", str(KDTREE), "--fleet", fleet]) == 2
    err = capsys.readouterr().err
    assert "cannot render Kubernetes objects" in err and "set k8s.registry: REGISTRY" in err


def test_a_refusal_under_json_is_an_error_envelope(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "render",
            "--k8s",
            str(REPO / "tests/profiles/sim-baseline.yaml"),
            "--fleet",
            str(EXAMPLE),
            "--json",
        ]
    )
    assert code == 2
    env = json.loads(capsys.readouterr().out)
    assert env["ok"] is False and env["error"]["type"] == "NotExpressible"
    assert "runtime.kind: 'local'" in env["error"]["message"]


def test_render_needs_a_format(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", str(TRITON), "--fleet", str(EXAMPLE)]) == 2
    assert "kctl render --k8s PROFILE --fleet FLEET" in capsys.readouterr().err


def test_fleet_file_problems_name_the_file_and_field(
    write: Callable[[str, str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = write("f.yaml", "kind: fleet\nname: f\nk8s: {nodes_per_replic: 2, version: '131'}\n")
    assert main(["render", "--k8s", str(TRITON), "--fleet", fleet]) == 2
    err = capsys.readouterr().err
    assert f"{fleet}: k8s.nodes_per_replic: unknown key; did you mean 'nodes_per_replica'?" in err
    assert f"{fleet}: k8s.version: must be like '1.31' (got '131')" in err


def test_a_fleet_file_that_is_not_a_mapping(
    write: Callable[[str, str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = write("f.yaml", "- kind: fleet\n")
    assert main(["render", "--k8s", str(TRITON), "--fleet", fleet]) == 2
    assert "must be a mapping with kind: fleet (got list)" in capsys.readouterr().err


def test_the_installed_command_in_a_process(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kctl",
            "--json",
            "render",
            "--k8s",
            str(TRITON),
            "--fleet",
            str(EXAMPLE),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        # this checkout's kctl, whatever an installed one is
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 0, proc.stderr
    env = json.loads(proc.stdout)
    assert env["result"]["image"] == "lmsysorg/sglang:v0.5.10-cu130"
    for obj in env["result"]["manifests"]:
        validate(obj, env["result"]["kubernetes_version"])
