"""What both kernel benchmarks (``kernels/bench/bench_verify.py``, ``bench_sglang_step.py``)
measure and record the same way: the device-to-device copy bandwidth their floors divide by,
and the run's facts (the command, the checkout's commit, the GPU, its driver and clocks)."""

from __future__ import annotations

import shlex
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[2]

#: nvidia-smi's names of what run_info records about the GPU (``--query-gpu``).
GPU_FIELDS = (
    "name",
    "driver_version",
    "clocks.sm",
    "clocks.mem",
    "clocks.max.sm",
    "clocks.max.mem",
    "clocks.applications.graphics",
)


def copy_bandwidth(gib: int = 2, reps: int = 20) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written: a
    torch ``copy_`` of ``gib`` GiB, three warm-up copies, the median of ``reps`` timed with CUDA
    events. The buffers are freed before it returns."""
    n = gib << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    event: Any = torch.cuda.Event  # untyped in some torch releases
    samples = []
    for _ in range(reps):
        start = event(enable_timing=True)
        end = event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e-3)
    del src, dst
    torch.cuda.empty_cache()
    return float(2 * n / statistics.median(samples))


def git_commit(repo: Path = REPO) -> str | None:
    """The checkout's commit, with ``+dirty`` when tracked files differ from it; None outside
    a git checkout or without git."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return f"{sha}+dirty" if dirty else sha


def gpu_facts(device: int | None = None) -> dict[str, str | None]:
    """GPU_FIELDS of the device as nvidia-smi reports them now (clocks in MHz); every value None
    when nvidia-smi is missing or does not answer, with the reason under "error"."""
    facts: dict[str, str | None] = dict.fromkeys(GPU_FIELDS)
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {**facts, "error": "nvidia-smi not found"}
    ids = []
    if device is not None:
        uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
        if uuid is not None:
            ids.append(f"GPU-{uuid}")
        ids.append(str(device))
    error = "nvidia-smi gave no answer"
    for gpu in ids or ["0"]:
        proc = subprocess.run(
            [
                smi,
                f"--query-gpu={','.join(GPU_FIELDS)}",
                "--format=csv,noheader,nounits",
                "-i",
                gpu,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        values = [v.strip() for v in proc.stdout.strip().split(",")]
        if proc.returncode == 0 and len(values) == len(GPU_FIELDS):
            return {**dict(zip(GPU_FIELDS, values)), "error": None}
        error = (proc.stderr or proc.stdout).strip()[:200] or error
    return {**facts, "error": error}


def run_info(device: int | None = None) -> dict[str, Any]:
    """The run's facts for a benchmark's JSON: the command line, the commit, torch and CUDA,
    and the GPU (``gpu_facts``: name, driver, current and maximum clocks)."""
    return {
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "commit": git_commit(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": gpu_facts(device),
    }


def describe(info: dict[str, Any]) -> str:
    """run_info as the lines a benchmark prints before its results."""
    gpu = info["gpu"]
    clocks = (
        f"SM {gpu['clocks.sm']} MHz (max {gpu['clocks.max.sm']}, application "
        f"{gpu['clocks.applications.graphics']}), memory {gpu['clocks.mem']} MHz "
        f"(max {gpu['clocks.max.mem']})"
        if gpu.get("error") is None
        else f"clocks unknown ({gpu['error']})"
    )
    return (
        f"command: {info['command']}\n"
        f"commit: {info['commit'] or 'unknown (not a git checkout)'}\n"
        f"GPU: {gpu['name'] or 'unknown'}, driver {gpu['driver_version'] or 'unknown'}, "
        f"torch {info['torch']}, CUDA {info['cuda']}; {clocks}"
    )
