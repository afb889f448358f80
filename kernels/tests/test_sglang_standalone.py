"""CPU tests of the standalone SGLang tree builder (``kdtree_mla_testing.standalone.build_tree``).

The GPU tests run SGLang's real Triton backend from trees this builds out of the published
wheels; here synthetic wheels check which files a release's tree takes, that a runtime-context
release (0.5.14 on) gets its own stand-ins with the definitions they name copied from the wheel,
and that a wheel missing a file is refused by name. No torch, no SGLang.
"""

from __future__ import annotations

import ast
import zipfile
from pathlib import Path

import pytest
from kdtree_mla_testing import standalone, standalone_runtime, standalone_stubs

FORWARD_MODE = """
from enum import IntEnum, auto


class Unrelated:
    pass


class ForwardMode(IntEnum):
    EXTEND = auto()
    TARGET_VERIFY = auto()

    def is_target_verify(self):
        return self == ForwardMode.TARGET_VERIFY
"""
KV_WRITE_LOC = """
from dataclasses import dataclass


@dataclass
class KVWriteLoc:
    loc: object
    physical: bool = False


def unwrap_write_loc(loc_info):
    return getattr(loc_info, "loc", loc_info), None, None
"""
TREE_MASK = "from enum import IntEnum\n\n\nclass TreeMaskMode(IntEnum):\n    FULL_MASK = 0\n"


def _wheel(tmp_path: Path, version: str, files: dict[str, str]) -> Path:
    wheel = tmp_path / f"sglang-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return wheel


def _runtime_release(
    tmp_path: Path, *, drop: str | None = None, tree_mask: str = TREE_MASK
) -> Path:
    files = {name: f"# {name}\n" for name in standalone_runtime.FILES if name != drop}
    files[standalone_runtime.MARKER] = "raise RuntimeError('the real runtime context')\n"
    files["sglang/srt/model_executor/forward_batch_info.py"] = FORWARD_MODE
    files["sglang/srt/mem_cache/memory_pool.py"] = KV_WRITE_LOC
    files["sglang/kernels/ops/speculative/spec_tree.py"] = tree_mask
    return _wheel(tmp_path, "0.5.23", files)


def test_a_runtime_context_release_gets_its_files_and_stand_ins(tmp_path: Path) -> None:
    tree = standalone.build_tree(_runtime_release(tmp_path), tmp_path / "tree")
    for name in standalone_runtime.FILES:
        assert (tree / name).read_text() == f"# {name}\n", name  # taken unchanged
    # The marker file itself is stood in for: the real one needs the whole server.
    context = (tree / standalone_runtime.MARKER).read_text()
    assert "def publish(" in context and "the real runtime context" not in context
    for name in standalone_runtime.STUBS:
        ast.parse((tree / name).read_text(), filename=name)
    assert (tree / "sglang-0.5.23.dist-info" / "METADATA").read_text().endswith("Version: 0.5.23\n")


def test_a_taken_definition_is_the_wheels_source(tmp_path: Path) -> None:
    tree = standalone.build_tree(_runtime_release(tmp_path), tmp_path / "tree")
    info = (tree / "sglang/srt/model_executor/forward_batch_info.py").read_text()
    assert "#: taken:" not in info
    assert FORWARD_MODE.split("\n\n\n")[2].strip() in info  # ForwardMode, whole
    assert "class Unrelated" not in info
    pool = (tree / "sglang/srt/mem_cache/memory_pool.py").read_text()
    assert "@dataclass\nclass KVWriteLoc:" in pool  # decorators come along
    assert "def unwrap_write_loc(loc_info):" in pool
    assert (
        "class TreeMaskMode(IntEnum):"
        in (tree / "sglang/srt/speculative/eagle_utils.py").read_text()
    )


def test_an_older_release_keeps_the_older_lists(tmp_path: Path) -> None:
    files = {name: f"# {name}\n" for name in standalone.REAL_FILES}
    files["sglang/srt/plugins/__init__.py"] = "# plugins\n"
    files["sglang/srt/model_executor/forward_batch_info.py"] = FORWARD_MODE
    tree = standalone.build_tree(_wheel(tmp_path, "0.5.13", files), tmp_path / "tree")
    assert (tree / "sglang/srt/plugins/__init__.py").read_text() == "# plugins\n"
    assert not (tree / standalone_runtime.MARKER).exists()
    assert (tree / "sglang/srt/server_args.py").read_text().startswith("ATTENTION_BACKEND_CHOICES")
    # ForwardMode is the wheel's in this layout too.
    info = (tree / "sglang/srt/model_executor/forward_batch_info.py").read_text()
    assert FORWARD_MODE.split("\n\n\n")[2].strip() in info
    for name in standalone.STUBS:
        ast.parse((tree / name).read_text(), filename=name)


def test_the_two_layouts_share_one_source_for_each_stand_in_they_both_write() -> None:
    both = set(standalone.STUBS) & set(standalone_runtime.STUBS)
    assert both == set(standalone_stubs.COMMON)
    for name in both:
        assert standalone.STUBS[name] is standalone_runtime.STUBS[name], name


def test_an_older_wheel_without_forward_mode_is_refused_by_name(tmp_path: Path) -> None:
    files = {name: f"# {name}\n" for name in standalone.REAL_FILES}
    with pytest.raises(FileNotFoundError, match="lacks sglang/srt/model_executor/forward_batch"):
        standalone.build_tree(_wheel(tmp_path, "0.5.13", files), tmp_path / "tree")


def test_a_wheel_missing_a_file_is_refused_by_name(tmp_path: Path) -> None:
    dropped = "sglang/srt/mem_cache/kv_index_translator.py"
    with pytest.raises(FileNotFoundError, match="lacks sglang/srt/mem_cache/kv_index_translator"):
        standalone.build_tree(_runtime_release(tmp_path, drop=dropped), tmp_path / "tree")


def test_a_named_definition_the_wheel_lacks_is_refused(tmp_path: Path) -> None:
    wheel = _runtime_release(tmp_path, tree_mask="X = 1\n")
    with pytest.raises(FileNotFoundError, match="defines no TreeMaskMode"):
        standalone.build_tree(wheel, tmp_path / "tree")


REPO = Path(__file__).resolve().parents[2]
STAND_INS = (
    "sglang.srt.utils",
    "sglang.srt.model_executor.forward_batch_info",
    "sglang.srt.configs.model_config",
    "sglang.srt.layers.radix_attention",
    "sglang.srt.layers.attention.attention_registry",
    "sglang.srt.speculative.spec_utils",
    "sglang.srt.mem_cache.swa_memory_pool",
    "sgl_kernel",
    "sgl_kernel.utils",
)
PROBE = f"""
import importlib
for name in {STAND_INS!r}:
    importlib.import_module(name)
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.utils import get_int_env_var, next_power_of_2
assert ForwardMode.TARGET_VERIFY.is_target_verify() and ForwardMode.TARGET_VERIFY.is_extend()
assert next_power_of_2(5) == 8 and get_int_env_var("KDTREE_NOT_SET", 3) == 3
"""


@pytest.mark.parametrize("pattern", ["sglang-0.5.10-*.whl", "sglang-0.5.23-*.whl"])
def test_a_published_wheels_tree_imports_its_stand_ins(tmp_path: Path, pattern: str) -> None:
    """On the real release (an older-layout one and a runtime-context one, from the repo's
    gitignored .whl/ where device_validate.sh expects them): the tree builds, and the stand-ins
    that need no Triton import with the wheel's ForwardMode in place."""
    import os
    import subprocess
    import sys

    pytest.importorskip("torch", reason="the utils stand-in imports torch")
    wheels = sorted((REPO / ".whl").glob(pattern))
    if not wheels:
        pytest.skip(f"no {pattern} in {REPO / '.whl'} (pip download --no-deps sglang==... -d .whl)")
    tree = standalone.build_tree(wheels[-1], tmp_path / "tree")
    proc = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
