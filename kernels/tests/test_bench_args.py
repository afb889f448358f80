"""bench/bench_verify.py's argument checks, which run before any device work (CPU only), and
that the bench imports nothing outside the product tree."""

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
