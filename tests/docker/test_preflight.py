"""Preflight decisions (pure) and the nvidia-smi reading, with a scripted nvidia-smi."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from kctl.errors import PreflightFailed
from kctl.profile.model import RuntimeSpec, VolumeSpec
from kctl.runtime.base import Instance
from kctl.runtime.docker.preflight import (
    archs_cover,
    check_archs,
    check_mounts,
    check_port,
    gpu_compute_caps,
)


@pytest.mark.parametrize(
    ("archs", "cap", "ok"),
    [
        (("12.0",), "12.0", True),  # RTX PRO 6000 Blackwell
        (("12.0",), "12.1", True),  # same major, newer minor runs sm_120 SASS
        (("12.0",), "9.0", False),  # H200 needs sm_90
        (("12.0",), "10.0", False),  # B200 is not sm_120
        (("9.0a",), "9.0", True),
        (("9.0a",), "9.1", False),  # arch-specific features: exactly 9.0
        (("8.0+PTX",), "12.0", True),  # PTX JIT for any newer GPU
        (("12.0+PTX",), "9.0", False),
        (("9.0", "12.0"), "9.0", True),
        ((), "12.0", False),
    ],
)
def test_archs_cover(archs: tuple[str, ...], cap: str, ok: bool) -> None:
    assert archs_cover(archs, cap) is ok


def test_check_archs_names_the_fix() -> None:
    assert check_archs(["12.0"], ["12.0"] * 8, where="p.yaml") == []
    assert check_archs(["12.0"], ["9.0", "9.0"], where="p.yaml") == [
        "p.yaml: the image is built for CUDA archs 12.0 but the GPUs have compute capability "
        '9.0; set image.cuda_archs to ["9.0"] (a kernel without a matching arch fails with '
        '"no kernel image is available" only after the model has loaded)'
    ]


def _smi(stdout: str, rc: int = 0, seen: list[list[str]] | None = None) -> Any:
    def run(cmd: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        if seen is not None:
            seen.append(cmd)
        return subprocess.CompletedProcess(cmd, rc, stdout=stdout, stderr="boom" if rc else "")

    return run


def test_gpu_compute_caps_reads_nvidia_smi() -> None:
    seen: list[list[str]] = []
    assert gpu_compute_caps("all", run=_smi("12.0\n12.0\n", seen=seen)) == ["12.0", "12.0"]
    assert seen[0] == ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"]
    gpu_compute_caps((0, 3), run=_smi("12.0\n12.0\n", seen=seen))
    assert seen[1][-1] == "--id=0,3"


def test_gpu_compute_caps_failures_point_at_the_override() -> None:
    with pytest.raises(PreflightFailed, match="nvidia-smi exited with 9: boom") as err:
        gpu_compute_caps("all", run=_smi("", rc=9))
    assert "KCTL_GPU_COMPUTE_CAP=12.0" in str(err.value)
    with pytest.raises(PreflightFailed, match="not a compute capability"):
        gpu_compute_caps("all", run=_smi("[N/A]\n"))


def test_check_mounts(tmp_path: Path) -> None:
    rt = RuntimeSpec(
        volumes=(VolumeSpec(str(tmp_path), "/models"), VolumeSpec(str(tmp_path / "nope"), "/hf"))
    )
    assert check_mounts(rt, where="p.yaml") == [
        f"p.yaml: runtime.volumes[1].host: {tmp_path / 'nope'} does not exist on this host; "
        "create it or fix the path (docker would create an empty root-owned directory instead)"
    ]


def test_check_port() -> None:
    current = Instance(runtime="docker", deployment_id="d1", ref="abc", port=30000)
    assert check_port(30000, None, replacing=None, replacing_running=False) == []
    assert check_port(30000, "kctl container x", replacing=current, replacing_running=True) == []
    assert check_port(
        30000, "a process listening on 127.0.0.1:30000", replacing=None, replacing_running=False
    ) == [
        "port 30000 is taken by a process listening on 127.0.0.1:30000; stop it, or serve "
        "on a free port: --set server.port=PORT (the baseline too), or server.port in the "
        "profiles"
    ]
    # the deployment being replaced is not running: whoever holds the port is someone else
    assert check_port(30000, "x", replacing=current, replacing_running=False) != []
