"""Launch profiles: the model (:mod:`.model`), the validating loader (:mod:`.loader`,
rules in :mod:`.validate` and :mod:`.rules`) and JSON/hash serialisation
(:mod:`.serialize`).

The loader is imported on first use, so modules that only need the dataclasses
(``from kctl.profile.model import ...``, on ``kctl status``'s startup path) do not pay
for YAML and the validator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kctl.profile.model import Profile

if TYPE_CHECKING:
    from kctl.profile.loader import load_profile, load_profiles
    from kctl.profile.serialize import content_hash, profile_to_dict

__all__ = ["Profile", "content_hash", "load_profile", "load_profiles", "profile_to_dict"]

_LAZY = {
    "load_profile": "kctl.profile.loader",
    "load_profiles": "kctl.profile.loader",
    "content_hash": "kctl.profile.serialize",
    "profile_to_dict": "kctl.profile.serialize",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'kctl.profile' has no attribute {name!r}")
