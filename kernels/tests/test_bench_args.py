"""bench/bench_verify.py's argument checks, which run before any device work (CPU only), and
that the bench imports nothing outside the product tree."""

import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="bench_verify.py imports torch (pip install torch)")

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench" / "bench_verify.py"


def run(*args, script=BENCH):
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=120
    )


def test_help_lists_the_options_a_user_runs():
    r = run("--help")
    assert r.returncode == 0, r.stderr
    for opt in (
        "--json",
        "--cold-l2",
        "--envelope",
        "--shape",
        "--force-variant",
        "--no-triton",
        "--kv-dtype",
    ):
        assert opt in r.stdout


def test_a_malformed_shape_is_refused_with_the_expected_form():
    r = run("--shape", "1,8,4")
    assert r.returncode == 2
    assert "--shape: expected B,H,D,PREFIX of integers" in r.stderr
    assert "Traceback" not in r.stderr


def test_case_indices_must_be_integers():
    r = run("--cases", "0,x")
    assert r.returncode == 2
    assert "--cases: expected comma-separated indices" in r.stderr
    assert "Traceback" not in r.stderr


def test_an_unknown_kv_dtype_is_refused():
    r = run("--kv-dtype", "fp4")
    assert r.returncode == 2
    assert "--kv-dtype" in r.stderr
    assert "Traceback" not in r.stderr


STEP = BENCH.with_name("bench_sglang_step.py")


def test_the_step_bench_offers_an_fp8_cache():
    r = run("--help", script=STEP)
    assert r.returncode == 0, r.stderr
    for opt in ("--kv-dtype", "--kv-scale", "--wheel", "--json"):
        assert opt in r.stdout
    for name in ("bf16", "fp8_e4m3", "fp8_e5m2"):
        assert name in r.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (("--kv-dtype", "fp4"), "--kv-dtype"),
        (("--kv-scale", "2"), "--kv-scale: applies to an fp8 cache only"),
        (("--kv-dtype", "fp8_e4m3", "--kv-scale", "0"), "--kv-scale: expected a positive finite"),
        (("--kv-dtype", "fp8_e5m2", "--kv-scale", "nan"), "--kv-scale: expected a positive finite"),
        (("--wheel", "/nonexistent/sglang.whl"), "--wheel: /nonexistent/sglang.whl is not a file"),
    ],
)
def test_the_step_bench_refuses_bad_arguments_before_any_device_work(args, message):
    r = run(*args, script=STEP)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_both_benchmarks_take_one_copy_bandwidth_and_record_the_run():
    """One copy-bandwidth measurement (kdtree_mla_testing.benchinfo) for both floors, and both
    benchmarks print and write the run's command, commit, driver, GPU and clocks."""
    import ast

    for script in (BENCH, STEP):
        source = script.read_text()
        tree = ast.parse(source)
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert "copy_bandwidth" not in defined, f"{script.name} measures the bandwidth itself"
        imported = {
            a.name
            for n in tree.body
            if isinstance(n, ast.ImportFrom) and n.module == "kdtree_mla_testing.benchinfo"
            for a in n.names
        }
        assert {"copy_bandwidth", "run_info", "describe", "gpu_facts"} <= imported, script.name
        assert "print(describe(" in source and "run_info(torch.cuda.current_device())" in source


def test_run_info_names_the_command_the_commit_and_the_gpu(monkeypatch, tmp_path):
    import shlex

    from kdtree_mla_testing import benchinfo

    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'case "$*" in *-i\\ 0*) echo "NVIDIA H100 80GB HBM3, 580.95.05, 1980, 2619, 1980, 2619, 1755";;'
        " *) exit 6;; esac\n"
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(
        sys, "argv", ["bench_verify.py", "--kv-dtype", "fp8_e4m3", "--json", "a b.json"]
    )
    info = benchinfo.run_info()
    assert info["command"] == shlex.join(
        [
            pathlib.Path(sys.executable).name,
            "bench_verify.py",
            "--kv-dtype",
            "fp8_e4m3",
            "--json",
            "a b.json",
        ]
    )
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=BENCH.parent, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert info["commit"] in (head, f"{head}+dirty")
    gpu = info["gpu"]
    assert gpu["error"] is None
    assert (gpu["name"], gpu["driver_version"]) == ("NVIDIA H100 80GB HBM3", "580.95.05")
    assert (gpu["clocks.sm"], gpu["clocks.max.mem"], gpu["clocks.applications.graphics"]) == (
        "1980",
        "2619",
        "1755",
    )
    text = benchinfo.describe(info)
    assert "driver 580.95.05" in text and "SM 1980 MHz (max 1980, application 1755)" in text


def test_run_info_without_nvidia_smi_says_so(monkeypatch, tmp_path):
    from kdtree_mla_testing import benchinfo

    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi there
    info = benchinfo.run_info()
    assert info["gpu"]["error"] == "nvidia-smi not found" and info["gpu"]["driver_version"] is None
    assert "clocks unknown (nvidia-smi not found)" in benchinfo.describe(info)
