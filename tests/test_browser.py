"""A real browser (Debian's chromium driven by Playwright) against the app on localhost.

Screenshots go to test-artifacts/ so that a person can check the layout at 1280x800.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.server import ROOT, Server

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts"
pytestmark = [pytest.mark.browser, pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium is not installed")]
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("browser")).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def page(server):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(server.url, wait_until="load")
        page.locator("#generate-btn").wait_for(timeout=60_000)
        yield page
        browser.close()


def test_generate_shows_the_image_and_metrics(page):
    prompt = page.locator("#gen-prompt textarea")
    prompt.fill("a big blue square at the top, on a white background")
    page.locator("#opt-channels_last input").check()
    page.locator("#generate-btn").click()
    page.locator("#gen-image img").wait_for(timeout=180_000)
    card = page.locator("#metrics-card")
    card.get_by_text("steps/s").wait_for(timeout=60_000)
    assert "channels_last" in card.inner_text()
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(ARTIFACTS / "generate.png"), full_page=False)


def test_unavailable_techniques_are_disabled_with_a_reason(page):
    box = page.locator("#opt-cudnn_benchmark input")
    assert box.is_disabled()
    assert "CUDA" in page.locator("#opt-cudnn_benchmark").inner_text()


def test_compare_shows_table_and_slider(page):
    page.get_by_role("tab", name="Compare").click()
    for elem, value in (("#cmp-steps", "6"), ("#cmp-warmup", "0"), ("#cmp-repeats", "2")):
        page.locator(f"{elem} input").fill(value)
    page.locator("#compare-btn").click()
    page.locator("#cmp-gallery img").first.wait_for(timeout=300_000)
    table = page.locator("#cmp-table")
    expect(table).to_contain_text("channels_last", timeout=60_000)
    expect(table).to_contain_text("speedup")
    page.locator("#cmp-slider img").first.wait_for(timeout=60_000)
    expect(table).to_contain_text("bf16")
    page.screenshot(path=str(ARTIFACTS / "compare.png"), full_page=True)


def test_out_of_memory_offers_a_retry_with_memory_techniques(page, tmp_path, monkeypatch):
    import torch
    from diffusers import UNet2DConditionModel

    from studio.service import Studio
    from studio.ui import build_demo

    real, calls = UNet2DConditionModel.forward, []

    def oom_once(self, *args, **kwargs):  # the first request runs out of memory, the retry fits
        calls.append(1)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(UNet2DConditionModel, "forward", oom_once)
    demo = build_demo(Studio(db_path=tmp_path / "runs.db", outputs=tmp_path / "out"))
    _, url, _ = demo.launch(prevent_thread_lock=True, quiet=True)
    try:
        page.goto(url, wait_until="load")
        page.locator("#gen-steps input").fill("4")
        page.locator("#generate-btn").click()
        retry = page.locator("#retry-memory-btn")
        expect(retry).to_be_visible(timeout=120_000)
        expect(retry).to_contain_text("Retry with attention_slicing + vae_slicing")  # nothing measured yet: registry order
        page.screenshot(path=str(ARTIFACTS / "out-of-memory.png"), full_page=False)
        retry.click()
        expect(page.locator("#metrics-card")).to_contain_text("attention_slicing, vae_slicing", timeout=120_000)
        expect(page.locator("#opt-vae_slicing input")).to_be_checked()
        expect(retry).to_be_hidden()
    finally:
        demo.close()
