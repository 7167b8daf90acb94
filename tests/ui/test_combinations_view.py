"""The Combinations tab and its `/combinations` endpoint on the real app: a client names what it cares about
and gets the combinations, refusals with their reason; in a real browser at 1280 px the table of eight
techniques reads without a horizontal scroll, each cell coloured by its outcome (screenshot:
test-artifacts/combinations.png)."""

from __future__ import annotations

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError
from playwright.sync_api import expect

from tests.ui.browser import LONG, MARKS, no_horizontal_scroll, open_page, serve, shot, small, tab

CHEAP = (
    "classic_attention",
    "sdpa",
    "fused_qkv",
    "deepcache",
    "channels_last",
    "cfg_cutoff",
    "bf16",
    "threads",
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory, "combinations")


@pytest.fixture(scope="module")
def client(server):
    return Client(server.url, verbose=False)


def test_the_combinations_endpoint_answers_a_client_that_names_only_what_it_cares_about(client):
    summary, table, why, data = client.predict(
        techniques=["sdpa", "classic_attention", "channels_last"],
        steps=2,
        width=32,
        height=32,
        rounds=1,
        api_name="/combinations",
    )
    assert data["techniques"] == ["classic_attention", "sdpa", "channels_last"]
    assert (data["width"], data["steps"], data["rounds"]) == (32, 2, 1)
    outcomes = {(c["row"], c["column"]): c["outcome"] for c in data["cells"]}
    assert outcomes.pop(("classic_attention", "sdpa")) == "refused"
    assert set(outcomes.values()) == {"measured"}, data["reasons"]
    assert "3 techniques on tiny-shapes" in summary and "5 measured, 1 refused" in summary
    shown = table["value"]  # as the tab shows it: each column its share of the page's width
    assert shown["headers"][0] == "Technique" and len(shown["data"]) == 3 and len(table["column_widths"]) == 4
    assert shown["data"][0][2] == "refused: conflict"
    assert shown["metadata"]["styling"][0][2] == "background-color: #f1f5f9", "a refused cell is grey"
    assert "classic_attention + sdpa: refused: classic_attention and sdpa cannot be combined" in why


def test_the_combinations_endpoint_refuses_with_a_sentence(client):
    with pytest.raises(AppError, match="Choose at least two techniques"):
        client.predict(techniques=["sdpa"], api_name="/combinations")
    with pytest.raises(AppError, match="max_cells must be"):
        client.predict(techniques=["sdpa", "bf16"], max_cells=-1, api_name="/combinations")


@pytest.fixture(scope="module")
def page(server):
    yield from open_page(server)


def browser(test):
    """The marks of a real-browser test (`tests.ui.browser.MARKS`), on the one test of this module that is."""
    for mark in MARKS:
        test = mark(test)
    return test


@browser
def test_eight_techniques_read_as_a_table_at_1280_px(page):
    tab(page, "Combinations")
    small(page, "combinations", steps=2, side=32)
    page.locator("#combinations-rounds input").fill("1")
    boxes = page.locator("#combinations-techniques")
    for name in CHEAP:
        boxes.get_by_label(name, exact=True).check()
    page.locator("#combinations-btn").click()
    table = page.locator("#combinations-table")
    expect(table).to_contain_text("refused: conflict", timeout=LONG)
    expect(page.locator("#combinations-summary")).to_contain_text("8 techniques on tiny-shapes")
    expect(page.locator("#combinations-reasons")).to_contain_text("classic_attention + sdpa: refused")
    assert page.locator(".toast-body.error").count() == 0
    for name in ("classic_attention", "cfg_cutoff", "threads"):  # every technique's name shows whole
        expect(table.get_by_role("columnheader").filter(has_text=name.split("_")[0])).not_to_have_count(0)
    no_horizontal_scroll(page)
    page.wait_for_timeout(500)
    shot(page, "combinations")
