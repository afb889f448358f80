"""Security cases: secrets configured the documented way never appear in clear (output,
store, logs, argv), state only its owner reads, and what kctl refuses (a literal secret,
``--api-key`` in extra_args, symlinks in the state dir, foreign profile references, a
plain-TCP engine), each refused without touching its target."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.faults.harness import Case

TOKEN = "hf_tokenVALUE4b1d9e"  # noqa: S105 - a test value, the one every output is grepped for
KEY = "sk-apikeyVALUE77c3a0"
SECRET_ENV = {"KCTL_TEST_HF_TOKEN": TOKEN}


@pytest.fixture
def umask022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _with_secrets(case: Case, name: str, key_file: Path, **env: str) -> str:
    data: dict[str, Any] = yaml.safe_load(
        Path(case.cand if name != "base.yaml" else case.base).read_text()
    )
    data["server"]["secrets"] = {"HF_TOKEN": {"env": "KCTL_TEST_HF_TOKEN"}}
    data["server"]["api_key"] = {"file": str(key_file)}
    if env:
        data["server"].setdefault("env", {}).update(env)
    return case.write(name, data)


def _clean(where: str, text: str) -> None:
    assert TOKEN not in text, f"the token is in {where}"
    assert KEY not in text, f"the API key is in {where}"


def test_secrets_stay_references_everywhere(case: Case, umask022: None) -> None:
    key_file = case.tmp / "api-key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    base = _with_secrets(case, "base.yaml", key_file)
    cand = _with_secrets(case, "cand.yaml", key_file)
    crash = _with_secrets(case, "crash.yaml", key_file, KCTL_SIM_FAULT="crash_while_loading")

    plan = case.run("plan", cand, env=SECRET_ENV)
    assert plan.code == 0, str(plan)
    assert "HF_TOKEN=<secret:env KCTL_TEST_HF_TOKEN>" in plan.out
    assert f"api key: <secret:file {key_file}>" in plan.out
    outputs = {
        "plan": plan.text,
        "plan --json": case.run("plan", cand, "--json", env=SECRET_ENV).text,
    }

    first = case.run("deploy", base, env=SECRET_ENV)
    assert first.code == 0, str(first)
    outputs["deploy"] = first.text
    # the simulator enforces the key as SGLang does: /health open, the rest 401 without it
    url = f"http://127.0.0.1:{case.port}"
    assert requests.get(f"{url}/health", timeout=5).status_code == 200
    assert requests.get(f"{url}/get_model_info", timeout=5).status_code == 401
    auth = {"Authorization": f"Bearer {KEY}"}
    assert requests.get(f"{url}/get_model_info", headers=auth, timeout=5).status_code == 200
    cmdlines = {pid: Path(f"/proc/{pid}/cmdline").read_bytes().decode() for pid in case.servers()}
    assert cmdlines, "no server to look at"

    failed = case.run("deploy", crash, env=SECRET_ENV)
    assert failed.code == 3, str(failed)
    assert "last log lines" in failed.text or "log" in failed.text
    outputs["failed deploy"] = failed.text
    for args in (("status",), ("status", "--json"), ("history",), ("history", "--json"), ("logs",)):
        outputs[" ".join(args)] = case.run(*args, env=SECRET_ENV).text
    for where, text in {
        **outputs,
        **{f"/proc/{p}/cmdline": c for p, c in cmdlines.items()},
    }.items():
        _clean(where, text)

    state = case.state / "simulate"
    with sqlite3.connect(case.db) as conn:
        _clean("the store dump", "\n".join(conn.iterdump()))
    logs = list((state / "logs").iterdir())
    assert logs and any("server_args=" in p.read_text() for p in logs)  # SGLang's line, scrubbed
    for path in logs:
        _clean(str(path), path.read_text(errors="replace"))

    # every directory of the state 0700, every file 0600, though the umask was 022
    for path in [case.state, *case.state.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), f"{path}: {mode:o}"
    case.run("stop", "--yes", env=SECRET_ENV)


def test_a_literal_secret_is_refused_with_the_fix(case: Case) -> None:
    data = yaml.safe_load(Path(case.base).read_text())
    data["server"]["env"] = {"HF_TOKEN": TOKEN}
    r = case.run("validate", case.write("clear.yaml", data))
    assert r.code == 2, str(r)
    assert "server.env.HF_TOKEN: looks like a secret" in r.text
    assert "server.secrets.HF_TOKEN.env: HF_TOKEN" in r.text
    _clean("the refusal", r.text)


def test_api_key_in_extra_args_is_refused_for_the_field(case: Case) -> None:
    data = yaml.safe_load(Path(case.base).read_text())
    data["server"]["extra_args"] = [f"--api-key={KEY}"]
    r = case.run("validate", case.write("argv.yaml", data))
    assert r.code == 2, str(r)
    assert "server.api_key" in r.text
    _clean("the refusal", r.text)


def test_a_missing_secret_stops_the_deploy_before_anything_changes(case: Case) -> None:
    key_file = case.tmp / "api-key"
    key_file.write_text(KEY)
    key_file.chmod(0o600)
    r = case.run("deploy", _with_secrets(case, "base.yaml", key_file))  # token not exported
    assert r.code == 5, str(r)
    assert "KCTL_TEST_HF_TOKEN is not set" in r.err
    assert case.servers() == []


@pytest.mark.parametrize("name", ["lock.guard", "kctl.db", "logs"])
def test_a_symlink_in_the_state_dir_is_refused_untouched(case: Case, name: str) -> None:
    state = case.state / "simulate"
    state.mkdir(parents=True, mode=0o700)
    case.state.chmod(0o700)
    target = case.tmp / f"target-{name}"
    if name == "logs":
        target.mkdir()
    (state / name).symlink_to(target)
    r = case.run("deploy", case.base)
    assert r.code == 5, str(r)
    assert "symlink" in r.err and "touched nothing" in r.err
    if name == "logs":
        assert list(target.iterdir()) == []
    else:
        assert not target.exists()
    assert case.servers() == []


def test_a_symlinked_build_log_is_refused_untouched(tmp_path: Path) -> None:
    from kctl.errors import UnsafeState
    from kctl.image.build import _new_log

    target = tmp_path / "precious"
    target.write_text("keep me")
    (tmp_path / "builds").mkdir()
    log = tmp_path / "builds" / "kctl-x.log"
    log.symlink_to(target)
    with pytest.raises(UnsafeState, match="symlink"):
        _new_log(log)
    assert target.read_text() == "keep me"


def test_a_state_dir_others_can_write_is_refused(case: Case) -> None:
    state = case.state / "simulate"
    state.mkdir(parents=True)
    state.chmod(0o777)
    r = case.run("deploy", case.base)
    assert r.code == 5, str(r)
    assert "other users can write it" in r.err and "chmod 700" in r.err


def test_a_log_path_outside_the_state_dir_is_not_read(tmp_path: Path) -> None:
    from kctl.errors import UnsafeState
    from kctl.runtime.base import Instance
    from kctl.runtime.local import LocalRuntime

    outside = tmp_path / "elsewhere.txt"
    outside.write_text("not kctl's")
    runtime = LocalRuntime(tmp_path / "state")
    inst = Instance(runtime="local", deployment_id="d", ref="pid:1:0", log_path=str(outside))
    with pytest.raises(UnsafeState, match="outside the state dir"):
        runtime.logs(inst)


@pytest.mark.parametrize("field", ["extends", "baseline"])
def test_a_profile_reference_to_a_foreign_file_is_refused_unechoed(case: Case, field: str) -> None:
    creds = case.write("creds.json", json.dumps({"auths": {"reg": {"auth": TOKEN}}}))
    fifo = case.tmp / "fifo.yaml"
    os.mkfifo(fifo, 0o600)
    for target, why in ((creds, "is not a kctl profile"), (str(fifo), "is not a regular file")):
        body = {"server": {"model_path": "/m"}, field: os.path.basename(target)}
        r = case.run("validate", case.write("ref.yaml", body), timeout=20)
        assert r.code == 2, str(r)
        assert f"ref.yaml: {field}: " in r.text and why in r.text
        _clean("the refusal", r.text)


def test_a_plain_tcp_engine_is_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from kctl.errors import RuntimeUnavailable
    from kctl.fleet.images import connect_engine
    from kctl.runtime.docker.engine import connect

    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    with pytest.raises(RuntimeUnavailable, match="plain TCP") as info:
        connect_engine("tcp://192.0.2.1:2375")
    assert "DOCKER_TLS_VERIFY" in str(info.value)
    monkeypatch.setenv("DOCKER_HOST", "tcp://192.0.2.1:2375")
    with pytest.raises(RuntimeUnavailable, match="plain TCP"):
        connect()


def test_the_server_gets_an_explicit_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from kctl.runtime.base import LaunchSpec
    from kctl.runtime.local import LocalRuntime

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-for-the-server")
    spec = LaunchSpec("d", "p", "h", ("true",), (("A", "1"),), "127.0.0.1", 1)
    env = LocalRuntime(tmp_path).server_env(spec, {"HF_TOKEN": "t"})
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert env["A"] == "1" and env["HF_TOKEN"] == "t" and "PATH" in env


def test_rendered_k8s_objects_name_secrets_never_values(tmp_path: Path) -> None:
    import dataclasses

    from kctl.fleet.loader import load_fleet
    from kctl.k8s.render import render
    from kctl.profile.loader import load_profile
    from kctl.profile.model import SecretRef
    from tests.k8s.conftest import EXAMPLE, KDTREE

    profile = load_profile(KDTREE)
    server = dataclasses.replace(
        profile.server,
        secrets=(
            ("HF_TOKEN", SecretRef(env="KCTL_TEST_HF_TOKEN")),
            ("DB_PASSWORD", SecretRef(file="/etc/db", k8s="db/password")),
        ),
    )
    os.environ["KCTL_TEST_HF_TOKEN"] = TOKEN
    try:
        rendered = render(dataclasses.replace(profile, server=server), load_fleet(EXAMPLE))
    finally:
        del os.environ["KCTL_TEST_HF_TOKEN"]
    text = json.dumps(rendered.objects)
    _clean("the rendered objects", text)
    assert '"secretKeyRef": {"name": "kctl-secrets", "key": "hf-token"}' in text
    assert '"secretKeyRef": {"name": "db", "key": "password"}' in text
    keyed = dataclasses.replace(profile.server, api_key=SecretRef(env="KCTL_TEST_HF_TOKEN"))
    text = json.dumps(
        render(dataclasses.replace(profile, server=keyed), load_fleet(EXAMPLE)).objects
    )
    _clean("the rendered objects", text)
    assert '"--config", "/run/kctl/sglang-config.yaml"' in text
    assert '"secretName": "kctl-secrets", "items": [{"key": "sglang-api-key"' in text


def _keyed_fleet(case: Case) -> tuple[Path, str, str, int]:
    """The docker tests' baseline and candidate with a token and an API key as references
    (``(profiles dir, fleet name, fleet file, first port)``), on a 2-replica fleet."""
    from tests.fleet.ports import free_range

    key_file = case.tmp / "api-key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    profiles = case.tmp / "fleet-profiles"
    profiles.mkdir()
    docker_profiles = Path(__file__).resolve().parents[1] / "docker" / "profiles"
    for name in ("baseline", "candidate"):
        text = (docker_profiles / f"{name}.yaml").read_text()
        # 30 s of health deadline is 0.15 s at the simulator's 200x: room for its load
        data: dict[str, Any] = yaml.safe_load(text.replace("deadline_s: 30", "deadline_s: 600"))
        data["server"]["secrets"] = {"HF_TOKEN": {"env": "KCTL_TEST_HF_TOKEN"}}
        data["server"]["api_key"] = {"file": str(key_file)}
        if name == "baseline":  # the candidate extends it
            # the case is about the key, not the verdict: a gate made noisy by a loaded
            # machine (INCONCLUSIVE) still promotes, so the smoke gates run too
            data["gate"]["policy"]["on_inconclusive"] = "promote"
        (profiles / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    first = free_range(3)
    name = f"kf-{os.getpid() % 100000}"
    fleet = case.write(
        "fleet.yaml",
        f"kind: fleet\nname: {name}\nreplicas: 2\ngpus_per_replica: 0\n"
        f"ports: {{first: {first}}}\n"
        "rollout: {canary: 1, parallelism: 1, monitor_s: 2, smoke_requests: 2}\n",
    )
    return profiles, name, fleet, first


def test_a_fleet_passes_secrets_as_docker_secrets_and_gates_with_the_key(
    case: Case, umask022: None
) -> None:
    """A 2-replica simulated fleet whose profiles name a token and an API key: the
    replicas get them as Docker secrets (created at deploy time, mounted per task), the
    canary and smoke gates pass against replicas that answer 401 without the key, and no
    output, store, orchestrator state, log or argv holds either value."""
    from kctl.runtime.local import LocalRuntime

    profiles, name, fleet, first = _keyed_fleet(case)
    orchestrator = case.state / "simulate" / "fleets" / name / "orchestrator"
    try:
        outputs: dict[str, str] = {}
        for profile, outcome in (("baseline", "ESTABLISHED"), ("candidate", "PROMOTED")):
            r = case.run("deploy", str(profiles / f"{profile}.yaml"), "--fleet", fleet,
                         env=SECRET_ENV, timeout=240)  # fmt: skip
            assert r.code == 0 and outcome in r.out, str(r)
            outputs[f"deploy {profile}"] = r.text
        # the canary gate and both smoke gates ran against replicas that demand the key
        assert outputs["deploy candidate"].count("smoke gate passed") == 2
        for port in (first, first + 1):
            url = f"http://127.0.0.1:{port}"
            assert requests.get(f"{url}/health", timeout=5).status_code == 200
            assert requests.get(f"{url}/get_model_info", timeout=5).status_code == 401
            auth = {"Authorization": f"Bearer {KEY}"}
            assert requests.get(f"{url}/get_model_info", headers=auth, timeout=5).status_code == 200
        for args in (("status", "--fleet", fleet), ("--json", "status", "--fleet", fleet),
                     ("history", "--fleet", fleet), ("plan", str(profiles / "candidate.yaml"), "--fleet", fleet)):  # fmt: skip
            outputs[" ".join(args)] = case.run(*args, env=SECRET_ENV).text
        # each replica got the token in its environment and the key in a --config file
        # (the local runtime's, from the task's mounted secrets), neither on its command line
        running = LocalRuntime(orchestrator).running()
        assert len(running) == 2, running
        for inst in running:
            pid = int(inst.ref.split(":")[1])
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert f"HF_TOKEN={TOKEN}".encode() in environ
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode()
            assert "--config" in cmdline
            outputs[f"/proc/{pid}/cmdline"] = cmdline
        for where, text in outputs.items():
            _clean(where, text)
        with sqlite3.connect(orchestrator.parent / "kctl.db") as conn:
            _clean("the fleet's store dump", "\n".join(conn.iterdump()))
        _clean("the orchestrator's state", (orchestrator / "state.json").read_text())
        for path in (orchestrator.parent / "logs", orchestrator / "logs"):
            for log in path.glob("*.log") if path.is_dir() else []:
                _clean(str(log), log.read_text(errors="replace"))
        # the secrets themselves: Docker secrets named by a digest, 0600 in 0700 directories
        stored = sorted((orchestrator / "secrets").glob(f"kctl-{name}-*"))
        assert len(stored) == 2, stored  # the token and the key's config, shared by both
        for path in [case.state, *case.state.rglob("*")]:
            mode = stat.S_IMODE(path.lstat().st_mode)
            assert mode == (0o700 if path.is_dir() else 0o600), f"{path}: {mode:o}"
        spec = json.loads((orchestrator / "state.json").read_text())["services"]["main"]["spec"]
        mounted = spec["TaskTemplate"]["ContainerSpec"]["Secrets"]
        assert {m["SecretName"] for m in mounted} == {p.name for p in stored}
    finally:
        case.run("stop", "--fleet", fleet, "--yes", env=SECRET_ENV)
        for inst in LocalRuntime(orchestrator).running():  # what stop left, if it failed
            LocalRuntime(orchestrator).stop(inst, 5)


def test_a_fleet_secret_not_exported_stops_the_rollout_before_any_change(case: Case) -> None:
    profiles, name, fleet, _ = _keyed_fleet(case)
    r = case.run("deploy", str(profiles / "baseline.yaml"), "--fleet", fleet)  # no token
    assert r.code == 5, str(r)
    assert "server.secrets.HF_TOKEN: <secret:env KCTL_TEST_HF_TOKEN>" in r.err
    assert "is not set" in r.err
    orchestrator = case.state / "simulate" / "fleets" / name / "orchestrator"
    assert not (orchestrator / "secrets").exists()  # no secret created, no replica
    state = orchestrator / "state.json"
    assert not state.exists() or not json.loads(state.read_text())["services"]


def test_an_ssh_engine_without_its_extra_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kctl.errors import RuntimeUnavailable
    from kctl.fleet.images import connect_engine

    monkeypatch.setitem(sys.modules, "paramiko", None)  # `import paramiko` fails
    with pytest.raises(RuntimeUnavailable) as info:
        connect_engine("ssh://root@gpu-b")  # a fleet file's swarm.engines entry
    assert info.value.exit_code == 5
    assert "ssh://root@gpu-b is an ssh:// engine" in info.value.message
    assert "pip install 'kctl[ssh]'" in (info.value.hint or "")


def test_shipped_profiles_bind_loopback_and_an_open_fleet_says_so(tmp_path: Path) -> None:
    from kctl.controller.context import Context
    from kctl.fleet.loader import load_fleet
    from kctl.fleet.preview import plan_fleet
    from kctl.profile.loader import load_profile
    from tests.k8s.conftest import PROFILES, REPO, TRITON

    assert {p.name: load_profile(p).server.host for p in PROFILES} == {
        p.name: "127.0.0.1" for p in PROFILES
    }
    fleet = REPO / "fleets" / "example.yaml"
    assert load_fleet(fleet).bind == "0.0.0.0"  # on purpose, in its own file

    def warnings(profile: Path, fleet_file: Path) -> list[str]:
        ctx = Context(state_dir=tmp_path / "state")
        return list(plan_fleet(ctx, str(profile), str(fleet_file)).warnings)

    open_ = [w for w in warnings(TRITON, fleet) if "bind: '0.0.0.0'" in w]
    assert len(open_) == 1 and "sets no server.api_key" in open_[0], open_
    assert "fix: set server.api_key" in open_[0] and str(fleet) in open_[0]
    keyed = tmp_path / "keyed.yaml"
    keyed.write_text(f"extends: {TRITON}\nserver: {{api_key: {{env: KCTL_SGLANG_API_KEY}}}}\n")
    assert not [w for w in warnings(keyed, fleet) if "every interface" in w]
    # a fleet file without bind: each replica binds the profile's loopback, no warning
    closed = tmp_path / "closed.yaml"
    closed.write_text(
        "\n".join(x for x in fleet.read_text().splitlines() if not x.startswith("bind:"))
    )
    assert load_fleet(closed).bind is None
    assert not [w for w in warnings(TRITON, closed) if "every interface" in w]
