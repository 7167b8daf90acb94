"""Long jobs in a real browser (Debian's chromium driven by Playwright, 1280x900): Compare and Auto-tune show
where they are while they run, on their own tab, and their own Cancel stops them and shows what was measured.

The runs are sized (256x256, 12 steps: about a second a call on these CPUs) so that each is still running
when the test has read its progress; the screenshots go to test-artifacts/ (look at them after a change).
"""

from __future__ import annotations

import re

import pytest

from tests.ui.browser import LONG, MARKS, no_horizontal_scroll, open_page, serve, shot, small

pytestmark = MARKS
STEPS, SIDE = 12, 256
WHERE = re.compile(r"configuration \d of \d+ \([^)]+\), (warm-up|round) \d of \d")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory, "long-jobs")


@pytest.fixture(scope="module")
def page(server):
    yield from open_page(server)


def _watch_then_cancel(page, prefix: str, job: str, name: str) -> None:
    """While the job runs its status area says where it is (a step of round 2 or 3 of 3 reached: on a loaded
    host the page can miss round 2's few seconds); photograph it, then click the tab's own Cancel."""
    from playwright.sync_api import expect

    status = page.locator(f"#{prefix}-status")
    expect(status).to_contain_text(f"{job}: ", timeout=LONG)
    expect(status).to_contain_text(re.compile(rf"round [23] of 3, step \d+ of {STEPS}"), timeout=LONG)
    assert WHERE.search(status.inner_text()), status.inner_text()
    status.scroll_into_view_if_needed()
    shot(page, f"{name}-progress")
    page.locator(f"#{prefix}-cancel-btn").click()


def _cancelled(page, note: str, table: str, name: str) -> str:
    """The tab shows the cancelled sentence over a table of what was measured; no error."""
    from playwright.sync_api import expect

    expect(page.locator(note)).to_contain_text("Cancelled by the user", timeout=LONG)
    text = page.locator(note).inner_text()
    assert re.search(r"after \d+ of \d+ calls: \d of \d configurations finished \(3 rounds each\)\.", text)
    rows = page.locator(table).inner_text()
    assert "partial: " in rows and " of 3 rounds" in rows, rows
    assert "baseline" in rows and (" s" in rows or " ms" in rows)
    assert page.locator(".toast-body.error").count() == 0, "a cancel is not an error"
    no_horizontal_scroll(page)
    page.locator(note).scroll_into_view_if_needed()
    shot(page, f"{name}-cancelled")
    return text


def test_compare_shows_its_progress_and_its_cancel_keeps_what_was_measured(page):
    page.get_by_role("tab", name="Compare").click()
    small(page, "cmp", STEPS, SIDE)
    boxes = page.locator("#cmp-configs")
    ticked = boxes.locator("input[type=checkbox]:checked")
    assert ticked.count() == 2, "the baseline and two configurations, those likely to pay here"
    assert boxes.get_by_label("channels_last", exact=True).is_checked()
    page.locator("#cmp-rounds input").fill("3")
    page.locator("#compare-btn").click()
    _watch_then_cancel(page, "cmp", "Compare", "compare")
    _cancelled(page, "#cmp-headline", "#cmp-table", "compare")
    from playwright.sync_api import expect

    # the status is cleared when the job ends (its own event, a moment after the table's)
    expect(page.locator("#cmp-status")).to_have_text(re.compile(r"^\s*$"), timeout=LONG)


def test_autotune_shows_its_stage_and_progress_and_its_cancel_offers_nothing(page):
    page.get_by_role("tab", name="Auto-tune").click()
    small(page, "tune", STEPS, SIDE)
    picked = page.get_by_role("combobox", name="Techniques to search", exact=False)
    picked.fill("channels_last")  # a user narrows the search to one technique
    picked.press("Enter")
    page.locator("#tune-rounds input").fill("3")
    page.locator("#tune-confirm input").fill("3")
    page.locator("#tune-btn").click()
    _watch_then_cancel(page, "tune", "Auto-tune", "autotune")
    text = _cancelled(page, "#tune-md", "#tune-table", "autotune")
    assert "measuring each technique alone" in text and "Nothing is offered" in text
    assert page.locator("#tune-apply").is_disabled()
