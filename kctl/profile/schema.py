"""The JSON Schema of a profile file, published by ``kctl schema`` for editors.

It is generated from the model (:mod:`kctl.profile.model`), then shaped as a *file* is
written rather than as the resolved profile is held: ``extends`` and ``x-`` anchor keys
are allowed, ``source`` and ``content_hash`` (filled in by the loader) are not, and no key
is required, because a file that ``extends:`` another may set only what differs. What a
schema cannot say (``server.model_path`` present after ``extends:`` is resolved, the
cross-field rules, paths and files) ``kctl validate`` checks.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from kctl.profile.model import Profile
from kctl.profile.validate import FILLED_IN

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _defaults_as_written(node: Any) -> None:
    """A mapping field's default is ``{}`` in a file (``()`` in the model)."""
    if isinstance(node, dict):
        if node.get("type") == "object" and node.get("default") == []:
            node["default"] = {}
        for value in node.values():
            _defaults_as_written(value)
    elif isinstance(node, list):
        for value in node:
            _defaults_as_written(value)


def profile_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a profile file."""
    schema = TypeAdapter(Profile).json_schema(mode="validation")
    props = schema["properties"]
    for key in FILLED_IN:
        props.pop(key)
    props["extends"] = {
        "type": "string",
        "minLength": 1,
        "description": "Path of a base profile, relative to this file; mappings merge.",
    }
    props["baseline"]["description"] = (
        "Path of the known-good profile, relative to the file that declares it; "
        "null when this profile is a known-good baseline."
    )
    props["name"]["description"] = "Shown in status and labels; default: the file's stem."
    schema.pop("required", None)
    schema["patternProperties"] = {"^x-": {"description": "ignored: holds YAML anchors"}}
    _defaults_as_written(schema)
    return {
        "$schema": SCHEMA_DIALECT,
        "title": "kctl profile",
        "description": (
            "A kctl launch profile (YAML). Every key with its default and meaning: "
            "profiles/reference.yaml. `kctl validate` checks what a schema cannot."
        ),
        **{k: v for k, v in schema.items() if k != "title"},
    }
