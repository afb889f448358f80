"""Shared inputs of the Kubernetes render tests: the shipped profiles and fleets, and a
writer for fleet files and profile variants in a temporary directory."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: deployable shipped profiles (a leading "_" marks a base, never deployed by name)
PROFILES = sorted(p for p in (REPO / "profiles").glob("*.yaml") if not p.name.startswith("_"))
FLEETS = sorted((REPO / "fleets").glob("*.yaml"))
EXAMPLE = REPO / "fleets" / "k8s-example.yaml"
MULTINODE = REPO / "fleets" / "k8s-multinode.yaml"
TRITON = REPO / "profiles" / "triton-graphs.yaml"
KDTREE = REPO / "profiles" / "kdtree-graphs.yaml"


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, str], str]:
    """``write(name, yaml_text)`` -> the file's path (as a string)."""

    def _write(name: str, text: str) -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return str(path)

    return _write
