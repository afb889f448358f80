"""The report's inlined Vega script is bundled once and kept in the user's cache dir."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import vl_convert

from kctl.report import page


@pytest.fixture
def bundler(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[str]]:
    """vl-convert's bundler replaced by a counting stub; the cache dir under tmp_path."""
    calls: list[str] = []

    def bundle(snippet: object, vl_version: str) -> str:
        calls.append(vl_version)
        return f"var vega = 1; // {vl_version} </script>"

    monkeypatch.setattr(vl_convert, "javascript_bundle", bundle)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    page.vega_bundle.cache_clear()
    yield calls
    page.vega_bundle.cache_clear()


def _cached(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / "kctl").glob("vega-bundle-*.js"))


def test_the_bundle_is_built_once_and_read_back_by_a_later_process(
    bundler: list[str], tmp_path: Path
) -> None:
    first = page.vega_bundle()
    assert len(bundler) == 1
    assert "<\\/script>" in first and "</script" not in first
    (kept,) = _cached(tmp_path)
    assert vl_convert.__version__ in kept.name and bundler[0] in kept.name
    assert kept.read_text() == first
    page.vega_bundle.cache_clear()  # what a new kctl process starts with
    assert page.vega_bundle() == first
    assert len(bundler) == 1


def test_a_cached_file_cut_short_is_bundled_again(bundler: list[str], tmp_path: Path) -> None:
    whole = page.vega_bundle()
    (kept,) = _cached(tmp_path)
    kept.write_text(whole[: len(whole) // 2])
    page.vega_bundle.cache_clear()
    assert page.vega_bundle() == whole
    assert len(bundler) == 2
    assert kept.read_text() == whole


def test_an_unwritable_cache_dir_costs_only_the_bundling(
    bundler: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    got = page.vega_bundle()
    assert got.startswith("var vega = 1;") and len(bundler) == 1
    assert blocker.read_text() == "not a dir"
