"""The import picture of ``kctl/``: layers, no circles (docs/architecture.md, "Layers").

Every ``import`` and ``from ... import`` of every module is read with :mod:`ast`: at
module level, inside functions and methods, and under ``if TYPE_CHECKING:``. An import
of a package's submodule (``from kctl.store import records``) counts as an import of the
submodule. Each module belongs to the package under ``kctl/`` it sits in (``kctl.fleet``
for ``kctl/fleet/swarm.py``; ``kctl.launch`` for ``kctl/launch.py``), and each package to
one layer of :data:`LAYERS`. An import from one package into another must go down:
into a strictly lower layer (packages of one layer are independent of each other).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: kctl's layers, lowest first; a package imports only from layers below its own
LAYERS: tuple[tuple[str, ...], ...] = (
    ("kctl", "kctl.errors"),  # the version; the typed errors (they import nothing of kctl)
    # release tables, client; state dir; text; waits at a fixed interval
    ("kctl.sglang", "kctl.statedir", "kctl.render", "kctl.poll"),
    ("kctl.profile", "kctl.lock", "kctl.sim"),  # the profile model and its checks; lock; simulator
    ("kctl.secrets",),
    ("kctl.runtime",),  # where a server runs: the runtime protocol, local, docker
    ("kctl.launch", "kctl.store", "kctl.health", "kctl.gate"),
    ("kctl.image", "kctl.backend"),
    ("kctl.report",),
    ("kctl.controller",),  # the host commands, planner and executor
    ("kctl.fleet",),  # fleets, built on the controller
    ("kctl.k8s",),  # a profile on a fleet as Kubernetes objects
    ("kctl.cli",),
    ("kctl.__main__",),
)

#: type-only back references inside one package that still close a loop (a module names
#: a sibling's types for annotations under ``TYPE_CHECKING`` while the sibling imports
#: it): the profile model's cross-field checks take the model's sections as arguments,
#: and the model's validators call them. Nothing may join this list; an entry that no
#: longer closes a loop must leave it (a test says so).
TYPE_ONLY_LOOPS: frozenset[tuple[str, str]] = frozenset(
    {("kctl.profile.checks", "kctl.profile.model")}
)


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    #: the importing file, relative to the directory above the package
    path: Path
    line: int
    #: under ``if TYPE_CHECKING:``: read by type checkers, never run
    type_only: bool

    def __str__(self) -> str:
        kind = " (type only)" if self.type_only else ""
        return f"{self.path}:{self.line}: {self.source} imports {self.target}{kind}"


def find_modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Every module of the package at ``root``: dotted name -> (file, is a package)."""
    out: dict[str, tuple[Path, bool]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts.pop()
        out[".".join(parts)] = (path, is_pkg)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _import_nodes(
    node: ast.AST, type_only: bool = False
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement under ``node`` (functions and classes included), and
    whether it sits under ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child, type_only
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.body:
                yield from _import_nodes(ast.Module(body=[stmt], type_ignores=[]), True)
            for stmt in child.orelse:
                yield from _import_nodes(ast.Module(body=[stmt], type_ignores=[]), type_only)
        else:
            yield from _import_nodes(child, type_only)


def _resolve(name: str, modules: Mapping[str, object]) -> str | None:
    """The module ``name`` refers to: itself, else its longest module prefix."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph(root: Path) -> list[Import]:
    """Every import between the modules of the package at ``root``."""
    modules = find_modules(root)
    top = root.name
    found: list[Import] = []
    for source, (path, is_pkg) in modules.items():
        package = source if is_pkg else source.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node, type_only in _import_nodes(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                # ``from pkg import sub`` imports the submodule ``pkg.sub`` when there is one
                names = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            for name in names:
                if name != top and not name.startswith(top + "."):
                    continue
                target = _resolve(name, modules)
                if target is not None and target != source:
                    rel = path.relative_to(root.parent)
                    found.append(Import(source, target, rel, node.lineno, type_only))
    return list(dict.fromkeys(found))  # ``from m import a, b``: one import of m


def package_of(module: str) -> str:
    """The package under the top-level one that ``module`` belongs to."""
    return ".".join(module.split(".")[:2])


def upward_imports(graph: list[Import], layers: tuple[tuple[str, ...], ...]) -> list[Import]:
    """Imports from one package into another that is not in a strictly lower layer."""
    level = {pkg: i for i, layer in enumerate(layers) for pkg in layer}
    return [
        imp
        for imp in graph
        if package_of(imp.source) != package_of(imp.target)
        and level[package_of(imp.target)] >= level[package_of(imp.source)]
    ]


def find_cycle(graph: list[Import]) -> list[Import] | None:
    """One import circle of ``graph`` (its imports in order), or None."""
    edges: dict[str, list[Import]] = {}
    for imp in graph:
        edges.setdefault(imp.source, []).append(imp)
    done: set[str] = set()
    stack: list[str] = []  # the modules on the current path
    path: list[Import] = []  # path[i] leads from stack[i] to stack[i + 1]

    def visit(node: str) -> list[Import] | None:
        stack.append(node)
        for imp in edges.get(node, []):
            if imp.target in stack:
                return [*path[stack.index(imp.target) :], imp]
            if imp.target not in done:
                path.append(imp)
                if (cycle := visit(imp.target)) is not None:
                    return cycle
                path.pop()
        stack.pop()
        done.add(node)
        return None

    for node in sorted(edges):
        if node not in done and (cycle := visit(node)) is not None:
            return cycle
    return None


def _shown(imports: list[Import]) -> str:
    return "\n".join(f"  {imp}" for imp in imports)


@pytest.fixture(scope="module")
def kctl_graph() -> list[Import]:
    return import_graph(REPO / "kctl")


def test_every_package_of_kctl_has_one_layer() -> None:
    named = [pkg for layer in LAYERS for pkg in layer]
    assert len(named) == len(set(named)), "a package is named in two layers"
    present = {package_of(m) for m in find_modules(REPO / "kctl")}
    assert present - set(named) == set(), "place these packages in LAYERS (and the doc)"
    assert set(named) - present == set(), "LAYERS names packages kctl no longer has"


def test_the_errors_module_imports_nothing_of_kctl(kctl_graph: list[Import]) -> None:
    mine = [imp for imp in kctl_graph if imp.source == "kctl.errors"]
    assert mine == [], f"kctl/errors.py must stand alone:\n{_shown(mine)}"


def test_no_import_runs_from_a_lower_layer_to_a_higher(kctl_graph: list[Import]) -> None:
    up = upward_imports(kctl_graph, LAYERS)
    assert up == [], (
        "imports against the layer order (move the shared piece down, see "
        f"docs/architecture.md):\n{_shown(up)}"
    )


def test_no_import_circle(kctl_graph: list[Import]) -> None:
    loose = [imp for imp in kctl_graph if (imp.source, imp.target) not in TYPE_ONLY_LOOPS]
    cycle = find_cycle(loose)
    assert cycle is None, f"an import circle:\n{_shown(cycle or [])}"


def test_the_known_type_only_loops_are_type_only_and_still_there(
    kctl_graph: list[Import],
) -> None:
    by_pair: dict[tuple[str, str], list[Import]] = {}
    for imp in kctl_graph:
        by_pair.setdefault((imp.source, imp.target), []).append(imp)
    for pair in sorted(TYPE_ONLY_LOOPS):
        imports = by_pair.get(pair, [])
        assert imports, f"{pair[0]} no longer imports {pair[1]}: remove it from TYPE_ONLY_LOOPS"
        assert all(imp.type_only for imp in imports), f"no longer type only:\n{_shown(imports)}"
        assert package_of(pair[0]) == package_of(pair[1])
        rest = [imp for imp in kctl_graph if (imp.source, imp.target) != pair]
        assert find_cycle([*rest, *imports]) is not None, (
            f"{pair[0]} -> {pair[1]} closes no loop any more: remove it from TYPE_ONLY_LOOPS"
        )


# ------------------------------------------------------------------ the checker itself


def _package(root: Path, files: dict[str, str]) -> Path:
    pkg = root / "pkg"
    for name, text in {"__init__.py": "", **files}.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    return pkg


def test_the_checker_sees_imports_in_functions_and_under_type_checking(tmp_path: Path) -> None:
    pkg = _package(
        tmp_path,
        {
            "low/__init__.py": "",
            "low/base.py": "def f():\n    from pkg.high import top\n",
            "high/__init__.py": "",
            "high/top.py": (
                "from typing import TYPE_CHECKING\n"
                "from pkg.low import base\n"
                "if TYPE_CHECKING:\n    from ..low.base import f\n"
            ),
        },
    )
    graph = import_graph(pkg)
    assert {(i.source, i.target, i.line, i.type_only) for i in graph} == {
        ("pkg.low.base", "pkg.high.top", 2, False),
        ("pkg.high.top", "pkg.low.base", 2, False),
        ("pkg.high.top", "pkg.low.base", 4, True),
    }
    cycle = find_cycle(graph)
    assert cycle is not None
    assert {i.source for i in cycle} == {"pkg.low.base", "pkg.high.top"}
    up = upward_imports(graph, (("pkg",), ("pkg.low",), ("pkg.high",)))
    assert [(i.source, i.target) for i in up] == [("pkg.low.base", "pkg.high.top")]
    # packages of one layer are independent: either direction is refused
    same = upward_imports(graph, (("pkg",), ("pkg.low", "pkg.high")))
    assert len(same) == 3


def test_the_checker_finds_no_circle_in_a_tree(tmp_path: Path) -> None:
    pkg = _package(
        tmp_path,
        {"a.py": "import pkg.b\nimport pkg.c\n", "b.py": "from pkg import c\n", "c.py": ""},
    )
    graph = import_graph(pkg)
    assert len(graph) == 3
    assert find_cycle(graph) is None
