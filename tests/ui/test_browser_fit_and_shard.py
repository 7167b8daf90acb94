"""A real browser (Debian's chromium via Playwright) at 1280x900: a run that would not fit in this machine's
RAM is refused before it starts with the techniques that would make it fit, and a model sharded in the Shard
tab is used in Generate from that tab and draws. Screenshots go to test-artifacts/."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.ui.browser import ARTIFACTS, LONG, MARKS, open_page, serve, shot, small, tab

pytestmark = MARKS


@pytest.fixture(scope="module")
def page(server):
    yield from open_page(server)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory, "fit-shard")


def test_a_run_that_would_not_fit_in_ram_is_refused_before_it_starts(page, server):
    """sd15-arch at 1024x1024 (about 5.3 GB of decoder activations per image, 4 GB of weights) in a batch past
    the RAM available now by 2 GB or more: refused before it starts, with what would make it fit (VAE slicing
    decodes one image at a time) or, where nothing would, a smaller size or batch."""
    import psutil

    room = 0.95 * psutil.virtual_memory().available / 2**30 - 4.6
    if room < 1:
        pytest.skip("too little RAM free to tell a refusal from a squeeze")
    # past it by 2 GB at least: the other tests' processes free and take RAM while this one runs
    batch = int((room + 2) / 5.25) + 1
    if batch > 8:
        pytest.skip("this machine has the RAM for eight such images: nothing to refuse")
    model = page.locator("#gen-model input")
    model.fill("sd15-arch")
    model.press("Enter")
    expect(page.locator("#gen-width input")).not_to_have_value("64", timeout=30_000)  # the model's own first
    small(page, "gen", steps=2, side=1024)
    page.locator("#gen-batch input").fill(str(batch))
    page.locator("#fit-btn").click()
    note = page.locator("#fit-note")
    expect(note).to_contain_text("Does not fit", timeout=60_000)
    expect(note).to_contain_text(
        re.compile("It would fit with (any one of: )?vae_|use a smaller size or batch")
    )
    page.locator("#generate-btn").click()
    refusal = page.locator(".toast-body.error")
    expect(refusal).to_contain_text("Does not fit", timeout=60_000)
    expect(refusal).to_contain_text(re.compile("It would fit with|use a smaller size or batch"))
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_timeout(1000)  # the toast slides in
    page.screenshot(path=str(ARTIFACTS / "generate-wont-fit.png"))  # the window: the refusal's toast with it
    assert server.log().count("Traceback") == 0
    page.reload(wait_until="load")  # the form back to the bundled model
    page.locator("#generate-btn").wait_for(timeout=60_000)


def test_a_sharded_model_is_used_in_generate_from_its_own_tab(page):
    tab(page, "Shard")
    name = page.locator("#shard-name textarea")
    for _ in range(20):  # typed again until it stays: the tab's load may still write its default name
        name.fill("tiny-loaded-back")
        page.wait_for_timeout(250)
        if name.input_value() == "tiny-loaded-back":
            break
    page.locator("#shard-btn").click()
    expect(page.locator("#shard-table")).to_contain_text("diffusion_pytorch_model", timeout=LONG)
    page.locator("#shard-use-btn").click()
    custom = page.get_by_label("…or a hub id / local directory / .safetensors file")
    expect(custom).to_have_value(re.compile(r".*/sharded/tiny-loaded-back$"), timeout=10_000)
    small(page, "gen", steps=20, side=64)
    page.locator("#generate-btn").click()
    card = page.locator("#metrics-card")
    card.get_by_text("per image").wait_for(timeout=LONG)
    assert page.locator(".toast-body.error").count() == 0
    shot(page, "shard-loaded-back")
