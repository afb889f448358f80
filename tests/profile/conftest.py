"""Helpers for profile tests: write YAML files into a temporary directory that is also
the working directory, so messages show short relative paths exactly as given."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

#: a minimal valid profile on the local runtime; invalid-profile tests extend it
OK_YAML = """\
server:
  model_path: /models/m
  port: 39999
runtime:
  kind: local
"""


@pytest.fixture
def write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str, str], str]:
    """``write(name, yaml_text)`` -> the relative path to pass to the loader."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ok.yaml").write_text(OK_YAML)

    def _write(name: str, text: str) -> str:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        return name

    return _write
