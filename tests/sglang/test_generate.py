"""The generator's machinery on a small wheel built here: the stubbed import of a
server_args module that imports heavy packages, the facts read by syntax tree, the
deduplicated table and its round trip through the typed model."""

from __future__ import annotations

import json
import textwrap
import zipfile
from pathlib import Path

import pytest

from kctl.sglang import generate
from kctl.sglang._stubs import StubFinder, StubModule
from kctl.sglang.releases import load_table

SERVER_ARGS = """
import argparse
import dataclasses

import torch                       # stubbed: never imported for real
from transformers import PretrainedConfig
from sglang.srt.broken import NOT_REACHED  # a module that fails: degraded, not fatal

if torch.cuda.is_available():      # a stub is falsy
    raise RuntimeError("took the CUDA branch")

CHOICES = ["triton", "fa3"]


@dataclasses.dataclass
class ServerArgs:
    model_path: str = None
    tp_size: int = 1

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", "--model", dest="model_path", required=True)
        parser.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int,
                            default=ServerArgs.tp_size)
        parser.add_argument("--attention-backend", choices=CHOICES)
        parser.add_argument("--disable-cuda-graph", action="store_true",
                            help="Deprecated. Use --cuda-graph-backend=disabled instead.")
        parser.add_argument("--cuda-graph-backend", choices=["full", "disabled"])
        parser.add_argument("--sampling-backend", choices={"b", "a", "c"})
        parser.add_argument("--enable-x", action=argparse.BooleanOptionalAction)
        parser.add_argument("--config")


def prepare_server_args(argv):
    parser = argparse.ArgumentParser(prog="sglang serve", allow_abbrev=True)
    ServerArgs.add_cli_args(parser)
    return parser.parse_args(argv)
"""

TRITON = """
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
from sglang.kernels.extend import extend_attention_fwd


class TritonAttnBackend(AttentionBackend):
    def init_forward_metadata(self, forward_batch): ...
    def init_forward_metadata_out_graph(self, forward_batch, in_capture=False): ...
"""

FILES = {
    "sglang/__init__.py": "",
    "sglang/srt/__init__.py": "",
    "sglang/srt/server_args.py": SERVER_ARGS,
    "sglang/srt/broken.py": "raise ImportError('no GPU here')\n",
    "sglang/srt/layers/attention/triton_backend.py": TRITON,
    "sglang/srt/layers/attention/base_attn_backend.py": (
        "class AttentionBackend:\n    def init_forward_metadata_in_graph(self, forward_batch): ...\n"
    ),
    "sglang/kernels/extend.py": "def extend_attention_fwd(q, k, *, page_size=1, score_mod=None): ...\n",
    "sglang/srt/model_executor/model_runner.py": (
        "class ModelRunner:\n    def init_attention_backends(self): ...\n"
    ),
    "sglang/srt/plugins/__init__.py": 'GENERAL_PLUGINS_GROUP = "sglang.srt.plugins"\n',
    "sglang/srt/layers/attention/attention_registry.py": "def register_attention_backend(name): ...\n",
    "sglang/srt/managers/tokenizer_manager.py": textwrap.dedent(
        """
        def f(meta_info, n):
            meta_info["spec_accept_length"] = n
            meta_info["spec_verify_ct"] = n
            meta_info["other"] = n
        """
    ),
    "sglang/cli/main.py": 'def main(sub):\n    sub.add_parser("serve")\n',
    "sglang-9.9.9.dist-info/entry_points.txt": "[console_scripts]\nsglang = sglang.cli.main:main\n",
}


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    path = tmp_path / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in FILES.items():
            zf.writestr(name, text)
    return path


def test_release_described_from_a_wheel(wheel: Path) -> None:
    rel = generate.describe_release("9.9.9", wheel)
    by_flag = {o: a for a in rel["parser"]["actions"] for o in a["options"]}
    assert by_flag["--model"]["dest"] == "model_path" and by_flag["--model"]["required"]
    assert by_flag["--tp-size"]["type"] == "int" and by_flag["--tp-size"]["default"] == 1
    assert by_flag["--attention-backend"]["choices"] == ["triton", "fa3"]
    assert by_flag["--sampling-backend"]["choices"] == ["a", "b", "c"]  # a set, sorted
    assert by_flag["--no-enable-x"]["kind"] == "boolean_optional"
    assert by_flag["--disable-cuda-graph"]["deprecated"].startswith("Deprecated.")
    assert by_flag["--cuda-graph-backend"]["deprecated"] is None
    assert rel["parser"]["allow_abbrev"] is True
    assert rel["degraded_modules"] == ["sglang.srt.broken"]
    assert rel["launcher"]["argv"] == ["sglang", "serve"]
    hooks = rel["hooks"]
    methods = hooks["triton_backend"]["methods"]
    assert methods["init_forward_metadata_out_graph"]["params"] == [
        "self",
        "forward_batch",
        "in_capture",
    ]
    assert methods["init_forward_metadata_in_graph"]["defined_in"].endswith("AttentionBackend")
    assert hooks["extend_attention_fwd"] == {
        "module": "sglang.kernels.extend",
        "params": ["q", "k", "*", "page_size", "score_mod"],
    }
    assert hooks["model_runner"] == ["init_attention_backends"]
    assert hooks["plugins"] == {"package": True, "entry_point_groups": ["sglang.srt.plugins"]}
    assert hooks["attention_registry"]["register_attention_backend"] is True
    assert rel["spec_metrics"] == ["spec_accept_length", "spec_verify_ct"]


def test_table_dedupes_and_round_trips(wheel: Path) -> None:
    one = generate.describe_release("9.9.9", wheel)
    two = {**one, "version": "9.9.9.post1"}
    table = generate.build_table([one, two])
    assert len(table["options"]) == len(one["parser"]["actions"])
    text = generate.dumps(table)
    assert json.loads(text) == table
    assert generate.expand(json.loads(text), "9.9.9") == one
    rels = load_table(text)
    assert [r.version for r in rels] == ["9.9.9", "9.9.9.post1"]
    rel = rels[0]
    assert rel.disable_cuda_graph_argv() == ["--disable-cuda-graph"]  # no -decode/-prefill pair
    assert rel.hooks.graph_hooks == "out_in_graph" and rel.hooks.has_plugin_entry_points
    ns = rel.parser().parse_args(["--model", "/m", "--no-enable-x", "--tp", "2"])
    assert (ns.model_path, ns.enable_x, ns.tp_size) == ("/m", False, 2)


def test_versions_sort_with_post_releases_after_their_release() -> None:
    got = sorted(["0.5.10.post1", "0.5.9", "0.5.11", "0.5.10"], key=generate.version_key)
    assert got == ["0.5.9", "0.5.10", "0.5.10.post1", "0.5.11"]
    with pytest.raises(ValueError):
        generate.version_key("0.5.10rc1")


def test_stub_modules_answer_any_use() -> None:
    finder = StubFinder(["nothing_real"])
    spec = finder.find_spec("torch.nn.functional")
    assert spec is not None and finder.stubbed == {"torch"}
    assert finder.find_spec("json") is None  # the standard library stays real
    mod = StubModule("torch")
    cls = mod.nn.Module

    class Net(cls):  # type: ignore[misc,valid-type]
        pass

    assert not mod.cuda.is_available()
    assert mod.compile(len) is len  # a stub decorator returns what it decorates
    assert list(mod.arange(3)) == [] and mod.__version__ == "0.0.0"
    assert issubclass(Net, cls)
    with pytest.raises(AttributeError):
        _ = mod.__wrapped__
