"""The public functions of ``kctl/`` that return a loose ``dict[str, Any]`` are counted by
``scripts/dict_returns.py``; the count may fall, never rise. When a change lowers it, lower
``CEILING`` to the new count in the same commit."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]

#: the count on main; a typed result (a pydantic model or a dataclass) takes a dict's place
CEILING = 90


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "dict_returns", REPO / "scripts" / "dict_returns.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_new_public_function_returns_a_loose_dict() -> None:
    rows = _script().found()
    assert rows, "the walk of kctl/ found nothing: the script lost the package"
    assert len(rows) <= CEILING, (
        f"{len(rows)} public functions return dict[str, Any] (at most {CEILING}): return a "
        "typed model instead, or make the helper private\n" + "\n".join(rows)
    )


def test_the_census_sees_a_loose_dict_and_skips_private_ones(tmp_path: Path) -> None:
    pkg = tmp_path / "kctl"
    (pkg / "_private").mkdir(parents=True)
    (pkg / "a.py").write_text(
        "from typing import Any\n"
        "def pub() -> dict[str, Any]: ...\n"
        "def _helper() -> dict[str, Any]: ...\n"
        "def typed() -> dict[str, int]: ...\n"
        "class C:\n"
        "    def to_dict(self) -> list[dict[str, Any]]: ...\n"
        "class _D:\n"
        "    def to_dict(self) -> dict[str, Any]: ...\n"
    )
    (pkg / "_private" / "b.py").write_text("def pub() -> dict[str, Any]: ...\n")
    rows = _script().found(pkg)
    assert [r.split(" ")[1] for r in rows] == ["pub", "C.to_dict"], rows
