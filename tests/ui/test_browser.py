"""A real browser (Debian's chromium driven by Playwright) against the app on localhost, at 1280x900.

Every tab is used as a person would (the Ladder tab in test_browser_views.py) and photographed into
test-artifacts/ (look at them after a change).
"""

from __future__ import annotations

import multiprocessing
import re
import time

import pytest

from tests.ui.browser import (
    LONG,
    MARKS,
    cancel_answered_late,
    no_horizontal_scroll,
    open_page,
    serve,
    shot,
    small,
    tab,
)

pytestmark = MARKS


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory, "browser")


@pytest.fixture(scope="module")
def page(server):
    yield from open_page(server)


def _spin() -> None:
    while True:
        pass


def test_what_you_tick_is_what_runs_on_a_loaded_host(page):
    """Tick a technique and click Generate at once, while another process keeps a core busy."""
    busy = multiprocessing.Process(target=_spin, daemon=True)
    busy.start()
    try:
        page.locator("#gen-prompt textarea").fill("a big blue square at the top, on a white background")
        small(page, "gen")
        page.locator("#optimizations-speed").get_by_label("channels_last", exact=False).check()
        page.locator("#generate-btn").click()
        card = page.locator("#metrics-card")
        card.get_by_text("per image").wait_for(timeout=LONG)
    finally:
        busy.kill()
    assert "channels_last" in card.inner_text()
    page.evaluate("window.scrollTo(0, 0)")
    no_horizontal_scroll(page)
    shot(page, "generate")


def test_unavailable_techniques_are_listed_with_the_reason(page):
    from playwright.sync_api import expect

    page.locator("#group-speed").get_by_text("Not available here").click()
    expect(page.locator("#group-speed")).to_contain_text("needs CUDA", timeout=10_000)


def test_the_technique_lists_follow_the_model(page):
    """On a Flux model the transformer techniques are offered and the UNet ones are listed with the reason;
    back on the bundled UNet model, the UNet ones are offered again."""
    from playwright.sync_api import expect

    model, offered = page.locator("#gen-model input"), page.locator("#optimizations-speed")
    model.fill("flux-tiny")
    model.press("Enter")
    expect(offered).to_contain_text("first block cache", timeout=30_000)
    expect(offered).not_to_contain_text("channels last")
    expect(page.locator("#unavailable-speed")).to_contain_text("no convolutions to speed up")
    shot(page, "generate-flux")
    model.fill("tiny-shapes")
    model.press("Enter")
    expect(offered).to_contain_text("channels last", timeout=30_000)
    expect(offered).not_to_contain_text("first block cache")
    tab(page, "Compare")
    model, configs = page.locator("#cmp-model input"), page.locator("#cmp-configs")
    model.fill("flux-tiny")
    model.press("Enter")
    expect(configs).to_contain_text("first_block_cache", timeout=30_000)
    expect(configs).not_to_contain_text("channels_last")
    model.fill("tiny-shapes")
    model.press("Enter")
    expect(configs).to_contain_text("channels_last", timeout=30_000)
    expect(configs).not_to_contain_text("first_block_cache")
    tab(page, "Generate")


def test_load_from_image_fills_the_form_and_says_what_it_found(page, server, tmp_path):
    """The PNG the first test's Generate wrote (seed 1, channels_last, a blue square), dropped back."""
    from playwright.sync_api import expect

    image = sorted((server.home / "outputs").glob("run-*.png"))[0]
    page.locator("#gen-prompt textarea").fill("something else")
    page.locator("#gen-seed input").fill("99")
    page.get_by_text("Load from image").click()
    page.locator("#load-image input[type=file]").set_input_files(str(image))
    note = page.locator("#load-image-note")
    expect(note).to_contain_text("saved by the studio", timeout=30_000)
    expect(page.locator("#gen-prompt textarea")).to_have_value(
        "a big blue square at the top, on a white background"
    )
    expect(page.locator("#gen-seed input")).to_have_value("1")
    assert page.locator("#optimizations-speed").get_by_label("channels_last", exact=False).is_checked()
    page.locator("#load-image").scroll_into_view_if_needed()
    shot(page, "load-from-image")
    plain = tmp_path / "plain.png"
    from PIL import Image

    Image.new("RGB", (8, 8)).save(plain)
    page.locator("#load-image button[aria-label='Clear']").first.click()
    page.locator("#load-image input[type=file]").set_input_files(str(plain))
    expect(note).to_contain_text("carries no generation settings", timeout=30_000)
    expect(page.locator("#gen-seed input")).to_have_value("1")


def test_will_it_fit_says_the_estimate_before_a_run(page):
    from playwright.sync_api import expect

    page.locator("#fit-btn").click()
    expect(page.locator("#fit-note")).to_contain_text("Estimated peak", timeout=60_000)
    assert "for this process" in page.locator("#fit-note").inner_text()


def test_ticking_a_technique_says_what_its_first_call_costs_before_generate(page, server):
    """openvino on the bundled model, not run in this studio yet: the note under Generate gives a machine's
    card's first call and its machine; unticked, the note goes."""
    from playwright.sync_api import expect

    page.goto(server.url, wait_until="load")  # a fresh form: nothing ticked by the tests before
    page.locator("#generate-btn").wait_for(timeout=60_000)

    box = page.get_by_label(re.compile(r"\(openvino\)")).first
    note = page.locator("#first-call-note")
    expect(page.locator("#gen-steps input")).to_have_value("20", timeout=60_000)  # the page's load is done
    said = "A machine's card measured the first call of openvino at"
    for _ in range(4):  # wait for the note as a user does: tick again if something unticked the box meanwhile
        if not box.is_checked():
            box.check()
        try:
            expect(note).to_contain_text(said, timeout=20_000)
            break
        except AssertionError:
            continue
    expect(note).to_contain_text(said, timeout=1_000)
    assert re.search(r"at [\d.]+ s \(64x64, 20 steps\) on \w", note.inner_text())
    box.uncheck()
    expect(note).not_to_contain_text("openvino", timeout=30_000)


def test_profile_shows_where_the_time_of_a_step_goes(page):
    from playwright.sync_api import expect

    tab(page, "Profile")
    assert not page.locator("#prof-results").is_visible(), "nothing is shown before there are results"
    small(page, "prof", steps=3)
    page.locator("#profile-btn").click()
    summary = page.locator("#prof-summary")
    expect(summary).to_contain_text("Step 2 of 3", timeout=LONG)
    # which kind dominates depends on the CPU (a 64x64 step is often bound by dispatch overhead)
    assert re.search(r"Most of it goes to [^:]+: [\d.]+ (ms|µs|s), \d", summary.inner_text())
    table = page.locator("#prof-ops").inner_text()
    assert "aten::" in table and "%" in table
    assert "convolution" in table, "the UNet's convolutions are among the top operators"
    no_horizontal_scroll(page)
    shot(page, "profile")
    tab(page, "Generate")


def test_compare_shows_captioned_images_and_a_readable_table(page):
    tab(page, "Compare")
    assert not page.locator("#cmp-results").is_visible(), "nothing is shown before there are results"
    small(page, "cmp", steps=3)
    page.locator("#cmp-rounds input").fill("3")
    page.locator("#compare-btn").click()
    table = page.locator("#cmp-table")
    table.get_by_text("Speedup (range)").wait_for(timeout=LONG)
    text = table.inner_text()
    assert "×1.00 (baseline)" in text and (" s" in text or " ms" in text)
    captions = page.locator("#cmp-gallery").inner_text()
    assert "baseline" in captions and "×" in captions
    no_horizontal_scroll(page)
    shot(page, "compare")


def test_a_batch_sweep_shows_the_grid_heat_maps_and_throughput(page):
    """The same tab with the X axis set to batch: the grid, coloured heat maps and the best batch."""
    from playwright.sync_api import expect

    page.locator("#cmp-axis input").fill("batch")
    page.locator("#cmp-axis input").press("Enter")
    page.locator("#cmp-values textarea, #cmp-values input").first.fill("1,2")
    page.locator("#cmp-rounds input").fill("2")
    page.locator("#compare-btn").click()
    expect(page.locator("#cmp-headline")).to_contain_text("Best throughput", timeout=LONG)
    expect(page.locator("#xy-speedup")).to_contain_text("batch=2", timeout=10_000)
    assert "×1.00 (baseline)" in page.locator("#xy-speedup").inner_text()
    no_horizontal_scroll(page)
    page.locator("#xy-results").scroll_into_view_if_needed()
    shot(page, "compare-xy")
    page.locator("#xy-grid img").wait_for(timeout=10_000)
    page.locator("#cmp-axis input").fill("none")
    page.locator("#cmp-axis input").press("Enter")


def test_autotune_offers_only_what_its_confirmation_measured_and_applies_it(page):
    tab(page, "Auto-tune")
    small(page, "tune", steps=8)
    picked = page.get_by_role("combobox", name="Techniques to search", exact=False)
    for name in ("cfg_cutoff", "channels_last"):  # a user narrows the search (every candidate: test_autotune)
        picked.fill(name)
        picked.press("Enter")
    for floor in ("Min PSNR vs baseline (dB)", "Min SSIM"):  # a user who accepts a changed image
        page.get_by_label(floor, exact=True).fill("0")
    page.locator("#tune-rounds input").fill("3")
    page.locator("#tune-confirm input").fill("3")
    page.locator("#tune-btn").click()
    page.locator("#tune-md").get_by_text("baseline").first.wait_for(timeout=LONG)
    summary = page.locator("#tune-md").inner_text()
    searched = page.locator("#tune-table").inner_text()
    assert "cfg_cutoff" in searched and "channels_last" in searched, searched
    assert "openvino" not in searched and "deepcache" not in searched, "only what was picked is searched"
    no_horizontal_scroll(page)
    shot(page, "autotune")
    apply = page.locator("#tune-apply")
    if summary.startswith("Nothing here beats"):  # noise can leave cfg_cutoff unconfirmed
        assert apply.is_disabled()
        return
    assert apply.is_enabled() and "Fastest configuration" in summary
    winner = summary.split("Fastest configuration", 1)[1].split("\n", 1)[0]
    apply.click()
    page.locator("#generate-btn").wait_for(state="visible", timeout=30_000)
    page.wait_for_timeout(1500)
    for name in ("cfg_cutoff", "channels_last"):
        box = page.locator("[id^=optimizations-]").get_by_label(name, exact=False)
        assert box.is_checked() == (name in winner), f"{name}: Generate shows the winner ({winner})"


def test_history_loads_when_opened_and_a_row_click_loads_generate(page):
    tab(page, "History")
    from playwright.sync_api import expect

    table = page.locator("#history-table")
    expect(table).to_contain_text("baseline", timeout=60_000)  # filled when the tab opens
    technique = page.get_by_role("combobox", name="Technique", exact=True)  # as a user narrows a long log
    technique.fill("channels_last")
    technique.press("Enter")
    page.locator("#history-btn").click()
    expect(table).not_to_contain_text("baseline", timeout=60_000)
    expect(table).to_contain_text("channels_last", timeout=60_000)
    no_horizontal_scroll(page)
    shot(page, "history")
    table.locator("[role=gridcell]:visible").filter(has_text="channels_last").first.click()
    page.locator("#generate-btn").wait_for(state="visible", timeout=30_000)
    page.wait_for_timeout(1500)
    assert page.locator("#optimizations-speed").get_by_label("channels_last", exact=False).is_checked()


def test_system_is_short_tables(page):
    tab(page, "System")
    page.locator("#system-md").get_by_text("CPU").first.wait_for(timeout=60_000)
    assert "available" in page.locator("#system-table").inner_text()
    no_horizontal_scroll(page)
    shot(page, "system")


def test_cancel_is_neutral_and_resets_the_card(page):
    from playwright.sync_api import expect

    tab(page, "Generate")
    page.locator("#cancel-btn").click()  # nothing runs: the server's answer replaces the page's "Stopping…"
    expect(page.locator("#metrics-card")).to_contain_text("Nothing is running.", timeout=30_000)
    # long enough (tens of seconds on any of these CPUs) that the run cannot end before the click lands
    small(page, "gen", steps=200, side=256)
    page.locator("#generate-btn").click()
    # this run's own progress (n/200 steps) is showing: it has started, and Cancel stops it
    page.get_by_text(re.compile(r"\d+/200")).first.wait_for(timeout=60_000)
    cancel_answered_late(page, "#cancel-btn")
    card = page.locator("#metrics-card")
    card.get_by_text("Cancelled after").wait_for(timeout=60_000)  # not covered by the Cancel's late answer
    assert "Stopping" not in card.inner_text()
    assert page.locator(".toast-body.error").count() == 0, "a cancel is not an error"
    shot(page, "cancelled")


def test_a_cancel_while_the_run_waits_in_the_queue_is_not_lost(page, server):
    """Another client's long run holds the one generation slot; Generate is clicked (the run waits in the
    queue) and Cancel at once: when its turn comes, the run stops before its first step."""
    from gradio_client import Client

    from tests.ui.test_app_api import generate_args

    tab(page, "Generate")
    small(page, "gen", steps=4, side=64)
    client = Client(server.url, verbose=False)
    job = client.submit(**generate_args(steps=100, width=256, height=256), api_name="/generate")
    try:
        started = {"PROCESSING", "PROGRESS"}  # the run holds the slot (PROGRESS: it reports its steps)
        deadline = time.monotonic() + 60
        while job.status().code.name not in started and time.monotonic() < deadline:
            time.sleep(0.2)
        assert job.status().code.name in started, "the other client's run did not start"
        page.locator("#generate-btn").click()
        page.locator("#cancel-btn").click()
        card = page.locator("#metrics-card")
        card.get_by_text("Stopping after the current step").wait_for(timeout=10_000)
        assert not job.done(), "the other run ended before the cancel: the test proves nothing"
        card.get_by_text("Cancelled after 0 of 4 steps").wait_for(timeout=LONG)
        assert page.locator(".toast-body.error").count() == 0, "a cancel is not an error"
        shot(page, "cancelled-in-queue")
    finally:
        job.result(timeout=LONG)  # the other client's run is not cancelled: it ends on its own


def test_out_of_memory_offers_a_retry_with_memory_techniques(page, studio, monkeypatch):
    """Last in this module: it points the page at an app of its own."""
    import torch
    from diffusers import UNet2DConditionModel
    from playwright.sync_api import expect

    from studio.ui import build_demo

    real, calls = UNet2DConditionModel.forward, []

    def oom_once(self, *args, **kwargs):  # the first request runs out of memory, the retry fits
        calls.append(1)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(UNet2DConditionModel, "forward", oom_once)
    demo = build_demo(studio)
    _, url, _ = demo.launch(prevent_thread_lock=True, quiet=True)
    try:
        page.goto(url, wait_until="load")
        small(page, "gen")
        page.locator("#generate-btn").click()
        retry = page.locator("#retry-memory-btn")
        expect(retry).to_be_visible(timeout=120_000)
        expect(retry).to_contain_text(
            "Retry with attention_slicing + vae_slicing"
        )  # nothing measured yet: registry order
        retry.click()
        expect(page.locator("#metrics-card")).to_contain_text(
            "attention_slicing, vae_slicing", timeout=120_000
        )
        expect(page.locator("#optimizations-memory").get_by_label("vae_slicing", exact=False)).to_be_checked()
        expect(retry).to_be_hidden()
    finally:
        demo.close()
