"""The build context and its content-addressed tag (no engine needed)."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from kctl.errors import BuildFailed
from kctl.image import build_context, plan_image, write_tar
from kctl.profile.model import ImageSpec, Profile


def _kernel_tree(root: Path) -> None:
    (root / "kernels" / "kdtree_mla").mkdir(parents=True)
    (root / "kernels" / "pyproject.toml").write_text("[project]\nname = 'kdtree-mla'\n")
    (root / "kernels" / "kdtree_mla" / "__init__.py").write_text("X = 1\n")
    (root / "kernels" / "csrc").mkdir()
    (root / "kernels" / "csrc" / "verify.cu").write_text("// kernel\n")
    (root / "kernels" / "build-files.txt").write_text(
        "# what the build reads\npyproject.toml\ncsrc/*.cu\nkdtree_mla/*.py\n"
    )


def _profile(name: str = "kdtree-eager", **image: object) -> Profile:
    spec = {"kernel_source": "kernels", **image}
    return Profile(name=name, source=f"{name}.yaml", image=ImageSpec(**spec))  # type: ignore[arg-type]


def test_tag_is_stable_and_lists_files_in_order(tmp_path: Path) -> None:
    _kernel_tree(tmp_path)
    a = build_context(_profile(), tmp_path)
    b = build_context(_profile(), tmp_path)
    assert a == b
    assert a.tag.startswith("kctl/kdtree-eager:") and len(a.tag.split(":")[1]) == 12
    assert [f.arcname for f in a.files] == [
        "kernels/csrc/verify.cu",
        "kernels/kdtree_mla/__init__.py",
        "kernels/pyproject.toml",
    ]
    assert a.buildargs == (("KCTL_SOURCE_HASH", a.source_hash),)


def test_any_source_change_changes_the_tag(tmp_path: Path) -> None:
    _kernel_tree(tmp_path)
    before = build_context(_profile(), tmp_path)
    (tmp_path / "kernels" / "csrc" / "verify.cu").write_text("// kernel, faster\n")
    after = build_context(_profile(), tmp_path)
    assert after.tag != before.tag
    assert after.source_hash != before.source_hash
    assert after.dockerfile == before.dockerfile


def test_a_dockerfile_change_changes_the_tag_not_the_source_hash(tmp_path: Path) -> None:
    _kernel_tree(tmp_path)
    a = build_context(_profile(cuda_archs=("12.0",)), tmp_path)
    b = build_context(_profile(cuda_archs=("9.0a", "12.0")), tmp_path)
    assert a.tag != b.tag
    assert a.source_hash == b.source_hash


def test_only_the_listed_files_are_context(tmp_path: Path) -> None:
    _kernel_tree(tmp_path)
    before = build_context(_profile(), tmp_path)
    k = tmp_path / "kernels"
    for junk in (
        "build/lib/x.so",
        "kdtree_mla/__pycache__/a.pyc",
        "kdtree_mla.egg-info/PKG-INFO",
        "tests/test_x.py",
        "bench/results.json",
        "kdtree_mla/_C.so",
        "csrc/notes.txt",
        "README.md",
    ):
        (k / junk).parent.mkdir(parents=True, exist_ok=True)
        (k / junk).write_text("junk")
    assert build_context(_profile(), tmp_path) == before


def test_missing_kernel_source_fails_before_any_build(tmp_path: Path) -> None:
    with pytest.raises(BuildFailed, match=r"kernel source .*kernels .* is not a directory"):
        build_context(_profile(), tmp_path)
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "README").write_text("no package here")
    with pytest.raises(BuildFailed, match="has no readable build-files.txt"):
        build_context(_profile(), tmp_path)
    (tmp_path / "kernels" / "build-files.txt").write_text("README\n")
    with pytest.raises(BuildFailed, match="has neither pyproject.toml nor setup.py"):
        build_context(_profile(), tmp_path)


@pytest.mark.parametrize(
    ("line", "why"),
    [("csrc/*.cuh", "matches no file"), ("../secrets/*", "points outside the kernel package")],
)
def test_a_bad_build_files_line_is_named(tmp_path: Path, line: str, why: str) -> None:
    _kernel_tree(tmp_path)
    with (tmp_path / "kernels" / "build-files.txt").open("a") as fh:
        fh.write(line + "\n")
    with pytest.raises(BuildFailed, match=f"build-files.txt: {line!r} {why}".replace("*", r"\*")):
        build_context(_profile(), tmp_path)


REPO = Path(__file__).resolve().parents[2]


def _shipped_copy(tmp_path: Path) -> tuple[Path, Profile]:
    """The repository's kernel package and profiles, copied: the real build-files.txt."""
    from kctl.profile import load_profile

    root = tmp_path / "repo"
    shutil.copytree(REPO / "kernels", root / "kernels", ignore=shutil.ignore_patterns("build"))
    shutil.copytree(REPO / "profiles", root / "profiles")
    return root, load_profile(root / "profiles" / "kdtree-eager.yaml")


def test_the_tag_ignores_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, profile = _shipped_copy(tmp_path)
    monkeypatch.chdir(root)
    here = build_context(profile).tag
    monkeypatch.chdir(tmp_path)
    assert build_context(profile).tag == here
    assert all(f.source.is_relative_to(root / "kernels") for f in build_context(profile).files)


@pytest.mark.parametrize(
    "other",
    [
        "README.md",
        "INTEGRATION-NEEDS.md",
        "scripts/device_validate.sh",
        "notes.txt",
        "tests/test_api_cpu.py",
        "bench/bench_verify.py",
        "kdtree_mla/_C.cpython-311-x86_64-linux-gnu.so",
        "kdtree_mla/__pycache__/api.cpython-311.pyc",
        "build/temp/verify_launch.o",
    ],
)
def test_files_the_kernel_build_does_not_read_leave_the_tag(tmp_path: Path, other: str) -> None:
    root, profile = _shipped_copy(tmp_path)
    before = build_context(profile).tag
    path = root / "kernels" / other
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fh.write("\n# edited\n")
    assert build_context(profile).tag == before


@pytest.mark.parametrize(
    "source", ["csrc/verify_main.cuh", "csrc/verify_launch.cu", "kdtree_mla/api.py", "setup.py"]
)
def test_a_file_the_kernel_build_reads_changes_the_tag(tmp_path: Path, source: str) -> None:
    root, profile = _shipped_copy(tmp_path)
    before = build_context(profile).tag
    with (root / "kernels" / source).open("a") as fh:
        fh.write("\n")
    assert build_context(profile).tag != before


def test_a_new_package_module_changes_the_tag(tmp_path: Path) -> None:
    root, profile = _shipped_copy(tmp_path)
    before = build_context(profile).tag
    (root / "kernels" / "kdtree_mla" / "sglang" / "extra.py").write_text("X = 1\n")
    assert build_context(profile).tag != before
    os.remove(root / "kernels" / "kdtree_mla" / "sglang" / "extra.py")
    assert build_context(profile).tag == before


def test_tar_is_deterministic_and_holds_exactly_the_context(tmp_path: Path) -> None:
    _kernel_tree(tmp_path)
    ctx = build_context(_profile(), tmp_path)
    one, two = io.BytesIO(), io.BytesIO()
    write_tar(ctx, one)
    write_tar(ctx, two)
    assert one.getvalue() == two.getvalue()
    one.seek(0)
    with tarfile.open(fileobj=one) as tar:
        assert tar.getnames() == ["Dockerfile", *[f.arcname for f in ctx.files]]
        dockerfile = tar.extractfile("Dockerfile")
        assert dockerfile is not None and dockerfile.read().decode() == ctx.dockerfile


def test_a_file_changed_after_hashing_is_refused(tmp_path: Path) -> None:
    _kernel_tree(tmp_path)
    ctx = build_context(_profile(), tmp_path)
    (tmp_path / "kernels" / "pyproject.toml").write_text("changed")
    with pytest.raises(BuildFailed, match="changed while the build context was being prepared"):
        write_tar(ctx, io.BytesIO())


def test_simulator_context_carries_kctl_sim_only(tmp_path: Path) -> None:
    ctx = build_context(
        _profile(name="docker-test", base="kctl-test-base:bookworm", install_simulator=True),
        tmp_path,
    )
    names = [f.arcname for f in ctx.files]
    assert "kctl/__init__.py" in names
    kctl_own = ("kctl/__init__.py", "kctl/errors.py")
    assert all(n in kctl_own or n.startswith(("kctl/sim/", "kctl/sglang/")) for n in names)
    assert "kctl/sglang/data/releases.json" in names
    assert any(n.startswith("kctl/sim/shim/sglang/") for n in names)


def test_plan_image_shows_dockerfile_and_files(tmp_path: Path) -> None:
    _kernel_tree(tmp_path)
    plan = plan_image(_profile(), repo_root=tmp_path)
    ctx = build_context(_profile(), tmp_path)
    assert plan["tag"] == ctx.tag
    assert plan["dockerfile"] == ctx.dockerfile
    assert plan["files"] == ctx.describe()
