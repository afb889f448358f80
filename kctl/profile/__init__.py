"""Launch profiles: the model (:mod:`.model`: frozen pydantic dataclasses with field types
from :mod:`.fields`, cross-field rules in :mod:`.checks`), the loader (:mod:`.loader`:
bounded YAML reading in :mod:`.reader`, ``extends``/``baseline``, problem lines from
:mod:`.validate`), JSON/hash serialisation and the stored form (:mod:`.serialize`), and
the published JSON Schema (:mod:`.schema`).

The loader is imported on first use, so modules that only need the model
(``from kctl.profile.model import ...``) do not pay for YAML reading.
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
