"""Fixtures of the browser tests (marker ``browser``): a Temporal dev server WITH its Web UI, an e2e stand
on it, and a headless Chromium driven by Playwright.

The session's dev server (tests/fixtures/temporal.py) runs headless, and every other test keeps it so:
these tests start a dev server of their own, once per module, with the UI on a free loopback port. Like
the session's, it has the module's search attributes and sits behind the chart's mTLS terminator
(``devstack.temporal_tls.local_temporal``): the worker, the watcher and the harness reach it over mTLS,
while the UI talks to the frontend inside the dev server's process and the browser reaches the UI's
HTTP port directly on loopback (as an operator's port-forward to the chart's ``ui`` port would).

The browser is the system's Chromium (Debian: ``apt-get install chromium``; ``.ci/run`` installs it and
``deploy/dev/prerequisites.sh --for test`` checks it), launched by Playwright through
``executable_path``: Playwright's own browser download is never used. ``AI_INFERENCE_CHROMIUM`` names
another binary. A missing Chromium FAILS the test, it is never skipped.

Fixtures:
  temporal_ui   (module) ``TemporalUI``: the ``LocalTemporal`` and the UI's base URL
  ui_stand      (function) an e2e ``Stand`` (tests/e2e/stand.py) whose worker and watcher use it
  browser_page  (function) a Playwright ``Page`` in headless Chromium, 1440x900
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from kubernetes.client import ApiClient
from playwright.async_api import Page, ViewportSize, async_playwright
from temporalio.contrib.pydantic import pydantic_data_converter

from devstack.cluster.launcher import LocalCluster
from devstack.temporal_tls import LocalTemporal, local_temporal
from tests.e2e.stand import Stand, free_port, open_stand
from tests.polling import until
from workflows.search_attributes import ALL_KEYS

CHROMIUM_ENV = "AI_INFERENCE_CHROMIUM"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
VIEWPORT: ViewportSize = {"width": 1440, "height": 900}


def chromium_binary() -> str:
    """The system's Chromium; a missing one fails the test (a CI without it is a broken CI)."""
    named = os.environ.get(CHROMIUM_ENV)
    if named:
        if not (Path(named).is_file() and os.access(named, os.X_OK)):
            pytest.fail(f"{CHROMIUM_ENV}={named} is not an executable file")
        return named
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(
        "no Chromium on PATH (looked for " + ", ".join(CHROMIUM_NAMES) + f"; or set {CHROMIUM_ENV}): "
        "apt-get install chromium (deploy/dev/prerequisites.sh --for test names it too)"
    )


@dataclass
class TemporalUI:
    server: LocalTemporal
    url: str  # the UI's base URL, e.g. http://127.0.0.1:41234
    namespace: str = "default"


def _ui_answers(url: str) -> bool:
    # A call the UI passes on to the frontend: its gRPC connection is up, not only its HTTP.
    try:
        with urllib.request.urlopen(f"{url}/api/v1/namespaces/default", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest_asyncio.fixture(scope="module")
async def temporal_ui(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[TemporalUI]:
    ui_port = free_port()
    async with local_temporal(
        tmp_path_factory.mktemp("temporal-ui"),
        data_converter=pydantic_data_converter,
        search_attributes=list(ALL_KEYS),
        ui=True,
        ui_port=ui_port,
    ) as server:
        ui = TemporalUI(server, f"http://127.0.0.1:{ui_port}")
        await until(lambda: _ui_answers(ui.url), timeout=60, interval=0.3, in_thread=True, what=f"the UI at {ui.url}")
        yield ui


@pytest_asyncio.fixture
async def ui_stand(local_cluster: LocalCluster, kube_admin: ApiClient, temporal_ui: TemporalUI) -> AsyncIterator[Stand]:
    client = await temporal_ui.server.connect("admin", data_converter=pydantic_data_converter)
    async with open_stand(local_cluster, kube_admin, client) as stand:
        yield stand


@pytest_asyncio.fixture
async def browser_page() -> AsyncIterator[Page]:
    executable = chromium_binary()
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            context = await browser.new_context(viewport=VIEWPORT, color_scheme="light", locale="en-US")
            page = await context.new_page()
            page.set_default_timeout(30_000)
            yield page
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(browser.close(), 30)
