"""Read a fleet file into a :class:`~kctl.fleet.spec.FleetSpec`, or refuse it with every
problem on one line each, ``<file>: <field.path>: <what is wrong and the fix> (got <v>)``,
as profiles are refused (:class:`~kctl.errors.ProfileError`, exit 2). The YAML is read by
the profile reader (safe loader, size and alias bounds, duplicate keys refused)."""

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
#: keys the loader fills in; a file must not set them
FILLED_IN = ("source",)


def _spec_at(path: FieldPath) -> type | None:
    """The fleet model class holding the keys at ``path``."""
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
    return [f.name for f in dataclasses.fields(cls) if f.name not in FILLED_IN]


def _wording(error: Any, path: FieldPath) -> str:
    kind = error["type"]
    if kind == rules.ERROR_TYPE:
        return str(error["msg"])
    if kind == "unexpected_keyword_argument":
        cls = _spec_at(path[:-1])
        return unknown_key(str(path[-1]), _keys(cls) if cls else [])
    if kind in ("missing", "missing_argument"):
        return "is required" + (" (kind: fleet)" if path == ("kind",) else "")
    if kind in ("dataclass_type", "dataclass_args_type", "dict_type"):
        cls = _spec_at(path)
        return "must be a mapping of " + (", ".join(_keys(cls)) if cls else "keys")
    if kind == "literal_error" and path == ("kind",):
        return "must be 'fleet': a fleet file says so in its first line"
    if kind in ("tuple_type", "list_type"):
        return "must be a list"
    return str(error["msg"]).removeprefix("Value error, ")


def _got(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


#: Docker endpoints a fleet file names: ``unix://`` ones are host paths (the socket)
UNIX = "unix://"


def _endpoints(data: dict[str, Any]) -> list[tuple[FieldPath, Any]]:
    swarm = data.get("swarm")
    if not isinstance(swarm, dict):
        return []
    found: list[tuple[FieldPath, Any]] = [(("swarm", "manager"), swarm.get("manager"))]
    engines = swarm.get("engines")
    if isinstance(engines, dict):
        found += [(("swarm", "engines", str(k)), v) for k, v in engines.items()]
    return found


def _clean_endpoints(display: str, data: dict[str, Any]) -> list[str]:
    """The socket path of each ``unix://`` endpoint normalized in ``data`` (in place), as a
    profile's host paths are; one problem line per path with ``..`` in it."""
    lines = []
    for where, value in _endpoints(data):
        if not (isinstance(value, str) and value.startswith(UNIX)):
            continue
        socket = value[len(UNIX) :]
        if ".." in socket.split("/"):
            meant = UNIX + rules.normal_path(socket)
            lines.append(
                f"{display}: {format_path(where)}: the socket path contains '..'; write the "
                f"path itself, without '..' (here {meant!r}, if that is what is meant) "
                f"(got {_got(value)})"
            )
            continue
        node = data["swarm"] if len(where) == 2 else data["swarm"]["engines"]
        key = where[-1] if len(where) == 2 else _key(data["swarm"]["engines"], where[-1])
        node[key] = UNIX + rules.normal_path(socket)
    return lines


def _key(mapping: dict[Any, Any], name: str | int) -> Any:
    return next(k for k in mapping if str(k) == name)


def load_fleet(path: str | Path) -> FleetSpec:
    """Load and validate one fleet file; :class:`ProfileError` (exit 2) lists every problem."""
    display = str(path)
    try:
        data = read_profile_data(display)
    except ReadError as exc:
        raise ProfileError([f"{display}: {exc}"], noun="fleet file") from None
    if not isinstance(data, dict):
        got = "an empty file" if data is None else type(data).__name__
        raise ProfileError(
            [f"{display}: (top level): must be a mapping with kind: fleet (got {got})"],
            noun="fleet file",
        )
    lines = [
        f"{display}: {key}: set by kctl, not by the file; remove it (got {_got(data[key])})"
        for key in FILLED_IN
        if key in data
    ]
    body = {k: v for k, v in data.items() if k not in FILLED_IN}
    lines += _clean_endpoints(display, body)
    try:
        fleet = FLEET.validate_python({**body, "source": display}, context={rules.FILE: True})
    except ValidationError as exc:
        for error in exc.errors():
            where: FieldPath = tuple(p for p in error["loc"] if p != "[key]")
            value = None if error["type"] in ("missing", "missing_argument") else error["input"]
            got = f" (got {_got(value)})" if where else ""  # a whole-file rule: no value
            lines.append(f"{display}: {format_path(where)}: {_wording(error, where)}{got}")
        raise ProfileError(lines, noun="fleet file") from None
    if lines:
        raise ProfileError(lines, noun="fleet file")
    return fleet
