"""Validate a merged profile mapping against the model and word every problem as one line
``<file>: <field.path>: <what is wrong and the fix> (got <value>)``.

The model (:mod:`kctl.profile.model`) does the validating; this module turns pydantic's
errors into kctl's lines: messages kctl words itself (error type
:data:`~kctl.profile.rules.ERROR_TYPE`) pass through, pydantic's structural errors
(unknown key, missing key, not a mapping, not a list) get kctl's wording, with a
did-you-mean for unknown keys. Lines come in the order of the keys in the file.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter, ValidationError

from kctl.profile import rules
from kctl.profile.model import Profile
from kctl.profile.secretnames import Hidden, looks_secret

#: a field path: mapping keys as str, list indices as int
FieldPath = tuple[str | int, ...]

#: keys a profile file may hold that are not model fields (the loader consumes them)
LOADER_KEYS = ("extends", "name", "baseline")
#: model fields that the loader fills in and a file must not set
FILLED_IN = ("source", "content_hash", "overrides")

PROFILE = TypeAdapter(Profile)


def format_path(path: FieldPath) -> str:
    """``("gate", "contexts", 1)`` -> ``gate.contexts[1]``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out or "(top level)"


def _got(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class Problems:
    """Collects problem lines ``<file>: <field>: <what and fix> (got <value>)``.

    ``origin`` maps a field path to the file that set it, so a mistake inherited through
    ``extends:`` names the file that has to be edited."""

    def __init__(self, origin: Callable[[FieldPath], str]) -> None:
        self.origin = origin
        self.lines: list[str] = []

    def add(self, path: FieldPath, what: str, value: Any) -> None:
        if path[:2] == ("server", "env") and len(path) > 2 and looks_secret(str(path[2])):
            value = Hidden()  # a secret-looking variable's value is never shown
        self.lines.append(f"{self.origin(path)}: {format_path(path)}: {what} (got {_got(value)})")

    def raw(self, line: str) -> None:
        self.lines.append(line)

    def __bool__(self) -> bool:
        return bool(self.lines)


# -- the model's shape, for wording structural errors --------------------------------------


def unwrap(tp: Any) -> Any:
    """The spec class (or tuple of them) inside ``X | None`` / ``tuple[X, ...]``."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        tp = inner[0] if len(inner) == 1 else tp
    return tp


def spec_at(path: FieldPath) -> type | None:
    """The model class that holds the keys at ``path`` (None past a scalar)."""
    tp: Any = Profile
    for part in path:
        if isinstance(part, int):
            if typing.get_origin(tp) is not tuple:
                return None
            tp = unwrap(typing.get_args(tp)[0])
            continue
        if not (dataclasses.is_dataclass(tp) and isinstance(tp, type)):
            return None
        hints = typing.get_type_hints(tp)
        if part not in hints:
            return None
        tp = unwrap(hints[part])
    return tp if dataclasses.is_dataclass(tp) and isinstance(tp, type) else None


def settable(cls: type) -> list[str]:
    names = [f.name for f in dataclasses.fields(cls)]
    if cls is Profile:
        return [*LOADER_KEYS, *(n for n in names if n not in (*FILLED_IN, "name", "baseline"))]
    return names


def unknown_key(key: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if close:
        return f"unknown key; did you mean {close[0]!r}?"
    return "unknown key; valid keys: " + ", ".join(valid)


def _wording(kind: str, path: FieldPath, error: Any) -> tuple[str, Any]:
    """kctl's message and the value to show for one pydantic error."""
    if kind == rules.ERROR_TYPE:
        return str(error["msg"]), error["input"]
    if kind == "unexpected_keyword_argument":
        cls = spec_at(path[:-1])
        return unknown_key(str(path[-1]), settable(cls) if cls else []), error["input"]
    if kind in ("missing", "missing_argument"):
        return "is required", None
    if kind in ("dataclass_type", "dataclass_args_type", "dict_type", "model_type"):
        cls = spec_at(path)
        names = ", ".join(settable(cls)) if cls else "keys"
        return f"must be a mapping of {names}", error["input"]
    if kind in ("tuple_type", "list_type", "iterable_type"):
        return "must be a list", error["input"]
    return str(error["msg"]), error["input"]  # pragma: no cover - a type kctl does not word


def _order(data: Any, path: FieldPath) -> tuple[int, ...]:
    """Where ``path`` sits in the file: the position of each key in its mapping."""
    out: list[int] = []
    node = data
    for part in path:
        if isinstance(node, dict):
            keys = [str(k) for k in node]
            pos = keys.index(str(part)) if str(part) in keys else len(keys)
            out.append(pos)
            node = node.get(part, node.get(str(part))) if pos < len(keys) else None
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            out.append(part)
            node = node[part]
        else:
            out.append(1 << 30)
            node = None
    return tuple(out)


def problems_of(exc: ValidationError, data: Any) -> list[tuple[FieldPath, str, Any]]:
    """``(path, message, value)`` per error, in the order of the file's keys."""
    found = []
    for error in exc.errors():
        # "[key]": pydantic's marker for a mapping key (the path already names the key)
        path = tuple(p for p in error["loc"] if p != "[key]")
        message, value = _wording(error["type"], path, error)
        found.append((path, message, value))
    found.sort(key=lambda f: _order(data, f[0]))
    return found


def build_profile(
    data: dict[str, Any], problems: Problems, *, name: str, source: str, baseline: str | None
) -> Profile | None:
    """Validate the merged mapping (``extends`` and ``x-`` keys already removed) as a
    profile file; None when there were problems (they are in ``problems``)."""
    body = {k: v for k, v in data.items() if k not in ("name", "baseline")}
    written = data.get("name")
    if "name" in data and not (isinstance(written, str) and re.match(rules.NAME_PATTERN, written)):
        problems.add(("name",), rules.NAME_MESSAGE, written)
    for key in FILLED_IN:
        if key in body:
            problems.add((key,), unknown_key(key, settable(Profile)), body.pop(key))
    body.setdefault("server", {})  # so that a missing server.model_path is reported
    payload = {**body, "name": name, "source": source, "baseline": baseline}
    try:
        profile = PROFILE.validate_python(payload, context={rules.FILE: True})
    except ValidationError as exc:
        for path, message, value in problems_of(exc, data):
            problems.add(path, message, value)
        return None
    return None if problems else profile
