"""Count the public functions and methods of ``kctl/`` whose return annotation contains
``dict[str, Any]``: results that should be typed models (docs/json-output.md).

    python scripts/dict_returns.py          # the count, then one line per function
    python scripts/dict_returns.py --count  # the count only

Public: the function's name, its class's name and its module's path have no part that
starts with ``_`` (``__init__`` and other dunders count as public methods), and it is not
defined inside another function. tests/packaging/test_dict_returns.py pins the count: it
may fall, never rise.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "kctl"
LOOSE = ("dict[str, Any]", "Dict[str, Any]")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defs(
    body: list[ast.stmt], owner: str
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """The public functions of a module or class body (not those inside functions)."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if not _private(node.name):
                yield f"{owner}{node.name}", node
        elif isinstance(node, ast.ClassDef) and not _private(node.name):
            yield from _defs(node.body, f"{owner}{node.name}.")
        elif isinstance(node, ast.If):  # TYPE_CHECKING or version branches
            yield from _defs(node.body + node.orelse, owner)


def found(package: Path = PACKAGE) -> list[str]:
    """``path:line name -> annotation`` of each public function that returns a loose dict."""
    rows = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent)
        if any(_private(part.removesuffix(".py")) for part in rel.parts):
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for name, node in _defs(tree.body, ""):
            if node.returns is None:
                continue
            annotation = ast.unparse(node.returns)
            if any(loose in annotation for loose in LOOSE):
                rows.append(f"{rel}:{node.lineno} {name} -> {annotation}")
    return rows


def main(argv: list[str]) -> int:
    rows = found()
    print(len(rows))
    if "--count" not in argv:
        print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
