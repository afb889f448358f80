"""A fleet's secrets as Docker secrets, in-process: the service spec names each secret by
its reference (no value, nothing in the args), the runner creates the Docker secrets from
the values read at deploy time (named by a digest, the value handed to the driver only),
and the replica's start wrapper turns the mounted files into the server's environment and
its ``--config``."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kctl.errors import SecretUnavailable
from kctl.fleet.loader import load_fleet
from kctl.fleet.service import WRAPPER, service_spec
from kctl.fleet.simfleet import SimulatedFleet
from kctl.fleet.simorch import Orchestrator
from kctl.fleet.swarmsecrets import (
    CONFIG_FILE,
    ENV_CONFIG_SECRET,
    ENV_SECRET_VARS,
    ENV_SECRETS_DIR,
    materialize,
    secret_name,
)
from kctl.launch import launch_spec
from kctl.profile.loader import load_profile
from kctl.profile.model import Profile, SecretRef
from tests.k8s.conftest import REPO, TRITON

TOKEN = "hf_fleet-token-3c9e"
KEY = "sk-fleet-key-81d2"


@pytest.fixture
def keyed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Profile:
    monkeypatch.setenv("KCTL_TEST_HF_TOKEN", TOKEN)
    key_file = tmp_path / "api-key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    profile = load_profile(TRITON)
    server = dataclasses.replace(
        profile.server,
        secrets=(("HF_TOKEN", SecretRef(env="KCTL_TEST_HF_TOKEN")),),
        api_key=SecretRef(file=str(key_file)),
    )
    return dataclasses.replace(profile, server=server)


def _spec(profile: Profile) -> dict[str, Any]:
    fleet = load_fleet(REPO / "fleets" / "example.yaml")
    launch = launch_spec(profile, "d-1", image="img:1", simulate=False)
    return service_spec(fleet, profile, launch, owner="/state")


def _env(spec: dict[str, Any]) -> dict[str, str]:
    container = spec["TaskTemplate"]["ContainerSpec"]
    return dict(e.split("=", 1) for e in container["Env"])


def test_the_service_spec_names_secrets_by_reference_only(keyed: Profile) -> None:
    spec = _spec(keyed)
    text = json.dumps(spec)
    assert TOKEN not in text and KEY not in text
    container = spec["TaskTemplate"]["ContainerSpec"]
    mode = {"UID": "0", "GID": "0", "Mode": 0o400}
    assert container["Secrets"] == [
        {
            "SecretID": "",
            "SecretName": "<secret:env KCTL_TEST_HF_TOKEN>",
            "File": {"Name": "kctl-env-HF_TOKEN", **mode},
        },
        {
            "SecretID": "",
            "SecretName": f"<secret:file {keyed.server.api_key.file}>",  # type: ignore[union-attr]
            "File": {"Name": CONFIG_FILE, **mode},
        },
    ]
    env = _env(spec)
    assert env[ENV_SECRET_VARS] == "HF_TOKEN" and env[ENV_CONFIG_SECRET] == CONFIG_FILE
    assert "HF_TOKEN" not in env  # the wrapper sets it from the file
    assert "--config" not in container["Args"] and "--api-key" not in container["Args"]


def test_a_profile_without_secrets_has_none_in_its_spec() -> None:
    spec = _spec(load_profile(TRITON))
    assert "Secrets" not in spec["TaskTemplate"]["ContainerSpec"]
    assert ENV_SECRET_VARS not in _env(spec) and ENV_CONFIG_SECRET not in _env(spec)


def test_the_runner_creates_docker_secrets_from_the_values_read_now(
    keyed: Profile, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _spec(keyed)
    created: list[tuple[str, bytes, dict[str, str]]] = []

    def put(name: str, data: bytes, labels: dict[str, str]) -> str:
        created.append((name, data, labels))
        return f"id-{len(created)}"

    labels = {"kctl.fleet": "kimi-k26", "kctl.owner": "/state"}
    real = materialize(spec, keyed, "kimi-k26", labels, put)
    assert [(d, lab) for _, d, lab in created] == [
        (TOKEN.encode(), labels),
        (json.dumps({"api-key": KEY}).encode(), labels),  # SGLang's --config, as JSON
    ]
    names = [n for n, _, _ in created]
    assert names == [secret_name("kimi-k26", d) for _, d, _ in created]
    assert all(
        n.startswith("kctl-kimi-k26-") and len(n) == len("kctl-kimi-k26-") + 24 for n in names
    )
    mounted = real["TaskTemplate"]["ContainerSpec"]["Secrets"]
    assert [(m["SecretID"], m["SecretName"]) for m in mounted] == [
        ("id-1", names[0]),
        ("id-2", names[1]),
    ]
    assert TOKEN not in json.dumps(real) and KEY not in json.dumps(real)
    assert spec["TaskTemplate"]["ContainerSpec"]["Secrets"][0]["SecretID"] == ""  # a copy
    # the same value, the same secret; a new value, a new one (Docker secrets never change)
    monkeypatch.setenv("KCTL_TEST_HF_TOKEN", TOKEN + "-rotated")
    again = materialize(spec, keyed, "kimi-k26", labels, put)
    rotated = again["TaskTemplate"]["ContainerSpec"]["Secrets"]
    assert rotated[0]["SecretName"] != names[0] and rotated[1]["SecretName"] == names[1]


def test_a_secret_that_cannot_be_read_stops_before_any_secret_exists(
    keyed: Profile, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KCTL_TEST_HF_TOKEN")
    created: list[str] = []
    with pytest.raises(SecretUnavailable) as info:
        materialize(_spec(keyed), keyed, "f", {}, lambda n, d, lab: created.append(n) or n)
    assert "server.secrets.HF_TOKEN" in info.value.message and info.value.exit_code == 5
    assert created == []


def test_the_wrapper_reads_the_mounted_files_into_the_server(tmp_path: Path) -> None:
    secrets = tmp_path / "run-secrets"
    secrets.mkdir()
    (secrets / "kctl-env-HF_TOKEN").write_text(TOKEN)
    (secrets / CONFIG_FILE).write_text(json.dumps({"api-key": KEY}))
    server = "import json, os, sys; print(json.dumps({'token': os.environ.get('HF_TOKEN'), 'argv': sys.argv[1:], 'kctl': sorted(k for k in ('KCTL_SECRETS_DIR', 'KCTL_SECRET_VARS', 'KCTL_CONFIG_SECRET') if k in os.environ)}))"  # noqa: E501
    env = {
        "PATH": os.environ["PATH"],
        "KCTL_PORT_BASE": "31000",
        "KCTL_SLOT": "2",
        ENV_SECRETS_DIR: str(secrets),
        ENV_SECRET_VARS: "HF_TOKEN",
        ENV_CONFIG_SECRET: CONFIG_FILE,
    }
    r = subprocess.run(
        [sys.executable, "-c", WRAPPER, sys.executable, "-c", server, "--port", "0"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout)
    assert seen["token"] == TOKEN
    assert seen["argv"] == ["--port", "31001", "--config", str(secrets / CONFIG_FILE)]
    assert seen["kctl"] == []  # the wrapper's own variables are not the server's


def test_the_simulated_store_keeps_each_secret_once_and_mounts_it_per_task(
    tmp_path: Path,
) -> None:
    sim = SimulatedFleet("f", tmp_path / "fleet")
    name = secret_name("f", b"value")
    assert sim.put_secret(name, b"value", {}) == name
    assert sim.put_secret(name, b"value", {}) == name  # found, not written again
    stored = tmp_path / "fleet" / "orchestrator" / "secrets" / name
    assert stored.read_bytes() == b"value" and (stored.stat().st_mode & 0o777) == 0o600
    # a task's /run/secrets: the secrets its spec names, under their file names, 0600
    orch = Orchestrator({}, sim.rt, 0.0, lambda: None, stored.parent)
    mounted = Path(orch._mount_secrets("f.1.abc", [{"SecretName": name, "File": {"Name": "x"}}]))
    assert mounted.parent == stored.parent / "run" and (mounted / "x").read_bytes() == b"value"
    assert (mounted / "x").stat().st_mode & 0o777 == 0o600
    assert mounted.stat().st_mode & 0o777 == 0o700
