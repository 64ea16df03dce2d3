"""Debian's Chromium driven by Playwright, and an ASGI app served on a loopback port, for dashboard tests.

Playwright's own browser downloads are never used (GUIDE 6): the fixture launches ``/usr/bin/chromium``
(Debian package ``chromium``) headless with a new, empty profile, and fails (never skips) when it or
the ``playwright`` package is missing. Every request the page makes is recorded, so a test can check
that nothing leaves 127.0.0.1.

Import the fixtures in a test module::

    from browser import chromium_fixture  # noqa: F401  (the fixture is named ``chromium``)
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from services import free_port

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
HINT = (
    "install Debian's chromium (scripts/setup.sh --services) and `pip install playwright` (never `playwright install`)"
)


@dataclass
class Chromium:
    """A headless Chromium profile: open pages with ``context.new_page()``; ``requests`` lists every URL asked for."""

    context: Any  # playwright.sync_api.BrowserContext
    requests: list[str] = field(default_factory=list)


@pytest.fixture(scope="module", name="chromium")
def chromium_fixture() -> Iterator[Chromium]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(f"the playwright package is missing: {HINT}", pytrace=False)
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"{CHROMIUM} not found: {HINT}", pytrace=False)
    with tempfile.TemporaryDirectory(prefix="peerwatch-chromium-") as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=ARGS, timeout=30_000
        )
        browser = Chromium(context)
        context.on("request", lambda request: browser.requests.append(request.url))
        try:
            yield browser
        finally:
            context.close()


class Served:
    """An ASGI app served by uvicorn in a thread on 127.0.0.1, until :meth:`stop`."""

    def __init__(self, app: Any) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, name="dashboard-test-server", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "the test server did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
