"""Every KCTL_SIM_FAULT, against a real simulator process, plus the sglang shim."""

from __future__ import annotations

import importlib.util
import json
import shutil
import signal
import sys
import time
from typing import Any

import pytest

from tests.sim.conftest import READY, REPO, port_open

SPEC = (
    "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
)  # fmt: skip
BODY = {"input_ids": list(range(300)), "sampling_params": {"max_new_tokens": 8, "temperature": 0}}


def test_crash_at_start(start_sim: Any) -> None:
    sim = start_sim(env={"KCTL_SIM_FAULT": "crash_at_start"})
    assert sim.wait_exit() == 1
    log = sim.log()
    assert "simulated crash at start" in log
    assert "Load weight begin" not in log


def test_crash_while_loading(start_sim: Any) -> None:
    sim = start_sim(env={"KCTL_SIM_FAULT": "crash_while_loading", "KCTL_SIM_LOAD_S": "20"})
    assert sim.wait_exit() == 1
    log = sim.log()
    assert "Load weight begin" in log and "Load weight end" not in log
    assert "Traceback (most recent call last):" in log
    assert "RuntimeError: simulated crash while loading" in log
    assert "Uvicorn running" not in log


@pytest.mark.parametrize(
    ("line", "expected"),
    [(None, "CUDA out of memory"), ("NCCL error: unhandled system error", "NCCL error")],
)
def test_fatal_log_then_exit(start_sim: Any, line: str | None, expected: str) -> None:
    env = {"KCTL_SIM_FAULT": "fatal_log"}
    if line:
        env["KCTL_SIM_FATAL_LINE"] = line
    sim = start_sim(env=env)
    assert sim.wait_exit() == 1
    log = sim.log()
    assert expected in log
    assert "Load weight end" not in log and READY not in log


def test_never_ready(start_sim: Any) -> None:
    sim = start_sim(env={"KCTL_SIM_FAULT": "never_ready"})
    sim.wait_for_log("Uvicorn running")
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        assert sim.request("GET", "/health")[0] == 503
        assert sim.request("GET", "/health_generate")[0] == 503
        time.sleep(0.05)
    assert sim.get_json("/server_info")["status"] == "starting"
    assert READY not in sim.log()
    sim.signal(signal.SIGTERM)
    assert sim.wait_exit() == 0


def test_generate_error(start_sim: Any) -> None:
    sim = start_sim(env={"KCTL_SIM_FAULT": "generate_error"})
    sim.wait_ready()  # the warm-up passes: the fault starts with real traffic
    assert sim.request("GET", "/health")[0] == 200
    status, body = sim.generate(BODY)
    assert status == 500 and "simulated generation failure" in body["error"]["message"]
    events, _ = sim.stream(BODY)
    payloads = [p for _, p in events]
    assert payloads[-1] == "[DONE]"
    assert "error" in json.loads(payloads[0]) and len(payloads) == 2


def test_hang(start_sim: Any) -> None:
    env = {"KCTL_SIM_FAULT": "hang", "KCTL_SIM_SPEEDUP": "10", "SGLANG_HEALTH_CHECK_TIMEOUT": "5"}
    sim = start_sim(env=env)
    sim.wait_ready()
    with pytest.raises(TimeoutError):
        sim.request("POST", "/generate", BODY, timeout=0.5)
    t0 = time.monotonic()
    assert sim.request("GET", "/health", timeout=5)[0] == 503
    assert 0.4 < time.monotonic() - t0 < 2.0  # 5 s health timeout at 10x
    t0 = time.monotonic()
    sim.signal(signal.SIGTERM)
    assert sim.wait_exit() == 0
    assert time.monotonic() - t0 < 1.0


def test_hang_with_health_generation_off(start_sim: Any) -> None:
    env = {"KCTL_SIM_FAULT": "hang", "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "false"}
    sim = start_sim(env=env)
    sim.wait_ready()
    assert sim.request("GET", "/health", timeout=2)[0] == 200


def test_wrong_output(start_sim: Any) -> None:
    good = start_sim()
    bad = start_sim(env={"KCTL_SIM_FAULT": "wrong_output"})
    good.wait_ready()
    bad.wait_ready()
    _, g = good.generate(BODY)
    _, b = bad.generate(BODY)
    assert len(g["output_ids"]) == len(b["output_ids"]) == 8
    assert g["output_ids"] != b["output_ids"]
    assert bad.generate(BODY)[1]["output_ids"] == b["output_ids"]  # still deterministic


def test_kernel_declined_serves_on_triton_rows(start_sim: Any) -> None:
    env = {"KDTREE_VERIFY": "1", "KCTL_SIM_FAULT": "kernel_declined"}
    sim = start_sim(*SPEC, "--disable-cuda-graph", env=env)
    log = sim.wait_for_log(READY)
    assert 'kdtree-verify: declined reason="simulated decline' in log
    assert "kdtree-verify: active" not in log
    info = sim.get_json("/server_info")
    assert info["verify_path"] == "triton" and info["kdtree_verify"] is True
    sim.generate({"input_ids": [1] * 23000, "sampling_params": {"max_new_tokens": 2}})
    assert sim.get_json("/server_info")["internal_states"][0]["last_gen_throughput"] == 6.7


def test_kernel_declined_for_another_backend(start_sim: Any) -> None:
    sim = start_sim(*SPEC, "--attention-backend", "flashinfer", env={"KDTREE_VERIFY": "1"})
    log = sim.wait_for_log(READY)
    assert "kdtree-verify: declined" in log and "flashinfer" in log


def test_shim_runs_the_simulator_as_sglang_launch_server(start_sim: Any) -> None:
    # literally `python3 -m sglang.launch_server ARGS`, as in the serving image
    python3 = shutil.which("python3") or sys.executable
    shim = REPO / "kctl" / "sim" / "shim"
    sim = start_sim(
        "--model-path", "/m", *SPEC,
        module="sglang.launch_server",
        extra_pythonpath=(str(shim),),
        env={"KDTREE_VERIFY": "1"},
        python=python3,
    )  # fmt: skip
    log = sim.wait_for_log(READY)
    assert "kdtree-verify: active" in log
    assert sim.get_json("/model_info")["model_path"] == "/m"
    assert sim.get_json("/server_info")["verify_path"] == "kdtree"
    assert port_open(sim.port)
    sim.signal(signal.SIGTERM)
    assert sim.wait_exit() == 0


@pytest.mark.skipif(
    importlib.util.find_spec("sglang") is not None, reason="a real sglang is installed here"
)
def test_shim_needs_the_shim_on_the_path(start_sim: Any) -> None:
    sim = start_sim(module="sglang.launch_server")  # no shim dir: no sglang package here
    assert sim.wait_exit() == 1
    assert "No module named sglang" in sim.log() or "No module named 'sglang'" in sim.log()
