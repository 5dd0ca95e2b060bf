"""Every page in a real headless Chromium, with screenshots, and what was asked of them: the
login card centred, a favicon, one time format (the viewer's local time with its zone), table
columns that do not move when a state changes, notifications grouped per document in plain
sentences, a document's own page, the usage count and the Reports page's runs, jobs and beat
line updating live, a broadcast shown as a banner on another page, a form that checks sizes
in its own units and keeps what was typed, error pages in the site's layout, a live indicator
that says when the stream is reconnecting and when the session has ended, the telemetry
chart's axes and legend drawn; and every page usable at a phone's width (390 px) as at a
desktop's (1280 px): no sideways scrolling, no word broken inside a table cell.

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

WIDTHS = (390, 1280)
# Every page at both widths: sideways scrolling of the page, words split across lines inside a
# table cell (a word is a run of non-blank characters), and cells whose content overflows.
LAYOUT_PROBLEMS = """() => {
  const problems = [];
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth) {
    problems.push('page scrolls sideways: ' + root.scrollWidth + ' > ' + root.clientWidth);
  }
  for (const cell of document.querySelectorAll('td, th')) {
    if (!cell.getClientRects().length) continue;  // hidden (a table's header on a phone)
    if (cell.scrollWidth > cell.clientWidth + 1) {
      problems.push('overflows its cell: ' + cell.textContent.trim().slice(0, 40));
    }
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const word of node.textContent.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, word.index);
        range.setEnd(node, word.index + word[0].length);
        const lines = new Set(Array.from(range.getClientRects())
          .filter(r => r.width > 0).map(r => Math.round(r.top)));
        if (lines.size > 1) problems.push('word broken in a cell: ' + word[0]);
      }
    }
  }
  return problems;
}"""

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
    stack = make_stack(env={"DOCUMENTS_PROCESSING_SECONDS": "3"})
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
    page.set_viewport_size({"width": WIDTHS[0], "height": 800})
    assert page.evaluate(LAYOUT_PROBLEMS) == []
    shot(page, shots, f"{WIDTHS[0]}-login")
    page.set_viewport_size({"width": 1200, "height": 800})
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

    # A document's own page, opened while it is queued or processing, reaches "done" by itself
    # with its summary and runs.
    # Long enough (a canary: 8 s of work) to be caught unfinished on a loaded machine.
    live_id = client.submit(sample_text(5) + "\n#!canary:work-seconds=8\n",
                            title="watched on its own page")
    page.goto(web.base + f"/documents/{live_id}/")
    page.wait_for_selector("body[data-live=live]", timeout=30_000)
    assert page.locator("#document-state").text_content() in ("queued", "processing")
    page.wait_for_function(
        "document.getElementById('document-state').textContent === 'done'", timeout=60_000)
    page.wait_for_selector("#document-runs td[data-label=Outcome]:has-text('done')")
    assert "Summary" in (page.locator("#document-live").text_content() or "")
    assert all(ZONE_RE.search(t.strip()) for t in times(page))
    shot(page, shots, "03-document")

    # The form checks sizes in its own units before sending, and keeps what was typed.
    page.goto(web.base + "/documents/")
    assert "up to 1 MiB" in (page.locator("#submit-form").text_content() or "")
    page.fill("#title", "too big to send")
    page.evaluate("document.getElementById('text').value = 'x'.repeat(1048577)")
    page.click("#submit-form [type=submit]")
    page.wait_for_selector("#form-error:not([hidden])")
    assert "larger than the limit of 1 MiB" in (page.locator("#form-error").text_content() or "")
    assert page.input_value("#title") == "too big to send"
    assert page.evaluate("document.getElementById('text').value.length") == 1048577
    assert page.url.endswith("/documents/")
    # Sent anyway (no JavaScript check in the way), the server's refusal is a page in the
    # site's layout, in the same units, with a way back to the form as it was.
    refused = client.http.post(web.base + "/documents/", data={"title": "t", "text": "x" * 1114113},
                               headers={**client.headers(), "Accept": "text/html"}, timeout=30)
    assert refused.status_code == 413 and "<header>" in refused.text
    assert "1.06 MiB" in refused.text and "Back to what you typed" in refused.text

    # Reports: a run started by hand appears live and reaches its outcome; the jobs table
    # counts it; the beat line is read again and says when.
    page.goto(web.base + "/reports/")
    page.wait_for_selector("body[data-live=live]", timeout=30_000)
    runs_of_purge = """() => Number(Array.from(document.querySelectorAll('#jobs tbody tr'))
        .find(tr => tr.querySelector('a').textContent === 'reports.retention_purge')
        .querySelector('td[data-label=Runs]').textContent)"""
    runs_before = page.evaluate(runs_of_purge)
    read_at = page.get_attribute("#beat-read-at", "datetime")
    stack.manage("run_periodic_job", names.REPORTS_RETENTION_PURGE, "--wait", "60")
    page.wait_for_selector("#runs tr[data-run-id] [data-field=outcome] .state-done",
                           timeout=30_000)
    page.wait_for_function(f"({runs_of_purge})() === {runs_before + 1}", timeout=30_000)
    page.wait_for_function(
        f"document.getElementById('beat-read-at').getAttribute('datetime') !== '{read_at}'",
        timeout=30_000)
    assert "Read at" in (page.locator("#beat-leader").text_content() or "")
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

    # Usage: the count moves when a submission is accepted elsewhere (the API here).
    page.goto(web.base + "/usage/")
    page.wait_for_selector("body[data-live=live]", timeout=30_000)
    count = int(page.locator("#usage strong").text_content() or 0)
    client.submit(sample_text(6), title="counted live")
    page.wait_for_function(
        f"Number(document.querySelector('#usage strong').textContent) === {count + 1}",
        timeout=30_000)
    shot(page, shots, "06-usage")

    # A broadcast is a banner on every page, here the usage page, not only Notifications.
    stack.manage("broadcast", "the banner reaches every page")
    page.wait_for_selector("#broadcasts .broadcast", timeout=30_000)
    assert "the banner reaches every page" in (page.locator("#broadcasts").text_content() or "")
    page.click("#broadcasts .broadcast button")
    assert page.locator("#broadcasts .broadcast").count() == 0

    # Telemetry: samples arrive, the axes and legend are drawn.
    page.goto(web.base + "/telemetry/")
    page.wait_for_function("document.body.getAttribute('data-telemetry') === 'live'",
                           timeout=30_000)
    page.wait_for_function("Number(document.getElementById('tm-rate').textContent) >= 10",
                           timeout=30_000)
    shot(page, shots, "07-telemetry")

    # Every page at a phone's width and at a desktop's: nothing to scroll sideways, no word
    # broken inside a table cell.
    pages = {"documents": "/documents/", "document": f"/documents/{live_id}/",
             "reports": "/reports/", "notifications": "/notifications/", "usage": "/usage/",
             "telemetry": "/telemetry/", "not-found": "/no-such-page/"}
    problems = {}
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        for name, path in pages.items():
            page.goto(web.base + path)
            page.wait_for_function("document.body.getAttribute('data-live') === 'live'",
                                   timeout=30_000)
            found = page.evaluate(LAYOUT_PROBLEMS)
            if found:
                problems[f"{name} at {width} px"] = found
            shot(page, shots, f"{width}-{name}")
    assert problems == {}, problems

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
    page.set_viewport_size({"width": 1200, "height": 800})
    page.goto(web.base + "/documents/")
    page.click("header button[type=submit]")  # Log out
    notes.wait_for_selector("body[data-live=stopped]", timeout=30_000)
    assert "signed out" in (notes.locator("[data-live-status]").text_content() or "")
    shot(notes, shots, "08-signed-out")
    expected = 9 + len(WIDTHS) * len(pages)
    wait_until(lambda: len(list(shots.glob("*.png"))) == expected, timeout=5, what="screenshots")
    measure(screenshots=str(shots), pages_checked=len(WIDTHS) * len(pages))
