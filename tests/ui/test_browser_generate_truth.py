"""A real browser (Debian's chromium via Playwright) at 1280x900: each view shows what the last action did and
nothing else. Techniques that cannot combine are said under their boxes as they are ticked; a refused or
cancelled run replaces the last run's image and card; the first call's note follows each run and estimates a
combination from its parts; History shows verdicts only for sweeps and Generate names the run it loaded; a
refused sharded save is a sentence in place; a long job's status area is hidden while empty. Screenshots go
to test-artifacts/."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from studio.errors import ConflictError
from studio.optimizations import check_conflicts
from tests.ui.browser import ARTIFACTS, LONG, MARKS, open_page, serve, shot, small, tab

pytestmark = MARKS


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory, "generate-truth")


@pytest.fixture(scope="module")
def page(server):
    yield from open_page(server)


def box(page, name: str):
    return page.locator("[id^=optimizations-]").get_by_label(f"({name})", exact=False)


def no_error_badge(page, *where: str) -> None:
    for elem in where:
        badges = page.locator(elem).get_by_text("Error", exact=True).locator("visible=true")
        assert badges.count() == 0, f"a red Error badge over {elem}"


def window(page, name: str) -> None:
    """The window from the top (where Generate's form, image and card are), as a user sees it."""
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_timeout(500)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def run(page) -> None:
    """Generate, and wait for this run's card and image."""
    page.locator("#generate-btn").click()
    expect(page.locator("#metrics-card")).to_contain_text("per image", timeout=LONG)
    expect(page.locator("#gen-image img")).to_have_count(1, timeout=30_000)


def test_techniques_that_cannot_combine_are_said_where_they_are_ticked(page):
    with pytest.raises(ConflictError) as refused:
        check_conflicts({"channels_last", "openvino"})
    note = page.locator("#gen-conflicts")
    box(page, "channels_last").check()
    box(page, "openvino").check()
    expect(note).to_contain_text(str(refused.value), timeout=30_000)
    note.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "generate-incompatible.png"))
    box(page, "channels_last").uncheck()
    expect(note).to_have_text(re.compile(r"^\s*$"), timeout=30_000)
    box(page, "openvino").uncheck()


def test_a_refused_run_says_why_in_the_card_instead_of_the_last_runs(page):
    small(page, "gen", steps=2)
    run(page)
    page.locator("#gen-width input").fill("60")
    page.locator("#generate-btn").click()
    card = page.locator("#metrics-card")
    expect(card).to_contain_text("Not run:", timeout=60_000)
    assert "multiple of 8" in card.inner_text() and "per image" not in card.inner_text()
    expect(page.locator(".toast-body.error")).to_contain_text("multiple of 8", timeout=10_000)
    expect(page.locator("#gen-image img")).to_have_count(0)
    no_error_badge(page, "#gen-image", "#metrics-card")
    window(page, "generate-refused")


def test_a_cancelled_run_does_not_sit_beside_the_last_runs_image(page):
    small(page, "gen", steps=2)
    expect(page.locator(".toast-body.error")).to_have_count(0, timeout=15_000)  # the refusal's toast went
    run(page)
    small(page, "gen", steps=200, side=256)
    page.locator("#generate-btn").click()
    page.get_by_text(re.compile(r"\d+/200")).first.wait_for(timeout=60_000)
    page.locator("#cancel-btn").click()
    card = page.locator("#metrics-card")
    expect(card).to_contain_text("Cancelled after", timeout=60_000)
    expect(page.locator("#gen-image img")).to_have_count(0)
    assert "per image" not in card.inner_text()
    window(page, "generate-cancelled")


def test_the_first_call_note_follows_each_run_and_estimates_a_combination_from_its_parts(page):
    small(page, "gen", steps=2)
    box(page, "openvino").check()
    note = page.locator("#first-call-note")
    expect(note).to_contain_text("A machine's card measured the first call of openvino", timeout=30_000)
    run(page)
    expect(note).to_contain_text("The first call of openvino took ", timeout=30_000)  # no box ticked again
    box(page, "vae_slicing").check()
    expect(note).to_contain_text("Not run here yet as vae_slicing+openvino. Estimated from its parts")
    assert re.search(r"openvino took [\d.]+ m?s \(here; no later call logged\)", note.inner_text())
    for name in ("vae_slicing", "openvino"):
        box(page, name).uncheck()


def test_history_shows_verdicts_only_for_sweeps_and_generate_names_the_run_it_loaded(page):
    tab(page, "History")
    table = page.locator("#history-table")
    expect(table).to_contain_text("openvino", timeout=60_000)
    assert "Status" in table.locator("thead").inner_text()
    cells = [c.strip() for c in table.locator("[role=gridcell]:visible").all_inner_texts()]
    assert "ok" in cells and "–" in cells and "faster" not in cells, "single runs: a status, no verdict"
    table.locator("[role=gridcell]:visible").filter(has_text="openvino").first.click()
    loaded = page.locator("#gen-loaded-note")
    expect(loaded).to_contain_text(
        re.compile(r"Loaded run #\d+ \(tiny-shapes, openvino, 20\d\d-"), timeout=30_000
    )
    window(page, "generate-loaded-run")


def test_a_second_sharded_save_under_a_taken_name_is_refused_in_place(page):
    tab(page, "Shard")
    name = page.locator("#shard-name textarea")
    for _ in range(20):  # typed again until it stays: the tab's load may still write its default name
        name.fill("taken-twice")
        page.wait_for_timeout(250)
        if name.input_value() == "taken-twice":
            break
    page.locator("#shard-btn").click()
    expect(page.locator("#shard-table")).to_contain_text("diffusion_pytorch_model", timeout=LONG)
    page.locator("#shard-btn").click()
    note = page.locator("#shard-note")
    expect(note).to_contain_text("Not saved:", timeout=LONG)
    assert "exists and is not empty" in note.inner_text()
    expect(page.locator("#shard-table")).not_to_contain_text("diffusion_pytorch_model")
    assert page.locator(".toast-body.error").count() == 0, "the sentence is in place, not a toast"
    no_error_badge(page, "#shard-table")
    shot(page, "shard-taken")


def test_a_long_jobs_status_area_is_hidden_while_empty(page):
    tab(page, "Profile")
    status = page.locator("#prof-status")
    expect(status).to_be_hidden()
    small(page, "prof", steps=2)
    page.locator("#profile-btn").click()
    expect(page.locator("#prof-summary")).to_contain_text(re.compile(r"Step \d of 2"), timeout=LONG)
    expect(status).to_be_hidden(timeout=30_000)
    tab(page, "Generate")


def test_the_lora_picker_lists_the_loras_and_the_card_names_the_ones_a_run_used(page):
    """Generate's LoRA picker offers what the LoRA folders hold (name, base, rank); a run with `night` at 0.5
    names it in the card, with what putting it on cost."""
    small(page, "gen", steps=4)
    picker = page.locator("#gen-loras")
    picker.locator("input").click()
    options = page.get_by_role("option")
    expect(options.filter(has_text="night (tiny-shapes")).to_have_count(1, timeout=30_000)
    expect(options.filter(has_text="tiny-shapes-lcm (tiny-shapes")).to_have_count(1)
    picker.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "generate-lora-picker.png"))
    picker.locator("input").fill("night:0.5")
    picker.locator("input").press("Enter")
    page.keyboard.press("Escape")
    run(page)
    card = page.locator("#metrics-card")
    expect(card).to_contain_text("LoRAs: <lora:night:0.5>", timeout=30_000)
    window(page, "generate-lora-card")
    picker.locator(".token-remove.remove-all").click()  # the next test runs without it
    expect(picker.locator(".token")).to_have_count(0)
