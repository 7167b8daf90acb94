"""A compiled package as a user meets it in the browser: the first studio compiles it (its card says the first
call was cold), a restarted studio on the same home says beforehand what each phase cost and loads the package
(its card says package), and `gradio_client` reads the same phase from /generate's record."""

from __future__ import annotations

import ssl

import pytest

from tests.server import GENERATE_PROMPT, Server
from tests.ui.browser import LONG, MARKS, open_page, shot, small, tab

pytestmark = MARKS


def _generate_with_the_package(page) -> str:
    page.locator("#gen-prompt textarea").fill(GENERATE_PROMPT)
    small(page, "gen")
    page.locator("#optimizations-speed").get_by_label("aot_package", exact=False).check()
    page.locator("#generate-btn").click()
    card = page.locator("#metrics-card")
    card.get_by_text("per image").wait_for(timeout=LONG)
    return card.inner_text()


def _compare_says_the_packages_phase(page) -> None:
    """Compare's details say which phase each configuration's first call paid: the baseline none (eager), the
    package loaded compiled."""
    from playwright.sync_api import expect

    tab(page, "Compare")
    small(page, "cmp")
    for box in page.locator("#cmp-configs input[type=checkbox]").all():
        box.uncheck()
    page.get_by_label("More configurations, one per line").fill("aot_package")
    page.locator("#cmp-rounds input").fill("2")
    page.locator("#compare-btn").click()
    page.locator("#cmp-table").get_by_text("Speedup (range)").wait_for(timeout=LONG)
    page.get_by_text("Details: first call, quality, host").click()
    details = page.locator("#cmp-details")
    expect(details).to_contain_text("package: loaded compiled", timeout=30_000)
    shot(page, "compare-compiled-package")


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("packages-ui")


def test_the_first_studio_compiles_and_says_its_first_call_was_cold(home):
    server = Server(home).start()
    try:
        page_iter = open_page(server)
        page = next(page_iter)
        card = _generate_with_the_package(page)
        assert "first call" in card and "(cold: compiled, converted or calibrated now" in card, card
        page_iter.close()
    finally:
        server.stop()
    assert list((home / "packages").glob("*/package.pt2")), "the package is kept under the studio's home"


def test_a_restarted_studio_says_what_the_first_call_cost_and_loads_the_package(home):
    from gradio_client import Client

    server = Server(home).start()
    try:
        page_iter = open_page(server)
        page = next(page_iter)
        page.locator("#gen-prompt textarea").fill(GENERATE_PROMPT)
        small(page, "gen")
        page.locator("#optimizations-speed").get_by_label("aot_package", exact=False).check()
        note = page.locator("#first-call-note")
        note.get_by_text("By phase").wait_for(timeout=60_000)
        assert "cold (compiled, converted or calibrated now)" in note.inner_text(), note.inner_text()
        page.locator("#generate-btn").click()
        card = page.locator("#metrics-card")
        card.get_by_text("per image").wait_for(timeout=LONG)
        assert "(package: loaded compiled" in card.inner_text(), card.inner_text()
        page.evaluate("window.scrollTo(0, 0)")
        shot(page, "generate-compiled-package")
        _compare_says_the_packages_phase(page)
        page_iter.close()
        client = Client(server.url, ssl_verify=ssl.create_default_context(), verbose=False)
        answer = client.predict(
            prompt=GENERATE_PROMPT,
            optimizations=["aot_package"],
            steps=4,
            width=64,
            height=64,
            api_name="/estimate",
        )
        said = answer["first_call"]
        assert "cold (compiled, converted or calibrated now)" in said and "package (loaded compiled)" in said
    finally:
        server.stop()
