"""In a real browser at 1280 px (Debian's chromium driven by Playwright): Compare says at once that two ticked
boxes cannot combine and its X-axis headline counts what it compared with the baseline; Auto-tune's plots
show every legend entry within the page; the Cards tab says what its budget covers and what the run is
expected to take before it starts.

Screenshots go to test-artifacts/ (look at them after a change): compare-x-axis, autotune-plots,
cards-before."""

from __future__ import annotations

import pytest

from tests.ui.browser import ARTIFACTS, LONG, MARKS, WIDTH, no_horizontal_scroll, open_page, serve, small

pytestmark = MARKS


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory, "browser-truth")


@pytest.fixture(scope="module")
def page(server):
    yield from open_page(server)


def _shot(page, selector: str, name: str) -> None:
    page.locator(selector).scroll_into_view_if_needed()
    page.locator(selector).screenshot(path=str(ARTIFACTS / f"{name}.png"))


def test_compare_says_what_cannot_combine_and_counts_what_it_compared(page):
    from playwright.sync_api import expect

    page.get_by_role("tab", name="Compare").click()
    boxes = page.locator("#cmp-configs")
    ticked = [t.strip() for t in boxes.locator("label:has(input:checked)").all_inner_texts()]
    assert not any("bf16" in t for t in ticked), f"a CPU's Compare ticks no bf16: {ticked}"
    for name in ("classic_attention", "fused_qkv"):
        boxes.get_by_label(name, exact=True).check()
    expect(page.locator("#cmp-conflicts")).to_contain_text("cannot be combined with", timeout=30_000)
    for label in ("classic_attention", "fused_qkv", *ticked):
        boxes.get_by_label(label, exact=True).uncheck()
    boxes.get_by_label("channels_last", exact=True).check()
    expect(page.locator("#cmp-conflicts")).to_be_hidden()
    small(page, "cmp", steps=3)
    page.locator("#cmp-rounds input").fill("2")
    axis = page.locator("#cmp-axis input")
    axis.fill("steps")
    axis.press("Enter")
    page.locator("#cmp-values textarea, #cmp-values input").first.fill("2,3")
    page.locator("#compare-btn").click()
    headline = page.locator("#cmp-headline")
    expect(headline).to_contain_text("against the baseline at each of 2 steps values", timeout=LONG)
    text = headline.inner_text()
    assert text.startswith("1 configuration (channels_last)"), text
    assert "Fastest per denoising step" in text and "throughput" not in text
    no_horizontal_scroll(page)
    _shot(page, "#cmp-headline", "compare-x-axis")


def test_autotune_plots_fit_the_page_with_their_legends(page):
    from playwright.sync_api import expect

    page.get_by_role("tab", name="Auto-tune").click()
    small(page, "tune", steps=3)
    picked = page.get_by_role("combobox", name="Techniques to search", exact=False)
    picked.fill("channels_last")
    picked.press("Enter")
    page.locator("#tune-rounds input").fill("2")
    page.locator("#tune-confirm input").fill("2")
    page.locator("#tune-btn").click()
    expect(page.locator("#tune-md")).to_contain_text("baseline", timeout=LONG)
    for plot in ("#tune-quality", "#tune-memory"):
        expect(page.locator(plot).get_by_text("channels_last").first).to_be_visible(timeout=30_000)
        box = page.locator(plot).bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= WIDTH, f"{plot} spills out of the page"
        legend = page.locator(plot).get_by_text("channels_last").first.bounding_box()
        assert legend["x"] + legend["width"] <= box["x"] + box["width"], f"{plot}'s legend is cut off"
    no_horizontal_scroll(page)
    page.locator("#tune-quality").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "autotune-plots.png"))


def test_the_cards_tab_says_what_its_budget_covers_before_it_starts(page):
    from playwright.sync_api import expect

    page.get_by_role("tab", name="Cards").click()
    plan = page.locator("#cards-plan")
    expect(plan).to_contain_text("Expected: about", timeout=LONG)
    assert "covers the first calls" in plan.inner_text()
    budget = page.locator("#cards-budget input")
    budget.fill("5")
    budget.press("Tab")
    expect(plan).to_contain_text("budget (s) must be", timeout=30_000)
    budget.fill("60")
    budget.press("Tab")
    expect(plan).to_contain_text("The budget (60 s per model)", timeout=30_000)
    no_horizontal_scroll(page)
    _shot(page, "#cards-plan", "cards-before")
    page.screenshot(path=str(ARTIFACTS / "cards-tab.png"))
