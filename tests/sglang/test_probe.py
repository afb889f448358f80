"""kctl.sglang.probe: the description an image gives of its own installed SGLang parser,
run here against a small sglang installed into a temporary folder."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from kctl.sglang.releases import NO_HOOKS, release, release_from_probe

SERVER_ARGS = """
import argparse


def prepare_server_args(argv):
    parser = argparse.ArgumentParser(prog="sglang serve")
    parser.add_argument("--model-path", "--model", dest="model_path", required=True)
    parser.add_argument("--cuda-graph-max-bs-decode", type=int)
    parser.add_argument("--attention-backend", choices=["triton", "kdtree"])
    parser.add_argument("--config")
    return parser.parse_args(argv)
"""


def _install(root: Path, version: str) -> None:
    files = {
        "sglang/__init__.py": "",
        "sglang/srt/__init__.py": "",
        "sglang/srt/server_args.py": SERVER_ARGS,
        "sglang/launch_server.py": "",
        "sglang/cli/__init__.py": "",
        "sglang/cli/serve.py": "",
        f"sglang-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n",
        f"sglang-{version}.dist-info/entry_points.txt": "[console_scripts]\nsglang = sglang.cli.main:main\n",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _probe(root: Path) -> str:
    source = resources.files("kctl.sglang").joinpath("probe.py").read_text("utf-8")
    done = subprocess.run(
        [sys.executable, "-c", source],
        env={"PYTHONPATH": str(root), "PYTHONNOUSERSITE": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_probe_of_a_release_kctl_knows_keeps_the_tables_hooks(tmp_path: Path) -> None:
    _install(tmp_path, "0.5.23")
    out = _probe(tmp_path)
    assert json.loads(out)["launcher"]["argv"] == ["sglang", "serve"]
    rel = release_from_probe(out)
    assert rel.source == "image" and rel.version == "0.5.23"
    assert rel.flags == {
        "-h",
        "--help",
        "--model-path",
        "--model",
        "--cuda-graph-max-bs-decode",
        "--attention-backend",
        "--config",
    }
    assert rel.attention_backends == ("triton", "kdtree")  # the image's own choices
    assert rel.hooks == release("0.5.23").hooks
    assert rel.cuda_graph_max_bs_argv(4) == ["--cuda-graph-max-bs-decode", "4"]


def test_probe_of_a_newer_release_has_no_hooks(tmp_path: Path) -> None:
    _install(tmp_path, "0.6.0")
    rel = release_from_probe(_probe(tmp_path))
    assert rel.version == "0.6.0" and rel.hooks is NO_HOOKS and rel.hooks.graph_hooks == "none"
    assert rel.launch_argv(["--port", "1"]) == ["sglang", "serve", "--port", "1"]
    assert rel.parser().parse_args(["--model", "/m"]).model_path == "/m"


def test_garbage_is_not_a_probe() -> None:
    with pytest.raises(ValueError, match="not the output of kctl.sglang.probe"):
        release_from_probe('{"version": "0.5.23"}')
