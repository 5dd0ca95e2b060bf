"""Every page in a real headless Chromium, with a screenshot each, and what the issue asked of
them: the login card centred, a favicon, one time format (the viewer's local time with its
zone), table columns that do not move when a state changes, notifications grouped per
document in plain sentences, report runs appearing live on the Reports page, a live indicator
that says when the stream is reconnecting and when the session has ended, and the telemetry
chart's axes and legend drawn.

Screenshots go to the test's temporary directory (printed in the measurements) so a person can
look at them; the assertions are what the test guarantees.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest
from playwright.sync_api import Page

from celery_conf import names
from tests.documents.tally import sample_text
from tests.notifications.test_browser import browser, log_in  # noqa: F401  (fixture)
from tests.procs import wait_until

pytestmark = pytest.mark.processes

# A zone that is not UTC, so "local time" is visibly not the server's time.
ZONE_RE = re.compile(r"(GMT[+-]\d+|CET|CEST|[A-Z]{2,5})$")


def widths(page: Page, table: str) -> list[float]:
    return page.evaluate(f"""() => Array.from(document.querySelectorAll('{table} thead th'))
        .map(th => th.getBoundingClientRect().width)""")


def times(page: Page) -> list[str]:
    return page.evaluate("""() => Array.from(document.querySelectorAll('time[datetime]'))
        .map(t => t.textContent)""")


def _page(context) -> Page:  # type: ignore[no-untyped-def]
    page = context.new_page()
    page.set_viewport_size({"width": 1200, "height": 800})
    return page


def shot(page: Page, directory: Path, name: str) -> Path:
    path = directory / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def test_every_page_renders_well_and_updates_live(make_stack, browser, tmp_path,  # noqa: F811
                                                  measure):
    stack = make_stack(env={"DOCUMENTS_PROCESSING_SECONDS": "1"})
    web = stack.start_web(workers=2)
    stack.start_worker("w1", concurrency=1)
    shots = tmp_path / "screens"
    shots.mkdir()
    page = _page(browser)

    page.goto(web.base + "/accounts/login/")
    assert page.locator("link[rel=icon]").count() == 1
    card = page.locator(".card").bounding_box()
    assert card is not None
    assert abs(card["x"] + card["width"] / 2 - 600) < 20, card  # centred across
    assert card["y"] > 100, card  # and down the page, not stuck to the header
    shot(page, shots, "01-login")
    log_in(page, web)
    page.wait_for_selector("body[data-live=live]", timeout=30_000)

    # Documents: the row reaches "done" live, the columns stay where they were.
    client = web.session()
    doc_id = client.submit(sample_text(4), title="a document seen live")
    row = f'tr[data-id="{doc_id}"] [data-state]'
    page.wait_for_selector(row, timeout=30_000)
    before = widths(page, "#documents")
    page.wait_for_function(f"document.querySelector('{row}').textContent === 'done'",
                           timeout=60_000)
    assert widths(page, "#documents") == before
    stamps = times(page)
    assert stamps and all(ZONE_RE.search(t.strip()) for t in stamps), stamps
    assert page.locator("input[type=file]").evaluate(
        "e => getComputedStyle(e, '::file-selector-button').borderRadius") != "0px"
    shot(page, shots, "02-documents")
    page.goto(web.base + f"/documents/{doc_id}/")
    assert all(ZONE_RE.search(t.strip()) for t in times(page))
    shot(page, shots, "03-document")

    # Reports: a run started by hand appears live and reaches its outcome.
    page.goto(web.base + "/reports/")
    page.wait_for_selector("body[data-live=live]", timeout=30_000)
    stack.manage("run_periodic_job", names.REPORTS_RETENTION_PURGE, "--wait", "60")
    page.wait_for_selector("#runs tr[data-run-id] [data-field=outcome] .state-done",
                           timeout=30_000)
    assert all(ZONE_RE.search(t.strip()) for t in times(page) if t.strip())
    shot(page, shots, "04-reports")

    # Notifications: one line per document (its latest state), plain sentences, report runs.
    notes = _page(browser)
    notes.goto(web.base + "/notifications/")
    notes.wait_for_selector("body[data-live=live]", timeout=30_000)
    line = notes.locator(f"#events li[data-group='document-{doc_id}']")
    assert line.count() == 1
    assert "“a document seen live” is done." in (line.text_content() or "")
    run_line = notes.locator("#events li[data-kind='report.run']").first
    assert "finished." in (run_line.text_content() or "")
    assert " is failed" not in (notes.locator("#events").text_content() or "")
    shot(notes, shots, "05-notifications")

    # Telemetry: samples arrive, the axes and legend are drawn.
    page.goto(web.base + "/telemetry/")
    page.wait_for_function("document.body.getAttribute('data-live') === 'live'",
                           timeout=30_000)
    page.wait_for_function("Number(document.getElementById('tm-rate').textContent) >= 10",
                           timeout=30_000)
    shot(page, shots, "06-telemetry")
    page.goto(web.base + "/usage/")
    shot(page, shots, "07-usage")

    # A lost stream shows "reconnecting", then "live" again (Redis killed and restarted: every
    # worker's subscription drops, every stream is told to resync and reconnects).
    notes.evaluate("""() => { window.liveStates = [];
      new MutationObserver(() => window.liveStates.push(document.body.getAttribute('data-live')))
        .observe(document.body, {attributes: true, attributeFilter: ['data-live']}); }""")
    stack.redis.kill(signal.SIGKILL)
    stack.redis.restart()
    notes.wait_for_function("window.liveStates.includes('reconnecting') && "
                            "document.body.getAttribute('data-live') === 'live'", timeout=30_000)

    # Logging out in one tab ends the other tab's stream, and its indicator says so.
    page.goto(web.base + "/documents/")
    page.click("header button[type=submit]")  # Log out
    notes.wait_for_selector("body[data-live=stopped]", timeout=30_000)
    assert "signed out" in (notes.locator("[data-live-status]").text_content() or "")
    shot(notes, shots, "08-signed-out")
    wait_until(lambda: len(list(shots.glob("*.png"))) == 8, timeout=5, what="screenshots")
    measure(screenshots=str(shots))
