"""build-files.txt, the list of what the kernel build reads (kctl hashes and ships exactly the
files its globs match, kctl/image/context.py), against what the build really reads: the sources
setup.py compiles, every header they include (transitively), every module of the packages
pyproject.toml ships, the startup .pth and the packaging itself. And nothing else: no test,
bench, script, doc or test-support module (kdtree_mla_testing/) matches, so editing those never
changes the serving image's tag; the wheel's packages hold no test support either. No torch,
no GPU."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="reads pyproject.toml with tomllib (Python 3.11+)")

ROOT = Path(__file__).resolve().parents[1]


def globs() -> list[str]:
    lines = (ROOT / "build-files.txt").read_text().splitlines()
    return [g for g in (line.split("#", 1)[0].strip() for line in lines) if g]


def listed() -> set[str]:
    """The package's files the globs match, as kctl collects them (Path.glob per line)."""
    return {p.relative_to(ROOT).as_posix() for g in globs() for p in ROOT.glob(g) if p.is_file()}


def matches(rel: str) -> bool:
    """Whether a path (existing or not) would match a glob: `*` stays inside one folder."""
    for g in globs():
        rx = "".join("[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in g)
        if re.fullmatch(rx, rel):
            return True
    return False


def setup_sources() -> list[str]:
    """The extension's sources: the os.path.join("csrc", ...) calls of setup.py's sources=[]."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "sources":
            calls = node.value.elts  # type: ignore[attr-defined]
            return ["/".join(a.value for a in call.args) for call in calls]
    raise AssertionError("setup.py has no sources=[...]")


def includes(rel: str, seen: set[str]) -> set[str]:
    """`rel` and every file it #includes with quotes, transitively (relative to its folder or
    csrc/, the build's include path)."""
    if rel in seen:
        return seen
    seen.add(rel)
    path = ROOT / rel
    for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', path.read_text(), re.M):
        for base in (path.parent, ROOT / "csrc"):
            if (base / name).is_file():
                includes((base / name).resolve().relative_to(ROOT).as_posix(), seen)
                break
        else:
            raise AssertionError(f'{rel}: #include "{name}" is not in the package')
    return seen


def package_modules() -> set[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    out = set()
    for pkg in pyproject["tool"]["setuptools"]["packages"]:
        folder = ROOT / pkg.replace(".", "/")
        assert (folder / "__init__.py").is_file(), f"{pkg}: not a package folder"
        out |= {p.relative_to(ROOT).as_posix() for p in folder.glob("*.py")}
    return out


def test_every_source_and_transitive_include_is_listed():
    sources = setup_sources()
    assert "csrc/binding.cpp" in sources and "csrc/verify_launch.cu" in sources
    needed: set[str] = set()
    for src in sources:
        includes(src, needed)
    assert "csrc/verify_main.cuh" in needed and "csrc/traits.h" in needed
    assert needed <= listed(), f"not in build-files.txt: {sorted(needed - listed())}"


def test_every_module_of_the_shipped_packages_and_the_packaging_is_listed():
    needed = package_modules() | {"setup.py", "pyproject.toml", "kdtree_mla_startup.pth"}
    assert "kdtree_mla/api.py" in needed and "kdtree_mla/sglang/patch.py" in needed
    assert needed <= listed(), f"not in build-files.txt: {sorted(needed - listed())}"


def test_the_startup_pth_setup_ships_is_listed():
    setup = (ROOT / "setup.py").read_text()
    for name in re.findall(r'"([\w.-]+\.pth)"', setup):
        assert (ROOT / name).is_file() and matches(name), name


def test_every_glob_matches_a_file():
    for g in globs():
        assert any(p.is_file() for p in ROOT.glob(g)), f"build-files.txt: {g!r} matches nothing"


@pytest.mark.parametrize(
    "rel",
    [
        "README.md",
        "INTEGRATION-NEEDS.md",
        "notes.txt",
        "tests/test_api_cpu.py",
        "tests/gpu/test_verify_gpu.py",
        "tests/smem_probe.cpp",
        "bench/bench_verify.py",
        "bench/results/h200.json",
        "scripts/device_run.sh",
        "docs/kernel.md",
        "kdtree_mla/notes.md",
        "csrc/README.md",
        "build/lib/kdtree_mla/api.py",
        "kdtree_mla/__pycache__/api.cpython-311.pyc",
        "kdtree_mla/_C.cpython-311-x86_64-linux-gnu.so",
        "kdtree_mla_testing/__init__.py",
        "kdtree_mla_testing/ref.py",
        "kdtree_mla_testing/inputs.py",
        "kdtree_mla_testing/standalone.py",
        "kdtree_mla_testing/standalone_runtime.py",
    ],
)
def test_nothing_outside_the_build_matches(rel):
    assert not matches(rel), f"build-files.txt matches {rel}: not read by the build"


def test_no_listed_file_is_a_test_bench_script_or_doc():
    for rel in listed():
        top = rel.split("/", 1)[0]
        assert top not in {"tests", "bench", "scripts", "docs", "build"}, rel
        assert not rel.endswith((".md", ".txt", ".json", ".patch", ".log")), rel


def test_every_tracked_file_the_build_reads_is_listed_and_nothing_else():
    """Against git: the tracked files the globs match are the sources, includes, modules and
    packaging above, exactly (a new tracked file under csrc/ or kdtree_mla/ the build does not
    read would change the image tag for nothing)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "."], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    tracked = {line for line in out.splitlines() if line}
    needed = package_modules() | {"setup.py", "pyproject.toml", "kdtree_mla_startup.pth"}
    for src in setup_sources():
        includes(src, needed)
    assert {rel for rel in tracked if matches(rel)} == needed


#: Test support that must stay out of the wheel and the serving image: the fp64 reference, the
#: random inputs, SGLang's backend outside a server, the benchmarks' measurements.
TESTING = "kdtree_mla_testing"


def wheel_packages() -> list[str]:
    """The packages the wheel holds, as setuptools reads them from pyproject.toml (an explicit
    list, or what a `find` directive finds in this folder)."""
    from setuptools import find_namespace_packages, find_packages
    from setuptools.config.pyprojecttoml import read_configuration

    packages = read_configuration(ROOT / "pyproject.toml")["tool"]["setuptools"]["packages"]
    if isinstance(packages, dict):  # packages = {find = {...}} / {find-namespace = {...}}
        finder = find_namespace_packages if "find-namespace" in packages else find_packages
        options = dict(next(iter(packages.values())))
        where = options.pop("where", ["."])
        return [p for w in where for p in finder(str(ROOT / w), **options)]
    return list(packages)


def test_the_wheel_ships_no_test_support():
    packages = wheel_packages()
    assert "kdtree_mla" in packages and "kdtree_mla.sglang" in packages
    assert not [p for p in packages if p.split(".")[0] == TESTING], packages
    assert (ROOT / TESTING / "__init__.py").is_file()
    support = ("ref.py", "inputs.py", "standalone.py", "standalone_runtime.py")
    for rel in package_modules() | listed():
        assert rel.rsplit("/", 1)[-1] not in support, f"{rel}: test support in the wheel"
        assert not rel.startswith(TESTING + "/"), f"build-files.txt lists {rel}"


def test_the_shipped_modules_never_import_the_test_support():
    for rel in sorted(package_modules()):
        tree = ast.parse((ROOT / rel).read_text(), filename=rel)
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                assert name.split(".")[0] != TESTING, f"{rel}:{node.lineno} imports {name}"


@pytest.mark.parametrize("archs", ["10.0", "9.0;10.0a", "8.0 9.0"])
def test_the_build_refuses_an_architecture_it_does_not_target(archs):
    """sm_100 (say) has the shared memory for the 3-stage variant, which was never built or run
    there: setup.py refuses it before compiling, naming the entry and the lists it takes."""
    res = subprocess.run(
        [sys.executable, "setup.py", "--name"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TORCH_CUDA_ARCH_LIST": archs},
    )
    assert res.returncode != 0
    assert "is not a target of kdtree_mla" in res.stderr and "9.0;12.0" in res.stderr, res.stderr
