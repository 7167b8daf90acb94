"""The Cards tab in a real browser (Debian's chromium driven by Playwright, 1280x900): the Machines view
shows this studio's and the project's cards when the tab opens, a folder's cards once loaded, every table
within the page, and another machine's winner fills Generate's form at its card's shape; a run shows its card
and **Use in Generate** ticks its winner in Generate's form.

Screenshots go to test-artifacts/ (look at them after a change): machines-1280, cards-card.
"""

from __future__ import annotations

import re

import pytest

from tests.server import ROOT
from tests.ui.browser import LONG, MARKS, WIDTH, open_page, serve
from tests.ui.test_browser_views import _shot

pytestmark = MARKS
V0 = ROOT / "tests" / "cards" / "fixtures"  # a folder with a schema-0 card
TABLES = """(id) => {
  const block = document.getElementById(id || 'machines-md');
  const tables = [...block.querySelectorAll('table')];
  const cells = [...block.querySelectorAll('td, th')];
  return {block: block.clientWidth, count: tables.length, page: document.documentElement.scrollWidth,
          widest: Math.max(...tables.map(t => t.scrollWidth)),
          spilled: cells.filter(c => c.scrollWidth > c.clientWidth).map(c => c.innerText),
          tallest: Math.max(...[...block.querySelectorAll('tr')].map(r => r.getBoundingClientRect().height))};
}"""
AMX = "Intel Xeon with AMX"  # a machine of docs/cards, as the winners menu names it
TALLEST = 200  # px: a row of at most eight lines (squeezed columns wrap a name a letter a line)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory, "browser-cards")


@pytest.fixture(scope="module")
def page(server):
    yield from open_page(server)


def test_the_machines_view_shows_every_machine_in_tables_that_fit_the_page(page):
    from playwright.sync_api import expect

    page.get_by_role("tab", name="Cards").click()
    tables = page.locator("#machines-md")
    expect(tables).to_contain_text("NVIDIA H100", timeout=LONG)  # docs/cards, loaded as the tab opens
    page.locator("#machines-source textarea").fill(str(V0))
    page.locator("#machines-btn").click()
    expect(tables).to_contain_text("AMD EPYC Zen 3 (family 25 model 1), 2 cores", timeout=LONG)
    for model in ("sd15-arch", "tiny-shapes", "sdxl-arch"):
        expect(tables.get_by_role("heading", name=model)).to_be_visible()
    size = page.evaluate(TABLES)
    assert size["count"] == 3 and not size["spilled"], f"text runs out of its cell: {size}"
    assert size["widest"] <= size["block"] <= WIDTH and size["page"] <= WIDTH, size
    assert size["tallest"] <= TALLEST, f"a row is {size['tallest']} px tall: its columns are squeezed"
    assert page.locator("#machines-notes").inner_text().strip() == ""
    winner = page.locator("#machines-winner input")  # another machine's winner, at its card's shape
    winner.fill(f"{AMX} — sd15-arch 256x256, 10 steps, guidance 7.5 — keeps the math: openvino")
    winner.press("Enter")
    expect(page.locator("#machines-use")).to_be_enabled()
    _shot(page, "machines-1280", "#machines-source", "#machines-winner")
    page.locator("#machines-use").click()
    expect(page.get_by_role("tab", name="Generate", selected=True)).to_be_visible(timeout=LONG)
    page.wait_for_timeout(1500)  # any event the load set off has run
    assert [page.locator(f"#gen-{f} input").input_value() for f in ("steps", "width")] == ["10", "256"]
    assert page.locator("#optimizations-speed").get_by_label("(openvino)", exact=False).is_checked()


def test_a_run_shows_its_card_and_its_winner_fills_generate(page):
    from playwright.sync_api import expect

    page.get_by_role("tab", name="Cards").click()
    page.locator("#cards-configs textarea").fill("channels_last\nattention_slicing,vae_slicing,vae_tiling")
    page.locator("#cards-warmup input").fill("0")
    page.locator("#cards-rounds input").fill("1")
    page.locator("#cards-run-btn").click()
    summary = page.locator("#cards-summary")
    expect(summary).to_contain_text("Card: ", timeout=LONG)
    expect(summary).to_contain_text("tiny-shapes 64x64, 20 steps")
    assert "cards/" in page.locator("#cards-files textarea").input_value()
    expect(page.locator("#machines-md")).to_contain_text("(this machine)", timeout=LONG)
    expect(page.locator("#cards-use")).to_be_enabled(timeout=LONG)
    size = page.evaluate(TABLES, "cards-summary")  # a long configuration's name wraps inside the page
    assert not size["spilled"] and size["widest"] <= size["block"] and size["page"] <= WIDTH, size
    _shot(page, "cards-card", "#cards-run-btn", "#cards-use")
    # the winner, whichever was fastest here (on a busy host, "none faster: " and the least slow)
    winner = re.search(r"best keeping the math: (?:none faster: )?(\S+?):", summary.inner_text())
    assert winner, summary.inner_text()
    page.locator("#cards-use").click()
    expect(page.get_by_role("tab", name="Generate", selected=True)).to_be_visible(timeout=LONG)
    for name in winner[1].split("+"):
        expect(page.locator(f"input[type=checkbox][name='{name}']")).to_be_checked()


def test_a_run_of_another_model_loads_with_its_own_steps_and_size(page, server):
    """A run loaded into Generate for a model other than the one showing keeps its steps, size and prompt
    (the model's defaults fill in only when a user picks a model), as a card's winner does."""
    from playwright.sync_api import expect

    from studio.engine.run_data import run_columns
    from studio.request import build_request
    from studio.runlog import RunLog

    request = build_request(
        model="sd15-arch",
        prompt="a lighthouse at dusk",
        steps=2,
        width=64,
        height=64,
        optimizations=["channels_last"],
    )
    log = RunLog(server.home / "runs.db")
    log.finish_run(log.start_run(run_columns(request, 0, 1, None)), "ok")
    page.get_by_role("tab", name="History").click()
    page.locator("#history-btn").click()
    table = page.locator("#history-table")
    expect(table).to_contain_text("sd15-arch", timeout=LONG)
    table.locator("[role=gridcell]:visible").filter(has_text="sd15-arch").first.click()
    expect(page.get_by_role("tab", name="Generate", selected=True)).to_be_visible(timeout=LONG)
    page.wait_for_timeout(1500)  # any event the load set off has run
    assert page.locator("#gen-steps input").input_value() == "2"
    assert page.locator("#gen-width input").input_value() == "64"
    assert page.locator("#gen-prompt textarea").input_value() == "a lighthouse at dusk"
    assert page.locator("#optimizations-speed").get_by_label("channels_last", exact=False).is_checked()
