"""wait_healthy against the REAL simulator (``python -m kctl.sim``) with its fault
injection, started by the real LocalRuntime."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kctl.errors import HealthFailed
from kctl.health import HealthReport, wait_healthy
from kctl.profile.model import HealthSpec, VerifyKernel
from kctl.runtime.base import Instance, LaunchSpec
from kctl.runtime.local import LocalRuntime

SPECULATIVE = (
    "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "sim/eagle3",
    "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4",
)  # fmt: skip

Wait = Callable[..., HealthReport]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def sim_wait(tmp_path: Path) -> Iterator[Wait]:
    """Start a simulator with the given env and wait for it to become healthy."""
    runtime = LocalRuntime(tmp_path)
    started: list[Instance] = []

    def _run(
        deadline_s: float = 20.0,
        verify_kernel: VerifyKernel = "none",
        load_s: str = "2",
        **env: str,
    ) -> HealthReport:
        port = free_port()
        spec = LaunchSpec(
            deployment_id=f"sim{len(started)}",
            profile_name="test",
            profile_hash="h",
            argv=(sys.executable, "-m", "kctl.sim", "--model-path", "sim/kimi", "--port",
                  str(port), "--attention-backend", "triton", *SPECULATIVE),
            env=tuple({"KCTL_SIM_SPEEDUP": "50", "KCTL_SIM_LOAD_S": load_s, **env}.items()),
            host="127.0.0.1",
            port=port,
        )  # fmt: skip
        inst = runtime.start(spec)
        started.append(inst)
        return wait_healthy(
            runtime,
            inst,
            HealthSpec(deadline_s=deadline_s, poll_interval_s=0.05, request_timeout_s=1.0),
            host="127.0.0.1",
            port=port,
            verify_kernel=verify_kernel,
        )

    yield _run
    for inst in started:
        runtime.stop(inst, timeout_s=5)


def test_healthy_kernel_server_reports_its_activation_line(sim_wait: Wait) -> None:
    report = sim_wait(verify_kernel="kdtree", KDTREE_VERIFY="1")
    assert [p.phase for p in report.phases] == ["process", "port", "health", "generate", "kernel"]
    assert report.kernel_line is not None
    assert "kdtree-verify: active kernel=kdtree_mla-" in report.kernel_line
    assert report.ready_line_seen


def test_plain_triton_server_is_healthy_without_a_kernel_line(sim_wait: Wait) -> None:
    report = sim_wait()
    assert report.kernel_line is None
    assert report.phases[1].seconds > 0  # the port stayed closed while "loading"


def test_crash_at_start_fails_fast(sim_wait: Wait) -> None:
    t0 = time.monotonic()
    with pytest.raises(HealthFailed) as err:
        sim_wait(deadline_s=60, KCTL_SIM_FAULT="crash_at_start")
    assert time.monotonic() - t0 < 15
    assert "exited during" in err.value.message and "exited with code 1" in err.value.message
    assert "simulated crash at start" in err.value.log_tail


def test_crash_while_loading_names_the_exception(sim_wait: Wait) -> None:
    """A traceback is reported by the exception it ends with, not by its first line."""
    with pytest.raises(HealthFailed) as err:
        sim_wait(deadline_s=60, KCTL_SIM_FAULT="crash_while_loading")
    assert err.value.matched_line is not None
    assert err.value.matched_line.startswith(
        "RuntimeError: simulated crash while loading weights"
    ), err.value.matched_line
    assert err.value.phase in ("process", "port")
    assert "simulated crash while loading" in err.value.log_tail


def test_fatal_log_line_ends_the_wait_before_the_exit(sim_wait: Wait) -> None:
    with pytest.raises(HealthFailed) as err:
        sim_wait(deadline_s=60, load_s="20", KCTL_SIM_FAULT="fatal_log",
                 KCTL_SIM_FATAL_LINE="RuntimeError: NCCL error: unhandled system error")  # fmt: skip
    assert err.value.matched_line is not None
    assert err.value.matched_line.endswith("RuntimeError: NCCL error: unhandled system error")


def test_never_ready_is_stuck_in_health(sim_wait: Wait) -> None:
    with pytest.raises(HealthFailed) as err:
        sim_wait(deadline_s=1.5, KCTL_SIM_FAULT="never_ready")
    assert err.value.phase == "health"
    assert "stuck in phase 'health' (GET /health: HTTP 503" in err.value.message


def test_generation_errors_are_stuck_in_generate(sim_wait: Wait) -> None:
    with pytest.raises(HealthFailed) as err:
        sim_wait(deadline_s=1.5, KCTL_SIM_FAULT="generate_error")
    assert err.value.phase == "generate"
    assert "POST /generate" in err.value.message


def test_declined_kernel_fails_a_kernel_profile(sim_wait: Wait) -> None:
    with pytest.raises(HealthFailed) as err:
        sim_wait(verify_kernel="kdtree", KDTREE_VERIFY="1", KCTL_SIM_FAULT="kernel_declined")
    assert err.value.matched_line is not None
    assert "kdtree-verify: declined reason=" in err.value.matched_line


def test_active_kernel_fails_a_plain_profile(sim_wait: Wait) -> None:
    with pytest.raises(HealthFailed, match="server.verify_kernel: none"):
        sim_wait(verify_kernel="none", KDTREE_VERIFY="1")
