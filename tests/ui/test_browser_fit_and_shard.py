"""A real browser (Debian's chromium via Playwright) at 1280x900: a run that would not fit in this machine's
RAM is refused before it starts with the techniques that would make it fit, and a model sharded in Big models
is used in Generate from the same tab and draws. Screenshots go to test-artifacts/."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.ui.test_browser import ARGS, ARTIFACTS, CHROMIUM, HEIGHT, LONG, WIDTH, _shot, _small, _tab

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def page(server):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        page.goto(server.url, wait_until="load")
        page.locator("#generate-btn").wait_for(timeout=60_000)
        yield page
        browser.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from tests.server import Server

    srv = Server(tmp_path_factory.mktemp("fit-shard")).start()
    yield srv
    srv.stop()


def test_a_run_that_would_not_fit_in_ram_is_refused_before_it_starts(page, server):
    """sd15-arch at 1024x1024, 4 images: about 25 GB estimated, about 11 GB with VAE slicing."""
    import psutil

    if psutil.virtual_memory().available > 24 * 2**30:
        pytest.skip("this machine has the RAM for it: nothing to refuse")
    model = page.locator("#gen-model input")
    model.fill("sd15-arch")
    model.press("Enter")
    expect(page.locator("#gen-width input")).not_to_have_value("64", timeout=30_000)  # the model's own first
    _small(page, "gen", steps=2, side=1024)
    page.locator("#gen-batch input").fill("4")
    page.locator("#fit-btn").click()
    expect(page.locator("#fit-note")).to_contain_text("Does not fit", timeout=60_000)
    expect(page.locator("#fit-note")).to_contain_text("of RAM")
    expect(page.locator("#fit-note")).to_contain_text("It would fit with: vae_slicing")
    page.locator("#generate-btn").click()
    refusal = page.locator(".toast-body.error")
    expect(refusal).to_contain_text("Does not fit", timeout=60_000)
    expect(refusal).to_contain_text("It would fit with: vae_slicing")
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_timeout(1000)  # the toast slides in
    page.screenshot(path=str(ARTIFACTS / "generate-wont-fit.png"))  # the window: the refusal's toast with it
    assert server.log().count("Traceback") == 0
    page.reload(wait_until="load")  # the form back to the bundled model
    page.locator("#generate-btn").wait_for(timeout=60_000)


def test_a_sharded_model_is_used_in_generate_from_its_own_tab(page):
    _tab(page, "Big models")
    page.locator("#shard-name textarea").fill("tiny-loaded-back")
    page.locator("#shard-btn").click()
    expect(page.locator("#shard-table")).to_contain_text("diffusion_pytorch_model", timeout=LONG)
    page.locator("#shard-use-btn").click()
    custom = page.get_by_label("…or a hub id / local directory / .safetensors file")
    expect(custom).to_have_value(re.compile(r".*/sharded/tiny-loaded-back$"), timeout=10_000)
    _small(page, "gen", steps=20, side=64)
    page.locator("#generate-btn").click()
    card = page.locator("#metrics-card")
    card.get_by_text("per image").wait_for(timeout=LONG)
    assert page.locator(".toast-body.error").count() == 0
    _shot(page, "shard-loaded-back")
