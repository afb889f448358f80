"""A keyed fleet on Kubernetes: the router and the Argo smoke Job send the profile's API
key, read from its Secret through ``secretKeyRef`` inside the pod; the rendered objects
name the Secret and never hold the value. The Job's check and the router's launch run
here as the pods run them (python3 -c), against a small server that enforces the key."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kctl.fleet.loader import load_fleet
from kctl.k8s import apikey, argo
from kctl.k8s.render import render
from kctl.profile.loader import load_profile
from kctl.profile.model import Profile, SecretRef
from tests.k8s.conftest import EXAMPLE, KDTREE

KEY = "sk-test-router-and-smoke-4b1e"
KEY_REF = {"secretKeyRef": {"name": "kctl-secrets", "key": "sglang-api-key"}}


def _keyed() -> Profile:
    profile = load_profile(KDTREE)
    server = dataclasses.replace(profile.server, api_key=SecretRef(env="KCTL_TEST_API_KEY"))
    return dataclasses.replace(profile, server=server)


def _containers(objects: tuple[dict[str, Any], ...]) -> dict[str, dict[str, Any]]:
    out = {}
    for obj in objects:
        if obj["kind"] == "Deployment" and obj["metadata"]["name"].endswith("-router"):
            out["router"] = obj["spec"]["template"]["spec"]["containers"][0]
        if obj["kind"] == "AnalysisTemplate":
            job = obj["spec"]["metrics"][0]["provider"]["job"]["spec"]["template"]["spec"]
            out["smoke"] = job["containers"][0]
    return out


def test_the_router_and_the_smoke_job_read_the_key_from_its_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KCTL_TEST_API_KEY", KEY)  # a value kctl must not read for a render
    objects = render(_keyed(), load_fleet(EXAMPLE), with_argo=True).objects
    assert KEY not in json.dumps(objects)
    found = _containers(objects)
    assert set(found) == {"router", "smoke"}
    for container in found.values():
        assert container["env"] == [{"name": apikey.ENV, "valueFrom": KEY_REF}]
    # the serving pods mount the same Secret key as SGLang's --config
    serving = json.dumps(objects[0])
    assert '"secretName": "kctl-secrets", "items": [{"key": "sglang-api-key"' in serving
    assert found["router"]["command"] == ["python3", "-c", apikey.ROUTER_LAUNCH]
    assert "--api-key" not in found["router"]["args"]  # added inside the pod
    assert found["smoke"]["command"][:3] == ["python3", "-c", argo.SMOKE]


def test_without_a_key_the_router_and_the_job_are_as_before() -> None:
    found = _containers(render(load_profile(KDTREE), load_fleet(EXAMPLE), with_argo=True).objects)
    assert found["router"]["command"] == ["python3", "-m", "sglang_router.launch_router"]
    assert "env" not in found["router"] and "env" not in found["smoke"]


def test_the_router_launch_reads_the_key_from_a_custom_secret_key() -> None:
    profile = _keyed()
    server = dataclasses.replace(profile.server, api_key=SecretRef(env="X", k8s="gw/key"))
    target_profile = dataclasses.replace(profile, server=server)
    found = _containers(render(target_profile, load_fleet(EXAMPLE), with_argo=True).objects)
    want = [{"name": apikey.ENV, "valueFrom": {"secretKeyRef": {"name": "gw", "key": "key"}}}]
    assert found["router"]["env"] == found["smoke"]["env"] == want


class _Keyed(BaseHTTPRequestHandler):
    """SGLang's middleware in miniature: /health* open, everything else needs the key."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._reply(200, {}) if self.path.startswith("/health") else self._reply(404, {})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Authorization") != f"Bearer {KEY}":
            self._reply(401, {"error": "Unauthorized"})
            return
        self.server.generations += 1  # type: ignore[attr-defined]
        self._reply(200, {"text": " Paris"})


@pytest.fixture
def keyed_server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Keyed)
    httpd.generations = 0  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


def _run(
    code: str, args: list[str], config: str | None, **extra: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != apikey.ENV} | extra
    if config is not None:
        env[apikey.ENV] = config
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    "config",
    [f"api-key: {KEY}\n", f"api-key: '{KEY}'", json.dumps({"api-key": KEY})],
    ids=["yaml-line", "quoted", "json"],
)
def test_the_smoke_check_sends_the_key_the_secret_holds(
    keyed_server: ThreadingHTTPServer, config: str
) -> None:
    url = f"http://127.0.0.1:{keyed_server.server_address[1]}"
    r = _run(argo.SMOKE, [url, "2"], config)
    assert r.returncode == 0, r.stderr
    assert "canary answered 2 generations" in r.stdout
    assert keyed_server.generations == 2  # type: ignore[attr-defined]


def test_the_smoke_check_without_the_key_fails_on_401(keyed_server: ThreadingHTTPServer) -> None:
    url = f"http://127.0.0.1:{keyed_server.server_address[1]}"
    r = _run(argo.SMOKE, [url, "1"], None)
    assert r.returncode != 0 and "401" in r.stderr, r.stderr
    bad = _run(argo.SMOKE, [url, "1"], "something: else\n")
    assert bad.returncode != 0 and "holds no 'api-key: <the key>' line" in bad.stderr
    assert keyed_server.generations == 0  # type: ignore[attr-defined]


def test_the_router_launch_adds_the_key_in_process_only(tmp_path: Path) -> None:
    # a stand-in sglang_router that reports the argv it parses and the process's own
    pkg = tmp_path / "sglang_router"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_router.py").write_text(
        "import json, sys\n"
        "cmdline = open('/proc/self/cmdline', 'rb').read().decode().split('\\0')\n"
        "print(json.dumps({'argv': sys.argv[1:], 'cmdline': cmdline}))\n"
    )
    args = ["--host", "0.0.0.0", "--port", "30000"]
    r = _run(apikey.ROUTER_LAUNCH, args, f"api-key: {KEY}", PYTHONPATH=str(tmp_path))
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout)
    assert seen["argv"] == [*args, "--api-key", KEY]
    assert not any(KEY in part for part in seen["cmdline"])  # not on the command line
    plain = _run(apikey.ROUTER_LAUNCH, args, None, PYTHONPATH=str(tmp_path))
    assert json.loads(plain.stdout)["argv"] == args
