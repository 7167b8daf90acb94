"""A first torch_compile in a real browser (Debian's chromium driven by Playwright, 1280x900): before it runs,
the note under Generate gives an estimate from the machines' cards; while it compiles, the progress line says
what the compile is doing and how long it has taken, and moves. Screenshots go to test-artifacts/:
first-compile-estimate, first-compile-progress-1, first-compile-progress-2.
"""

from __future__ import annotations

import re

import pytest

from tests.ui.browser import LONG, MARKS, open_page, serve, shot, small

pytestmark = MARKS
LINE = re.compile(r"first call: .+ · (\d+) s of about (\d+) s")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory, "browser-first-compile")


@pytest.fixture(scope="module")
def page(server):
    yield from open_page(server)


def test_a_first_compile_says_its_estimate_before_and_moves_while_it_compiles(page):
    from playwright.sync_api import expect

    small(page, "gen")
    page.locator("#optimizations-speed").get_by_label("(torch_compile)", exact=False).check()
    note = page.locator("#first-call-note")
    expect(note).to_contain_text("its first call compiles the denoiser (torch.compile)", timeout=30_000)
    expect(note).to_contain_text("expect about")
    shot(page, "first-compile-estimate")
    page.locator("#generate-btn").click()
    line = page.get_by_text(LINE).first
    line.wait_for(timeout=LONG)
    first = LINE.search(line.inner_text())
    line.scroll_into_view_if_needed()
    page.screenshot(path="test-artifacts/first-compile-progress-1.png")
    page.wait_for_function(
        "([pattern, was]) => { const m = document.body.innerText.match(new RegExp(pattern));"
        " return m && Number(m[1]) > was && /\\((dynamo|inductor)\\)/.test(m[0]); }",
        arg=[LINE.pattern, int(first[1])],
        timeout=30_000,
    )
    page.screenshot(path="test-artifacts/first-compile-progress-2.png")  # a compile phase, seconds later
    page.locator("#metrics-card").get_by_text("per image").wait_for(timeout=LONG)
    assert "torch_compile" in page.locator("#metrics-card").inner_text()
