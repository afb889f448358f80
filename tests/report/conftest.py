"""Headless Chromium for the report's browser tests, through Playwright for Python.

The browser is Debian's ``chromium`` package (``KCTL_CHROMIUM`` names another binary);
nothing is downloaded at run time. Without it (or without Playwright) the browser tests
skip with the reason, except under CI (``CI`` set), where they fail: ``.ci/run`` installs
it with ``scripts/ci-chromium.sh``.

Every page is opened with the network off: the context is offline and every request that
is not for a ``file:`` URL is aborted and recorded, so a test can assert none was tried.
Screenshots go to ``KCTL_REPORT_ARTIFACTS`` (default: a pytest temporary directory).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path(os.environ.get("KCTL_CHROMIUM", "/usr/bin/chromium"))
#: what a sandbox-less CI container needs, and nothing that phones home
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"browser tests must run under CI: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium for the session; skip (fail under CI) without one."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("Playwright for Python is not installed (pip install -e '.[test]')")
    if not CHROMIUM.is_file():
        _unavailable(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set KCTL_CHROMIUM)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots are kept: ``KCTL_REPORT_ARTIFACTS`` or a pytest temporary dir."""
    named = os.environ.get("KCTL_REPORT_ARTIFACTS")
    path = Path(named) if named else tmp_path_factory.mktemp("report-screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class Opened:
    """A report open in the browser: the page, what its console said, the requests it
    tried that were not for a local file, and its uncaught errors."""

    page: Any
    console: list[tuple[str, str]] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def console_errors(self) -> list[str]:
        return [text for kind, text in self.console if kind == "error"] + self.errors

    def marks(self, name: str) -> int:
        """How many marks the chart layer named ``name`` drew (Vega's SVG group
        ``<name>_marks`` holds one element per mark)."""
        return int(self.page.locator(f"svg g.{name}_marks > *").count())

    def texts(self, name: str) -> list[str]:
        return list(self.page.locator(f"svg g.{name}_marks text").all_text_contents())


@pytest.fixture
def open_report(browser: Any, artifacts: Path) -> Iterator[Any]:
    """``open_report(path, shot_name)``: the report opened offline, its charts rendered,
    and a full-page screenshot written to the artifacts directory."""
    contexts: list[Any] = []

    def _open(path: Path, shot: str) -> Opened:
        context = browser.new_context(viewport={"width": 1280, "height": 900}, offline=True)
        contexts.append(context)
        page = context.new_page()
        opened = Opened(page)
        page.on("console", lambda m: opened.console.append((m.type, m.text)))
        page.on("pageerror", lambda e: opened.errors.append(str(e)))

        def route(r: Any) -> None:
            if r.request.url.startswith("file:"):
                r.continue_()
            else:
                opened.blocked.append(r.request.url)
                r.abort()

        context.route("**/*", route)
        page.goto(path.resolve().as_uri())
        page.wait_for_selector("body[data-charts]", timeout=30_000)
        page.screenshot(path=str(artifacts / f"{shot}.png"), full_page=True)
        return opened

    yield _open
    for context in contexts:
        context.close()
