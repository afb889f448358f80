"""Fixtures for the state store tests: a temporary state dir and a settable clock."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kctl.store import Store

REPO = Path(__file__).resolve().parents[2]
#: 2026-11-29T10:24:07Z
T0 = 1795947847.0


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def child_env() -> dict[str, str]:
    """Environment for a real child Python process that imports this checkout's kctl."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    return env


PYTHON = sys.executable


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def store(state_dir: Path, clock: FakeClock) -> Iterator[Store]:
    s = Store.open(state_dir, clock=clock)
    try:
        yield s
    finally:
        s.close()


def profile(name: str = "kdtree-eager", content_hash: str = "h-kdtree") -> dict[str, object]:
    """A resolved-profile record as the store keeps it (asdict of a Profile)."""
    return {
        "name": name,
        "source": f"profiles/{name}.yaml",
        "content_hash": content_hash,
        "server": {"port": 30000, "extra_args": []},
    }
