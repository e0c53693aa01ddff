"""Headless Chromium (Debian's ``chromium``) driven by Playwright against a live server.

Playwright never downloads a browser here: it launches ``/usr/bin/chromium`` (or
``MEMMACHINE_TEST_CHROMIUM``) with a fresh profile directory per context. Screenshots go to
``tests/ui/screenshots/`` (git-ignored; ``MEMMACHINE_TEST_SCREENSHOTS`` moves them).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, Playwright, sync_playwright

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-gpu",
]
#: A laptop screen.
VIEWPORT = {"width": 1366, "height": 800}

OpenPage = Callable[[], Page]


def chromium_path() -> str:
    path = os.environ.get("MEMMACHINE_TEST_CHROMIUM") or shutil.which("chromium")
    if path is None:
        pytest.fail("Debian's chromium is not installed (apt-get install chromium)")
    return path


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    """Playwright's driver for one test module. Its sync API runs an event loop in this
    thread while it lives, so it must be gone before the async tests that follow."""
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="session")
def screenshots() -> Path:
    configured = os.environ.get("MEMMACHINE_TEST_SCREENSHOTS")
    folder = Path(configured) if configured else Path(__file__).parent / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def open_page(playwright: Playwright, tmp_path: Path) -> Iterator[OpenPage]:
    """``open_page()``: a page in a new browser with a fresh profile (so a fresh browser
    session: no key remembered); all are closed after the test."""
    contexts: list[BrowserContext] = []
    errors: list[str] = []
    requested: list[str] = []

    def open_one() -> Page:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / f"profile-{len(contexts)}"),
            executable_path=chromium_path(),
            args=CHROMIUM_ARGS,
            headless=True,
            viewport=VIEWPORT,  # type: ignore[arg-type]
        )
        contexts.append(context)
        context.set_default_timeout(20_000)
        page = context.pages[0] if context.pages else context.new_page()
        page.on("pageerror", lambda error: errors.append(str(error)))
        context.on("request", lambda request: requested.append(request.url))
        return page

    yield open_one
    for context in contexts:
        context.close()
    assert errors == [], f"the inspector raised in the browser: {errors}"
    # no CDN, no fonts, nothing from outside: only the server under test was asked
    assert all(url.startswith("http://127.0.0.1:") for url in requested), requested
