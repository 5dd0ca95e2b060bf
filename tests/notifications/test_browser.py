"""The pages in a real headless Chromium (Debian's package, driven by Playwright): state
changes made by other processes (a Celery worker, a management command) appear live."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, sync_playwright

from tests.documents.tally import sample_text
from tests.procs import Web

pytestmark = pytest.mark.processes

CHROMIUM = "/usr/bin/chromium"
# As root without outside network: no sandbox, no background fetches, a fresh profile.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[BrowserContext]:
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, args=CHROMIUM_ARGS,
            headless=True)
        try:
            yield context
        finally:
            context.close()


def log_in(page: Page, web: Web) -> None:
    page.goto(web.base + "/accounts/login/")
    page.fill("input[name=username]", "tester")
    page.fill("input[name=password]", "tester-password-1")
    page.click("[type=submit]")
    page.wait_for_url("**/documents/")


def test_pages_show_events_from_other_processes_live(make_stack, browser, measure):
    stack = make_stack(env={"DOCUMENTS_PROCESSING_SECONDS": "1"})
    web = stack.start_web(workers=2)
    stack.start_worker("w1", concurrency=1)
    page = browser.new_page()
    log_in(page, web)
    page.wait_for_selector("body[data-live=live]", timeout=30_000)

    # Submitted through the API (any web worker), processed by the Celery worker: the page,
    # on whichever worker its stream landed, shows the row appear and reach "done".
    doc_id = web.session().submit(sample_text(3), title="seen live")
    row = f'tr[data-id="{doc_id}"] [data-state]'
    page.wait_for_selector(row, timeout=30_000)
    page.wait_for_function(
        f"document.querySelector('{row}').textContent === 'done'", timeout=60_000)
    assert page.locator(f'tr[data-id="{doc_id}"] [data-words]').text_content() != ""

    # The notifications page: a broadcast from a management command arrives live.
    notes = browser.new_page()
    notes.goto(web.base + "/notifications/")
    notes.wait_for_selector("body[data-live=live]", timeout=30_000)
    stack.manage("broadcast", "hello from the command line")
    notes.wait_for_selector("#events li[data-kind=broadcast]", timeout=30_000)
    text = notes.locator("#events li[data-kind=broadcast]").first.text_content() or ""
    assert "hello from the command line" in text
    # The document's earlier state changes are on one line (rendered from the replay log):
    # its latest state, and the number of updates it had.
    line = notes.locator("#events li[data-kind='document.state']")
    assert line.count() == 1
    assert int(line.get_attribute("data-count") or 0) >= 3
    assert "is done." in (line.text_content() or "")
    measure(document_id=doc_id, broadcast_seen=True)
