"""bench/bench_verify.py's argument checks, which run before any device work (CPU only)."""

import pathlib
import subprocess
import sys

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench" / "bench_verify.py"


def run(*args):
    return subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=120
    )


def test_unknown_keep_part_names_the_parts():
    r = run("--cold-l2", "128", "--cold-l2-keep", "meta,weights")
    assert r.returncode == 2
    assert "--cold-l2-keep: unknown part(s) weights; use meta, ws, qk" in r.stderr
    assert "Traceback" not in r.stderr


def test_keep_without_the_flush_says_what_it_needs():
    r = run("--cold-l2-keep", "meta")
    assert r.returncode == 2
    assert "--cold-l2-keep needs --cold-l2 MB" in r.stderr
    assert "Traceback" not in r.stderr


def test_discard_without_the_flush_says_what_it_needs():
    r = run("--cold-l2-discard")
    assert r.returncode == 2
    assert "--cold-l2-discard needs --cold-l2 MB" in r.stderr
    assert "Traceback" not in r.stderr
