"""A profile as JSON-ready data (``kctl plan --json``, the store), its content hash, the
profile rebuilt from the store, and the JSON Schema of a profile file."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, TypeVar, cast

from pydantic import TypeAdapter, ValidationError

from kctl.errors import StoreError
from kctl.profile.model import Profile

T = TypeVar("T")

#: bump when the hashed representation changes meaning, so old hashes never collide
HASH_VERSION = 1

# pair tuples that read better (and hash independently of order) as JSON objects
_PAIR_FIELDS = {"env", "secrets", "min_ratio_per_context", "weights"}


#: fields added after HASH_VERSION 1 whose default keeps the earlier behaviour: hashed only
#: when set, so adding them changed no existing profile's hash (nor the baseline
#: fingerprints and deployment records built on it)
_ADDED_FIELDS: tuple[tuple[tuple[str, ...], Any], ...] = (
    (("gate", "policy", "stop_at_first_fail"), False),
    (("image", "sglang"), None),
    (("gate", "policy", "accept_length_tolerance"), 0.02),
    (("gate", "policy", "max_ttft_ratio"), None),
    (("gate", "policy", "max_itl_p50_ratio"), None),
    (("gate", "policy", "max_itl_p99_ratio"), None),
    (("gate", "vocab_size"), None),
    (("server", "secrets"), {}),
    (("server", "api_key"), None),
)


def _plain(value: Any, key: str = "") -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name), f.name) for f in dataclasses.fields(value)}
    if isinstance(value, tuple):
        if key in _PAIR_FIELDS:
            return {str(k): _plain(v) for k, v in value}
        return [_plain(v) for v in value]
    return value


def profile_to_dict(profile: Profile) -> dict[str, Any]:
    """Every field of the resolved profile as JSON-ready data (tuples become lists, pair
    tuples such as ``server.env`` become objects)."""
    out = _plain(profile)
    assert isinstance(out, dict)
    return out


def content_hash(profile: Profile, *, baseline_hash: str | None = None) -> str:
    """sha256 of the canonical JSON of the resolved profile.

    Excluded: ``source``, ``name``, ``description``, ``content_hash`` and ``overrides``
    (where the file lives, what it is called and which of its values came from ``--set``
    do not change what runs; the values themselves are hashed). The baseline enters as its own content hash,
    not its path, so the hash is the same from any working directory and any ``extends``
    layout, yet changes when the known-good configuration it is gated against changes."""
    data = profile_to_dict(profile)
    for key in ("source", "name", "description", "content_hash", "overrides"):
        data.pop(key, None)
    data["baseline"] = baseline_hash
    data["_hash_version"] = HASH_VERSION
    for path, default in _ADDED_FIELDS:
        *parents, leaf = path
        node = data
        for k in parents:
            node = node[k]
        if node.get(leaf) == default:
            del node[leaf]
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(blob.encode("ascii")).hexdigest()


def _known(cls: Any, data: Any) -> Any:
    """``data`` without the keys ``cls`` no longer has (a store written by another kctl
    version); nested specs likewise. Keys it lacks take the model's defaults."""
    if not (dataclasses.is_dataclass(cls) and isinstance(data, dict)):
        return data
    import typing

    from kctl.profile.validate import unwrap

    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            tp = unwrap(hints[f.name])
            value = data[f.name]
            if typing.get_origin(tp) is tuple and isinstance(value, list):
                item = unwrap(typing.get_args(tp)[0])
                value = [_known(item, v) for v in value]
            else:
                value = _known(tp, value)
            out[f.name] = value
    return out


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def _adapter(cls: Any) -> TypeAdapter[Any]:
    if cls not in _ADAPTERS:
        _ADAPTERS[cls] = TypeAdapter(cls)
    return _ADAPTERS[cls]


def from_stored(cls: type[T], data: Any) -> T:
    """A profile (or one of its specs) from its stored form (``dataclasses.asdict`` through
    JSON, as ``Deployment.profile`` holds it): lists back to tuples, mappings back to
    specs, fields added since it was stored take their defaults, fields since removed are
    dropped. The types are checked, the file rules are not: a stored profile is what ran,
    not a new request to judge."""
    try:
        return cast(T, _adapter(cls).validate_python(_known(cls, data)))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise StoreError(
            f"a stored profile does not fit this kctl's profile model: {where}: {first['msg']}",
            hint="the store was written by an incompatible kctl; use the kctl that wrote it",
        ) from None
