"""The published JSON Schema (``kctl schema``): valid draft 2020-12, and every shipped
profile validates against it, as written and once its ``extends:`` chain is resolved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from kctl.profile.loader import resolve_file
from kctl.profile.schema import profile_schema

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "profiles").glob("*.yaml")) + sorted(
    (REPO / "tests" / "profiles").glob("*.yaml")
)
VALIDATOR = jsonschema.Draft202012Validator(profile_schema())


def as_json(data: Any) -> Any:
    """What an editor sees: JSON, where mapping keys are strings."""
    return json.loads(json.dumps(data))


def test_the_schema_is_valid_draft_2020_12() -> None:
    schema = profile_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert "source" not in schema["properties"] and "extends" in schema["properties"]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_profile_validates_against_the_schema(path: Path) -> None:
    resolved = as_json(resolve_file(path))
    assert "extends" not in resolved
    assert list(VALIDATOR.iter_errors(resolved)) == []
    as_written = as_json(yaml.safe_load(path.read_text()))
    assert list(VALIDATOR.iter_errors(as_written)) == []


@pytest.mark.parametrize(
    "bad",
    [
        {"server": {"prot": 1}},
        {"server": {"port": "30000"}},
        {"server": {"port": 70000}},
        {"server": {"attention_backend": "fast"}},
        {"server": {"env": {"1BAD": "x"}}},
        {"server": {"env": {"A": 1}}},
        {"gate": {"contexts": [5700, "23k"]}},
        {"gate": {"policy": {"min_ratio_per_context": {"5.7k": 0.9}}}},
        {"runtime": {"gpus": "some"}},
        {"runtime": {"volumes": [{"host": "models", "container": "/m"}]}},
        {"image": {"cuda_archs": ["sm_120"]}},
        {"whatever": 1},
    ],
    ids=repr,
)
def test_the_schema_refuses_what_the_loader_refuses(bad: dict[str, Any]) -> None:
    assert list(VALIDATOR.iter_errors(bad)), bad


def test_the_schema_takes_anchors_and_a_null_that_removes_a_variable() -> None:
    ok = {"x-vol": {"host": "/m"}, "server": {"env": {"A": None}}, "baseline": None}
    assert list(VALIDATOR.iter_errors(ok)) == []


def test_kctl_schema_prints_it(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = [sys.executable, "-c", "import sys; from kctl.cli import main; sys.exit(main())"]
    plain = subprocess.run([*run, "schema"], capture_output=True, text=True, env=env)
    assert plain.returncode == 0, plain.stderr
    assert json.loads(plain.stdout) == profile_schema()
    wrapped = subprocess.run([*run, "--json", "schema"], capture_output=True, text=True, env=env)
    envelope = json.loads(wrapped.stdout)
    assert (envelope["command"], envelope["ok"], envelope["exit_code"]) == ("schema", True, 0)
    assert envelope["result"] == profile_schema()
