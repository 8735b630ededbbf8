"""Headless Chromium (Debian's package) driven by Playwright.

``make test`` installs Debian's chromium when it can (``make browser``).
Without /usr/bin/chromium the browser tests are skipped with that reason,
unless DURABLECACHE_REQUIRE_BROWSER is set (CI), where they fail instead.
Screenshots go to test-artifacts/screenshots/ (DURABLECACHE_ARTIFACTS_DIR).
"""

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import ROOT

CHROMIUM = "/usr/bin/chromium"
# Without the background-networking flags Chromium's own connections are
# refused by a closed network, many at a time; --no-sandbox: run as root.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


# Module scope, not session: while Playwright's sync API runs, it keeps an
# event loop running in this thread, and every later asyncio.run (the
# client library's tests, the end-to-end tests) would fail.
@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        message = f"{CHROMIUM} is missing (Debian: apt-get install chromium)"
        if os.environ.get("DURABLECACHE_REQUIRE_BROWSER"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    where = (
        Path(os.environ.get("DURABLECACHE_ARTIFACTS_DIR", ROOT / "test-artifacts"))
        / "screenshots"
    )
    where.mkdir(parents=True, exist_ok=True)
    return where
