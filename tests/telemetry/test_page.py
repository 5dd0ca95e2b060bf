"""The chart page in a real headless Chromium: the script connects, counts the samples it
receives and draws them on the canvas; a bad rate typed in the form is refused in the page."""

from __future__ import annotations

import pytest

from tests.notifications.test_browser import browser, log_in  # noqa: F401  (fixture)

pytestmark = pytest.mark.processes

# Counts canvas pixels that are not transparent: zero until something has been drawn.
PAINTED = """() => {
  const c = document.getElementById('tm-chart');
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i]) n++; return n;
}"""


def test_the_chart_draws_the_live_stream(make_stack, browser, measure):  # noqa: F811
    stack = make_stack(env={"TELEMETRY_RATE_HZ": "25"})
    web = stack.start_web(workers=2)
    page = browser.new_page()
    log_in(page, web)
    page.goto(web.base + "/telemetry/")
    page.wait_for_function("document.getElementById('tm-status').textContent === 'live'",
                           timeout=30_000)
    # The page's own one-second count reaches a plausible share of the rate.
    page.wait_for_function("Number(document.getElementById('tm-rate').textContent) >= 20",
                           timeout=30_000)
    assert page.evaluate(PAINTED) > 500
    worker = page.locator("#tm-worker").text_content()
    assert worker is not None and worker.isdigit()

    page.fill("#tm-rate-input", "500")  # above the input's max: the form says so, no request
    page.click("#tm-form [type=submit]")
    assert page.locator("#tm-error").text_content() != ""
    assert page.locator("#tm-status").text_content() == "live"
    measure(page_rate=page.locator("#tm-rate").text_content(), worker=worker)
