"""``--set FIELD=VALUE``: a profile field set on the command line, on top of the files.

``FIELD`` is the path ``kctl validate`` names (``server.port``, ``server.env.HF_HOME``,
``runtime.volumes[0].host``); it must name a field of the profile (the JSON Schema of
``kctl schema`` is the list), or :func:`parse_overrides` refuses it with the nearest field.
``VALUE`` is text, typed by that field's schema rather than guessed: ``31000`` is an integer
for ``server.port`` and the string ``'31000'`` for ``server.env.X``; ``null`` unsets a field
that may be null; a list or mapping is written in YAML flow style (``[5700, 23000]``,
``{host: /data, container: /data}``), its items typed the same way. The value is then set
in the merged profile (after ``extends:``) and validated with the rest of it, so a bad
value gets the field's own message, naming ``--set FIELD=VALUE`` as the place to fix.

The loader applies the same overrides to a profile and to its ``baseline:``, so both serve
on the port a ``--set server.port`` names. The effective profile is what is hashed; the
overrides are kept beside it (``Profile.overrides``), recorded with every deployment.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

import yaml

from kctl.errors import ProfileError
from kctl.profile.validate import FieldPath, format_path, unknown_key

#: top-level keys that say where a profile comes from, not what it runs
NOT_SETTABLE = ("extends", "baseline", "name")

_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_INT = re.compile(r"[-+]?\d+")
_EXAMPLE = "e.g. --set server.port=31000"


@dataclass(frozen=True)
class Override:
    """One ``--set``: ``text`` as given (``server.port=31000``), the field path and the
    value typed by the field's schema."""

    text: str
    path: FieldPath
    value: Any

    @property
    def origin(self) -> str:
        """What a problem line names as the place to fix (where a file name would be)."""
        return f"--set {self.text}"


@cache
def _schema() -> dict[str, Any]:
    from kctl.profile.schema import profile_schema

    return profile_schema()


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _resolve(_schema()["$defs"][ref.removeprefix("#/$defs/")])
    return node


def _options(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The alternatives a field allows (``X | None`` is two), each resolved."""
    node = _resolve(node)
    if "anyOf" in node:
        return [o for alt in node["anyOf"] for o in _options(alt)]
    return [node]


def _child(node: dict[str, Any], key: str | int) -> dict[str, Any] | None:
    """The schema of ``key`` inside ``node`` (a mapping's key or a list's index)."""
    for option in _options(node):
        if isinstance(key, int):
            items = option.get("items")
            if option.get("type") == "array" and isinstance(items, dict):
                return dict(items)
            continue
        props = option.get("properties", {})
        if key in props:
            return dict(props[key])
        for pattern, sub in option.get("patternProperties", {}).items():
            if re.search(pattern, key):
                return dict(sub)
        names = option.get("propertyNames", {}).get("pattern")
        extra = option.get("additionalProperties")
        if isinstance(extra, dict) and (names is None or re.search(names, key)):
            return extra
    return None


def _keys(node: dict[str, Any]) -> list[str]:
    return [k for o in _options(node) for k in o.get("properties", {}) if k not in NOT_SETTABLE]


def _split(text: str, field: str) -> FieldPath:
    parts: list[str | int] = []
    pos = 0
    for match in _PART.finditer(field):
        if match.start() != pos and field[pos : match.start()] != ".":
            break
        parts.append(match.group(1) if match.group(1) is not None else int(match.group(2)))
        pos = match.end()
    if pos != len(field) or not parts or isinstance(parts[0], int):
        raise ProfileError(
            [
                f"--set {text}: {field or '(no field)'}: must be a field path as "
                "`kctl validate` prints it, e.g. server.port or runtime.volumes[0].host"
            ]
        )
    return tuple(parts)


def _field_schema(text: str, path: FieldPath) -> dict[str, Any]:
    """The schema of the field at ``path``; ProfileError naming the first unknown part."""
    first = path[0]
    if first in NOT_SETTABLE or str(first).startswith("x-"):
        raise ProfileError(
            [
                f"--set {text}: {first}: says where the profile comes from, not what it "
                "runs; edit it in the profile file (--set sets fields such as server.port)"
            ]
        )
    node: dict[str, Any] = _schema()
    for at, key in enumerate(path):
        child = _child(node, key)
        if child is None:
            where = format_path(path[: at + 1])
            valid = _keys(node)
            patterns = [p for o in _options(node) for p in o.get("patternProperties", {})]
            if patterns and not isinstance(key, int):
                why = f"{key!r} is not a key {format_path(path[:at])} takes (keys match {patterns[0]})"
            elif isinstance(key, int) or not valid:
                why = f"{format_path(path[:at]) or '(top level)'} has no fields or items to set"
            else:
                why = unknown_key(key, valid).replace("unknown key", "unknown field")
            raise ProfileError([f"--set {text}: {where}: {why} (`kctl schema` lists the fields)"])
        node = child
    return node


def _typed(raw: Any, node: dict[str, Any]) -> Any:
    """``raw`` (text, or lists and mappings of text read from YAML flow style) as the
    field's schema types it; what fits no type is returned as it is, for the field's own
    message to refuse."""
    options = _options(node)
    types = {o.get("type") for o in options}
    consts = [o["const"] for o in options if "const" in o]
    if isinstance(raw, list):
        item = next((o["items"] for o in options if o.get("type") == "array"), None)
        return [_typed(v, item) for v in raw] if isinstance(item, dict) else raw
    if isinstance(raw, dict):
        return {_key(k, node): _typed(v, _child(node, str(k)) or {}) for k, v in raw.items()}
    if not isinstance(raw, str):
        return raw
    if raw in consts:
        return raw
    if raw in ("null", "~") and "null" in types:
        return None
    if "integer" in types and _INT.fullmatch(raw):
        return int(raw)
    if "number" in types:
        try:
            return float(raw)
        except ValueError:
            pass
    if "boolean" in types and raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    if types & {"array", "object"} and raw[:1] in ("[", "{"):
        try:
            parsed = yaml.load(raw, Loader=yaml.BaseLoader)  # noqa: S506 - text only
        except yaml.YAMLError:
            return raw
        return _typed(parsed, node)
    return raw


def _key(key: Any, node: dict[str, Any]) -> Any:
    """A mapping key as the field spells it: context lengths are integers."""
    for option in _options(node):
        names = option.get("propertyNames", {}).get("pattern")
        if names == "^[1-9][0-9]*$" and isinstance(key, str) and key.isdigit():
            return int(key)
    return key


def parse_overrides(items: Iterable[str]) -> tuple[Override, ...]:
    """Each ``FIELD=VALUE`` checked against the profile's schema and typed; ProfileError
    (exit 2) names the first bad one and the fix. A later ``--set`` of the same field wins."""
    out: list[Override] = []
    for text in items:
        field, eq, raw = text.partition("=")
        if not eq:
            raise ProfileError([f"--set {text}: must be FIELD=VALUE, {_EXAMPLE}"])
        path = _split(text, field.strip())
        out.append(Override(text, path, _typed(raw, _field_schema(text, path))))
    return tuple(out)


def apply_overrides(
    data: dict[str, Any], overrides: Iterable[Override]
) -> tuple[dict[str, Any], list[str]]:
    """``data`` (a merged profile mapping) with each override set, and the problems of
    those that cannot be set there (an index past the end of a list)."""
    out = copy.deepcopy(data)
    problems: list[str] = []
    for o in overrides:
        node: Any = out
        for at, key in enumerate(o.path[:-1]):
            nxt = o.path[at + 1]
            if isinstance(key, int):
                if not (isinstance(node, list) and key < len(node)):
                    problems.append(_past_end(o, at, node))
                    break
                node = node[key]
                continue
            if not isinstance(node.get(key), (dict, list)):
                node[key] = [] if isinstance(nxt, int) else {}
            node = node[key]
        else:
            last = o.path[-1]
            if isinstance(last, int) and not (isinstance(node, list) and last < len(node)):
                problems.append(_past_end(o, len(o.path) - 1, node))
                continue
            node[last] = o.value
    return out, problems


def _past_end(o: Override, at: int, node: Any) -> str:
    where = format_path(o.path[:at])
    has = len(node) if isinstance(node, list) else 0
    return (
        f"{o.origin}: {format_path(o.path[: at + 1])}: {where} has {has} item(s) in this "
        f"profile; set an existing item, or the whole list: --set '{where}=[...]'"
    )
