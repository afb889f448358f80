"""bench/bench_verify.py's argument checks, which run before any device work (CPU only), and
that the bench imports nothing outside the product tree."""

import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="bench_verify.py imports torch (pip install torch)")

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench" / "bench_verify.py"


def run(*args):
    return subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=120
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
