"""What a deploy shows while it waits: on a terminal (a pseudo-terminal here) rich bars for
the model load, with the deadline and the server's own log phase, and for the gate's
requests per context; piped, plain ``kctl:`` lines with no terminal codes. stdout keeps
only the result."""

from __future__ import annotations

import os
import pty
import re
import subprocess

import pytest

from tests.integration.conftest import REPO, Kctl

pytestmark = pytest.mark.slow

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _under_pty(argv: list[str], timeout: float = 120) -> tuple[int, str]:
    """Run ``argv`` with stdin, stdout and stderr on a pseudo-terminal; what it wrote."""
    leader, follower = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "200"}
    proc = subprocess.Popen(
        argv, stdin=follower, stdout=follower, stderr=follower, cwd=REPO, env=env, close_fds=True
    )
    os.close(follower)
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the last writer closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    code = proc.wait(timeout=timeout)
    return code, b"".join(chunks).decode("utf-8", "replace")


def test_deploy_in_a_terminal_draws_progress_for_load_and_gate(kctl: Kctl) -> None:
    code, screen = _under_pty(kctl.argv("deploy", str(kctl.tmp / "base.yaml")))
    assert code == 0, screen
    assert "\x1b[" in screen  # drawn, not printed line by line
    text = ANSI.sub("", screen).replace("\r", "\n")
    load = re.compile(r"health d-\S+ +[━╸╺ ]+ \d+/1000 simulated s .*server: loading weights")
    assert load.search(text), text[-3000:]
    assert re.search(r"✓ health d-\S+ +━+ \d+/1000 simulated s .*healthy in", text), text[-3000:]
    for ctx in (5700, 23000):
        assert re.search(rf"✓ gate {ctx} +━+ 2/2 requests .*measure", text), text[-3000:]
    assert "ESTABLISHED: base" in text


def test_piped_deploy_prints_plain_lines(kctl: Kctl) -> None:
    r = kctl.run("deploy", str(kctl.tmp / "base.yaml"))
    assert r.code == 0, r.err
    assert "\x1b" not in r.err and "\r" not in r.err and "━" not in r.err
    lines = r.err.splitlines()
    assert all(line.startswith(("kctl: ", "  ")) for line in lines), r.err
    assert any(
        re.fullmatch(r"kctl: health d-\S+: healthy in \d+ simulated s \(\d+/1000 simulated s\)", x)
        for x in lines
    ), r.err
    assert any(
        re.fullmatch(r"kctl: gate 5700: measure, last [\d.]+ tok/s \(2/2 requests\)", x)
        for x in lines
    ), r.err
    assert r.out.startswith("ESTABLISHED: base")
