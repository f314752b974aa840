"""The Temporal UI is the order's progress view (issue 38 item 6; docs/operations.md, "The Temporal UI
as the progress view"), shown in a real browser: headless Chromium, driven by Playwright, on the Web UI
of a real dev server that the e2e stand's worker and watcher run against (tests/ui/conftest.py).

An operator who knows only the order's name types ``ExecutionStatus = "Running" AND OrderName =
"<name>"`` into the workflow list's search box (a run that continued as new stays listed, closed),
adds the order's search attributes as columns, and finds the order's one running workflow with its
phase; opens it, and reads on its User Metadata tab the summary (``order <namespace>/<name>``) and the
current details the workflow publishes (``workflows/order_details.py``): the phase and reason, the
class and device, and once Ready the time-to-Ready table, step by step.

The order's stand-in runtime answers 503 at first, so the UI is read twice: while the order waits for
its first probe (Pending) and after the runtime recovers (Ready, with a time to Ready that includes the
wait). Screenshots of the filtered list and of the order's page go to the test's folder, and to
``$AI_INFERENCE_UI_SCREENSHOTS`` when it is set (how docs/images/temporal-ui-*.png are made:
``AI_INFERENCE_UI_SCREENSHOTS=docs/images pytest tests/ui``).
"""

from __future__ import annotations

import os
import re
import shutil
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import FrameLocator, Locator, Page, ViewportSize
from temporalio.client import WorkflowHandle

from tests.e2e.stand import Stand
from tests.polling import until
from tests.ui.conftest import TemporalUI
from workflows.order import SERVING_RUN_EVENTS
from workflows.order_details import STEP_LABELS

pytestmark = [pytest.mark.browser, pytest.mark.temporal]

ORDER = "support-llm"
MODEL = {"src": "HuggingFace", "ref": {"name": "Qwen/Qwen2.5-7B-Instruct"}}
SCREENSHOTS_ENV = "AI_INFERENCE_UI_SCREENSHOTS"
LIST_PNG = "temporal-ui-orders-list.png"
ORDER_PNG = "temporal-ui-order-details.png"
# The order's search attributes as columns of the list, in place of the run id, type and times.
COLUMNS_ADDED = ("OrderNamespace", "OrderName", "OrderPhase", "OrderReason", "OrderDeviceClass")
COLUMNS_REMOVED = ("Run ID", "Type", "Start", "End")
# One row of the step table as the UI renders it: label, seconds, share.
STEP_ROW = re.compile(r"^(?P<step>.+?)\s+(?P<seconds>\d+\.\d\d)\s+(?P<share>\d+\.\d%|—)$")
TOTAL_ROW = re.compile(r"^total\s+(?P<seconds>\d+\.\d\d)$")
# The pictures' windows: wide enough for the list's columns and the details panel's tables.
LIST_VIEWPORT: ViewportSize = {"width": 1600, "height": 480}
DETAILS_VIEWPORT: ViewportSize = {"width": 1680, "height": 1180}


async def _poll_ui(read: Callable[[], Awaitable[bool]], what: str, refresh: Callable[[], Awaitable[object]]) -> None:
    """The UI reads Temporal when a page loads (and on its own refresh): reload until ``read`` holds."""

    async def check() -> bool:
        if await read():
            return True
        await refresh()
        return False

    await until(check, timeout=60, interval=1.0, what=what)


async def _cell(row: Locator, page: Page, column: str) -> str:
    """The text of ``row``'s cell under the header ``column`` (the configurable columns, in order)."""
    headers = page.locator('[data-testid^="workflows-summary-table-header-cell-"]')
    names = [(await h.get_attribute("data-testid") or "").removeprefix("workflows-summary-table-header-cell-")
             for h in await headers.all()]  # fmt: skip
    assert column in names, names
    return (await row.get_by_test_id("workflows-summary-table-body-cell").nth(names.index(column)).inner_text()).strip()


async def _search_orders(page: Page, ui: TemporalUI, query: str) -> None:
    """The workflow list, its query typed into the search box (the </> toggle) and run."""
    await page.goto(f"{ui.url}/namespaces/{ui.namespace}/workflows")
    await page.get_by_test_id("toggle-manual-query").click()
    box = page.get_by_test_id("workflow-manual-search-input")
    await box.fill(query)
    await box.press("Enter")
    await page.wait_for_url(re.compile(r"[?&]query="))
    assert urllib.parse.parse_qs(urllib.parse.urlsplit(page.url).query)["query"] == [query], page.url


async def _show_order_columns(page: Page) -> None:
    await page.get_by_test_id("workflows-summary-table-configuration-button").click()
    for column in COLUMNS_REMOVED:
        await page.get_by_role("button", name=f"Remove {column} column").click()
    for column in COLUMNS_ADDED:
        await page.get_by_role("button", name=f"Add {column} column").click()
    drawer = page.get_by_role("heading", name="Configure Workflows Table")
    await page.get_by_role("button", name="Close").click()
    await drawer.wait_for(state="hidden")
    for column in COLUMNS_ADDED:
        await page.get_by_test_id(f"workflows-summary-table-header-cell-{column}").wait_for()


async def _history_length(handle: WorkflowHandle[Any, Any]) -> bool:
    described = await handle.describe()
    return described.raw_description.workflow_execution_info.history_length > SERVING_RUN_EVENTS


async def _continued_as_new(handle: WorkflowHandle[Any, Any], first_run: str | None) -> bool:
    return (await handle.describe()).run_id != first_run


async def _text(frame: FrameLocator) -> str:
    return await frame.locator("body").inner_text()


def _steps(details: str) -> tuple[dict[str, float], float | None]:
    """The rendered step table: each step's seconds, and the total (None where there is no table)."""
    steps: dict[str, float] = {}
    total: float | None = None
    # The UI's Markdown renderer sets typographic apostrophes (U+2019) in "the workload's objects".
    lines = [" ".join(line.replace("\u2019", "'").split()) for line in details.splitlines()]
    for line in (
        lines[lines.index("Last reconcile, step by step:") + 1 :] if "Last reconcile, step by step:" in lines else []
    ):
        if found := TOTAL_ROW.match(line):
            total = float(found["seconds"])
            break
        if found := STEP_ROW.match(line):
            steps[found["step"]] = float(found["seconds"])
    return steps, total


async def _screenshot(page: Page, folder: Path, name: str, publish: bool = True) -> Path:
    """A PNG of the window in ``folder``; copied to ``$AI_INFERENCE_UI_SCREENSHOTS`` too when ``publish``."""
    path = folder / name
    await page.mouse.move(0, 0)  # no hover state in the picture
    await page.screenshot(path=str(path), animations="disabled", caret="hide")
    if publish and (target := os.environ.get(SCREENSHOTS_ENV)):
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(target) / name)
    return path


async def test_an_operator_finds_the_order_by_name_and_reads_its_progress_and_time_to_ready(
    ui_stand: Stand, temporal_ui: TemporalUI, browser_page: Page, tmp_path: Path
) -> None:
    stand, page = ui_stand, browser_page
    # The runtime answers 503 until it recovers: the order waits in Pending for its first probe.
    stand.fleet.fail_from_start(stand.namespace, ORDER)
    created_at = time.monotonic()
    stand.create_order(ORDER, MODEL)
    await stand.until(
        lambda: (stand.condition(ORDER, "WorkloadReady") or {}).get("reason") == "WorkloadProgressing",
        what=lambda: f"{ORDER} waiting for its first probe (now {stand.describe(ORDER)})",
    )
    workflow_id = stand.workflow(ORDER).id
    pending_phase, pending_reason = stand.phase(ORDER)
    assert pending_phase == "Pending", stand.describe(ORDER)

    # -- the list: found by the order's name, typed into the search box; its phase in a column
    # The running run only, as in docs/operations.md: a run that continued as new stays listed, closed.
    await _search_orders(page, temporal_ui, f'ExecutionStatus = "Running" AND OrderName = "{ORDER}"')
    list_url = page.url
    await _show_order_columns(page)
    rows = page.get_by_test_id("workflows-summary-configurable-table-row")
    row = rows.filter(has=page.get_by_role("link", name=workflow_id, exact=True))
    refresh = page.get_by_role("button", name="Refresh")

    async def list_says(phase: str) -> bool:
        return await row.count() == 1 and await _cell(row, page, "OrderPhase") == phase

    await _poll_ui(lambda: list_says("Pending"), "the list's row of the order, Pending", refresh.click)
    assert await rows.count() == 1, await page.locator("main").inner_text()  # the preemption workflow is not listed
    assert await _cell(row, page, "OrderNamespace") == stand.namespace
    assert await _cell(row, page, "OrderName") == ORDER
    assert await _cell(row, page, "OrderReason") == (pending_reason or "")
    assert (await _cell(row, page, "Status")).casefold() == "running"  # shown in capitals

    # -- the order's page: summary and current details, while it waits for its first probe
    await row.get_by_role("link", name=workflow_id, exact=True).click()
    await page.get_by_role("tab", name="User Metadata").click()
    await page.wait_for_url(re.compile(r"/user-metadata$"))
    order_page = page.url
    summary = page.frame_locator("#user-metadata-summary")
    details = page.frame_locator("#user-metadata-current-details")
    assert (await _text(summary)).strip() == f"order {stand.namespace}/{ORDER}"
    pending_text = f"Phase: Pending — {pending_reason}" if pending_reason else "Phase: Pending"

    async def details_say(text: str) -> bool:
        return text in await _text(details)

    await _poll_ui(lambda: details_say(pending_text), f"the details panel: {pending_text}", page.reload)
    pending = await _text(details)
    assert f"{stand.namespace}/{ORDER}" in pending
    assert re.search(r"WorkloadReady\s+False\s+WorkloadProgressing", pending), pending
    # The steps so far, as the panel was last rewritten (at the status write before the probe).
    assert STEP_LABELS["validation"] in _steps(pending)[0], pending
    await _screenshot(page, tmp_path, "pending-" + ORDER_PNG, publish=False)

    # -- the runtime recovers: Ready, in the list and on the order's page, with its time to Ready.
    # Held until the run is past SERVING_RUN_EVENTS, so the Ready order continues as new before it
    # sleeps (as a slow machine's probes made it do in CI): the list then holds the closed run too.
    handle = stand.workflow(ORDER)
    first_run = (await handle.describe()).run_id
    await until(
        lambda: _history_length(handle),
        timeout=240,
        interval=1.0,
        what=lambda: f"{ORDER}'s run past {SERVING_RUN_EVENTS} events while it waits for its first probe",
    )
    held = time.monotonic() - created_at
    stand.fleet.recover(stand.namespace, ORDER)
    await stand.until_phase(ORDER, "Ready")
    ready_within = time.monotonic() - created_at
    await until(
        lambda: _continued_as_new(handle, first_run), timeout=60, interval=0.5, what=f"{ORDER}'s run continued as new"
    )
    device = stand.status(ORDER)["resolved"]["deviceClass"]

    # The filtered list again, by its address (the query is in it; the columns stay as configured):
    # one row, the running run's, Ready.
    await page.set_viewport_size(LIST_VIEWPORT)
    await page.goto(list_url)
    await page.get_by_title("Collapse Navigation").click()  # room for the order's columns
    await _poll_ui(lambda: list_says("Ready"), "the list's row of the order, Ready", refresh.click)
    assert await rows.count() == 1, await page.locator("main").inner_text()
    assert await _cell(row, page, "OrderDeviceClass") == device
    assert await _cell(row, page, "OrderReason") == ""
    await _screenshot(page, tmp_path, LIST_PNG)

    # The running run's page, from its row (the page read while Pending is the closed run's now).
    await row.get_by_role("link", name=workflow_id, exact=True).click()
    await page.get_by_role("tab", name="User Metadata").click()
    await page.wait_for_url(re.compile(r"/user-metadata$"))
    assert page.url != order_page, page.url
    await _poll_ui(lambda: details_say("Phase: Ready"), "the details panel: Phase: Ready", page.reload)
    ready = await _text(details)
    assert f"Device: {device}" in ready, ready
    assert re.search(r"Ready\s+True\s+ProbeSucceeded", ready), ready
    steps, total = _steps(ready)
    assert total is not None, f"no time-to-Ready table in the details panel:\n{ready}"
    # Every step the module runs before the pods, then the wait for the replica and the first probe.
    for key in ("validation", "model facts", "planning", "apply", "probe"):
        assert STEP_LABELS[key] in steps, (key, steps)
    assert abs(sum(steps.values()) - total) <= 0.01 * len(steps) + 0.01, (steps, total)
    # The time to Ready covers the probes the runtime refused, and no more than the order lived.
    assert held - 1 <= total <= ready_within + 1, (held, total, ready_within)
    # A tall window, so the whole details panel shows in the picture.
    await page.set_viewport_size(DETAILS_VIEWPORT)
    await page.get_by_role("tab", name="User Metadata").scroll_into_view_if_needed()
    await _screenshot(page, tmp_path, ORDER_PNG)

    print(
        f"\nthe UI showed {ORDER} Pending ({pending_reason}), then Ready: time to Ready {total:.2f}s "
        f"in {len(steps)} steps; the runtime was held {held:.1f}s"
    )
