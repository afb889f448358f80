"""The committed table against the published wheel of the newest release it holds.

Downloads that wheel (about 40 MB, cached in the repository's gitignored ``.whl-sglang/``),
builds its real ``ServerArgs`` parser in a child process (SGLang's dependencies stubbed,
nothing installed) and checks that the generator's output for it equals the committed
table, and that the parser kctl rebuilds from the table accepts and refuses what the real
one does. Skipped, with the reason, only when PyPI cannot be reached at all.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from kctl.sglang import generate
from kctl.sglang._rebuild import ParserError
from kctl.sglang.releases import newest, release

pytestmark = pytest.mark.slow

CACHE = Path(
    os.environ.get("KCTL_SGLANG_WHEELS", Path(__file__).resolve().parents[2] / ".whl-sglang")
)
VERSION = newest().version

#: the acceptance list of issue 34 and the spellings kctl renders, on the real parser
ARGVS = [
    ["--model-path", "/m"],
    ["--model-path", "/m", "--model", "/x"],
    ["--model-path", "/m", "--tensor-parallel-size", "2"],
    ["--model-path", "/m", "--mem-frac", "0.5"],
    ["--model-path", "/m", "--speculative-draft-model", "/y"],
    ["--model-path", "/m", "--log-level", "info"],
    ["--model-path", "/m", "--frobnicate", "1"],
    ["--model-path", "/m", "--cuda-graph-max-bs", "48"],
    ["--model-path", "/m", "--cuda-graph-max-bs-decode", "48"],
    ["--model-path", "/m", "--disable-cuda-graph"],
    ["--model-path", "/m", *release(VERSION).disable_cuda_graph_argv()],
    ["--model-path", "/m", "--attention-backend", "cutlass_mla"],
    ["--model-path", "/m", "--attention-backend", "triton", "--kv-cache-dtype", "fp4_e2m1"],
    ["--model-path", "/m", "--enable-metrics=1"],
    ["--model-path", "/m", "--max-running-requests", "many"],
    ["--model-path", "/m", "stray"],
]


def _pypi_unreachable() -> str | None:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


@pytest.fixture(scope="module")
def real() -> Iterator[tuple[Path, dict[str, Any]]]:
    try:
        wheel = generate.download(VERSION, CACHE)
    except subprocess.CalledProcessError:
        reason = _pypi_unreachable()
        if reason is None:
            raise  # PyPI answers: a failed download is a failure, not a skip
        pytest.skip(f"no network to PyPI ({reason}): cannot download sglang=={VERSION}")
    yield wheel, generate.read_parser(wheel, ARGVS)


def test_committed_table_is_what_the_generator_reads_from_the_wheel(
    real: tuple[Path, dict[str, Any]],
) -> None:
    wheel, parser = real
    committed = json.loads(
        resources.files("kctl.sglang").joinpath("data/releases.json").read_text("utf-8")
    )
    assert generate.describe_release(VERSION, wheel, parser) == generate.expand(committed, VERSION)


def test_rebuilt_parser_accepts_and_refuses_what_the_real_one_does(
    real: tuple[Path, dict[str, Any]],
) -> None:
    _, parser = real
    rebuilt = release(VERSION).parser()
    for argv, verdict in zip(ARGVS, parser["verdicts"]):
        try:
            rebuilt.parse_args(argv)
            mine = None
        except ParserError as exc:
            mine = str(exc)
        assert mine == verdict, argv
    # the facts, on the real parser itself
    by_argv = dict(zip(map(tuple, ARGVS), parser["verdicts"]))
    assert "ambiguous option: --cuda-graph-max-bs could match" in str(
        by_argv[("--model-path", "/m", "--cuda-graph-max-bs", "48")]
    )
    assert by_argv[("--model-path", "/m", "--cuda-graph-max-bs-decode", "48")] is None
    assert by_argv[("--model-path", "/m", "--mem-frac", "0.5")] is None
