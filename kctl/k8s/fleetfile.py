"""Read a fleet file (:class:`~kctl.fleet.spec.FleetSpec`) for ``kctl render --k8s``.

The YAML is read by the profile reader (safe loader, size and alias bounds, duplicate keys
refused) and validated by the fleet model; every problem is one line
``<file>: <field.path>: <what is wrong and the fix> (got <value>)`` in one
:class:`~kctl.errors.ProfileError` (exit 2), as for profiles.
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from kctl.errors import ProfileError
from kctl.fleet.spec import FleetSpec
from kctl.profile import rules
from kctl.profile.reader import ReadError, read_profile_data
from kctl.profile.validate import FieldPath, format_path, unknown_key, unwrap

FLEET = TypeAdapter(FleetSpec)


def _spec_at(path: FieldPath) -> type | None:
    """The fleet model class that holds the keys at ``path`` (None past a scalar)."""
    tp: Any = FleetSpec
    for part in path:
        if not (dataclasses.is_dataclass(tp) and isinstance(tp, type)):
            return None
        hints = typing.get_type_hints(tp)
        if not isinstance(part, str) or part not in hints:
            return None
        tp = unwrap(hints[part])
    return tp if dataclasses.is_dataclass(tp) and isinstance(tp, type) else None


def _keys(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.name != "source"]


def _wording(error: Any, path: FieldPath) -> str:
    kind = error["type"]
    if kind == "unexpected_keyword_argument":
        cls = _spec_at(path[:-1])
        return unknown_key(str(path[-1]), _keys(cls) if cls else [])
    if kind in ("missing", "missing_argument"):
        return "is required" + (" (kind: fleet)" if path == ("kind",) else "")
    if kind in ("dataclass_type", "dataclass_args_type", "dict_type"):
        cls = _spec_at(path)
        return "must be a mapping of " + (", ".join(_keys(cls)) if cls else "keys")
    if kind == "literal_error" and path == ("kind",):
        return "must be 'fleet'"
    return str(error["msg"]).removeprefix("Value error, ")


def _got(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def load_fleet(path: str | Path) -> FleetSpec:
    """Load and validate one fleet file; :class:`ProfileError` (exit 2) lists every problem."""
    display = str(path)
    try:
        data = read_profile_data(display)
    except ReadError as exc:
        raise ProfileError([f"{display}: {exc}"]) from None
    if not isinstance(data, dict):
        got = "an empty file" if data is None else type(data).__name__
        raise ProfileError(
            [f"{display}: (top level): must be a mapping with kind: fleet (got {got})"]
        )
    if "source" in data:
        raise ProfileError([f"{display}: source: set by kctl, not by the file; remove it"])
    try:
        return FLEET.validate_python({**data, "source": display}, context={rules.FILE: True})
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            where: FieldPath = tuple(p for p in error["loc"] if p != "[key]")
            missing = error["type"] in ("missing", "missing_argument")
            got = "" if missing or not where else f" (got {_got(error['input'])})"
            lines.append(f"{display}: {format_path(where)}: {_wording(error, where)}{got}")
        raise ProfileError(lines) from None
