"""What the browser tests share: Debian's Chromium, launched once per test process;
each test gets it with no page open, and the pages it opened are closed after it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="session")
def _chromium() -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield instance
        instance.close()


@pytest.fixture
def browser(_chromium: Browser) -> Iterator[Browser]:
    yield _chromium
    for context in _chromium.contexts:  # (each page a test opened has its own)
        context.close()
