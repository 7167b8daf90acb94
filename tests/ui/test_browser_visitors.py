"""Two visitors of a public studio (started as a Space), in two browser contexts with their own cookies: each
sees its own runs in History and says whose they are, never the other's; a reload keeps one's history.
Screenshots: visitor-a-history, visitor-b-history."""

from __future__ import annotations

import pytest

from tests.server import Server
from tests.ui.browser import ARGS, CHROMIUM, HEIGHT, LONG, MARKS, WIDTH, shot, small, tab

pytestmark = MARKS
PROMPTS = {
    "a": "a big red circle on the left, on a black background",
    "b": "a small blue square at the top, on a white background",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("space-browser"), SPACE_ID="someone/studio").start()
    yield srv
    srv.stop()


def generate(page, prompt: str) -> str:
    """Generate `prompt` small, and the run id its card names."""
    small(page, "gen")
    page.locator("#gen-prompt textarea").fill(prompt)
    page.locator("#generate-btn").click()
    card = page.locator("#metrics-card")
    card.get_by_text("per image").wait_for(timeout=LONG)
    return card.inner_text()


def history_text(page) -> str:
    from playwright.sync_api import expect

    tab(page, "History")
    expect(page.locator("#visitor-note")).to_contain_text("your runs alone", timeout=60_000)
    page.locator("#history-btn").click()
    page.wait_for_timeout(1500)
    return page.locator("#history-table").inner_text()


def test_two_browsers_each_see_their_own_runs(server):
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        pages = {}
        for name in ("a", "b"):
            context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
            page = pages[name] = context.new_page()
            page.goto(server.url, wait_until="load")
            page.locator("#generate-btn").wait_for(timeout=60_000)
            generate(page, PROMPTS[name])
        for name, page in pages.items():
            history_text(page)
            table = page.locator("#history-table")
            expect(table).to_contain_text("tiny-shapes", timeout=60_000)
            page.wait_for_timeout(1000)
            shot(page, f"visitor-{name}-history")
            assert table.inner_text().count("tiny-shapes") == 1, f"visitor {name}: {table.inner_text()}"
        pages["a"].reload(wait_until="load")
        pages["a"].locator("#generate-btn").wait_for(timeout=60_000)
        history_text(pages["a"])
        expect(pages["a"].locator("#history-table")).to_contain_text("tiny-shapes", timeout=60_000)
        assert pages["a"].locator("#history-table").inner_text().count("tiny-shapes") == 1
        browser.close()
