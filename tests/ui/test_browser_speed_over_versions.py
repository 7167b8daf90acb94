"""Did an upgrade make it slower, in a real browser (Debian's chromium driven by Playwright, 1280x900):
History's "Speed over library versions" shows two eras of logged runs (their torch rewritten in the run log
as an upgrade) as a table, a plot and a block to copy; the Cards tab's "Compare two cards" reports on two
cards of this studio's folder; the Machines view lists the cards.

Screenshots go to test-artifacts/ (look at them after a change): speed-over-versions, compare-two-cards,
machines.
"""

from __future__ import annotations

import json

import pytest
from gradio_client import Client

from tests.ui.browser import LONG, MARKS, WIDTH, no_horizontal_scroll, open_page, serve, shot, small, tab
from tests.ui.test_speed_over_versions import card_like, logged_upgrade

pytestmark = MARKS
CELLS = """(id) => [...document.querySelectorAll(`#${id} td, #${id} th`)]
  .filter(c => c.scrollWidth > c.clientWidth + 1).map(c => c.innerText)"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory, "browser-speed")


@pytest.fixture(scope="module")
def page(server):
    logged_upgrade(Client(server.url, verbose=False), server.home)
    folder = server.home / "cards"
    folder.mkdir()
    for made in (
        card_like("amd-epyc-zen3.json", "epyc-before.json", "2026-10-01T09:00:00Z", "2.12.0", 20.0),
        card_like("amd-epyc-zen3.json", "epyc-after.json", "2026-11-01T09:00:00Z", "2.13.0", 26.0),
    ):
        (folder / made["name"]).write_text(json.dumps(made["card"]))
    yield from open_page(server)


def test_the_timeline_shows_each_era_with_its_verdict_a_plot_and_a_block_to_copy(page):
    from playwright.sync_api import expect

    tab(page, "History")
    page.get_by_text("Speed over library versions").click()
    small(page, "timeline", steps=2, side=32)
    page.locator("#timeline-btn").click()
    table = page.locator("#timeline-table")
    expect(table).to_contain_text("slower (+200.0%)", timeout=LONG)
    expect(table.locator("strong", has_text="torch 2.13.0")).to_be_visible()
    expect(page.locator("#timeline-plot canvas, #timeline-plot svg").first).to_be_visible(timeout=LONG)
    expect(page.locator("#timeline-markdown")).to_contain_text("| runs | when | versions |")
    page.locator("#timeline-section").scroll_into_view_if_needed()
    shot(page, "speed-over-versions")
    assert page.evaluate(CELLS, "timeline-table") == [], "a cell's text runs out of it"
    no_horizontal_scroll(page)

    page.locator("#timeline-config textarea, #timeline-config input").first.fill("warp_drive")
    page.locator("#timeline-btn").click()
    expect(page.locator("#timeline-note")).to_contain_text("warp_drive", timeout=LONG)
    expect(table).to_be_hidden()


def test_compare_two_cards_reports_on_the_folders_cards_without_measuring(page):
    from playwright.sync_api import expect

    tab(page, "Cards")
    page.get_by_text("Compare two cards", exact=True).click()
    expect(page.locator("#cards-after input")).to_have_value("epyc-after.json", timeout=LONG)
    expect(page.locator("#cards-before input")).to_have_value("epyc-before.json")
    page.locator("#cards-compare-btn").click()
    report = page.locator("#cards-compare-regression-md")
    expect(report).to_contain_text("Speed before and after: AMD EPYC", timeout=LONG)
    expect(report).to_contain_text("+6.000 s (+30.0%)")
    expect(page.locator("#cards-compare-regression-code")).to_contain_text(
        "| **torch** | 2.12.0 | **2.13.0** |"
    )
    page.locator("#cards-compare").scroll_into_view_if_needed()
    shot(page, "compare-two-cards")
    assert page.evaluate(CELLS, "cards-compare-regression-md") == [], "a cell's text runs out of it"
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH


def test_the_machines_view_lists_the_studios_cards(page):
    from playwright.sync_api import expect

    tab(page, "Cards")
    expect(page.locator("#machines-md")).to_contain_text("NVIDIA H100", timeout=LONG)
    page.locator("#machines-md").scroll_into_view_if_needed()
    shot(page, "machines")
