"""What a new user tripped on, in a real browser (Debian's chromium driven by Playwright, 1280x900): the
first-call note after a Profile run, History's first download and its filters, "Speed over library versions"
clicked as it opens, error toasts that outlive their error, and Load from image filling a form out of sight.
Screenshots go to test-artifacts/: history-filtered, load-from-image-in-view.
"""

from __future__ import annotations

import sqlite3

import pytest

from tests.ui.browser import HEIGHT, LONG, MARKS, open_page, serve, shot, small, tab

pytestmark = MARKS


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory, "browser-new-user")


@pytest.fixture(scope="module")
def page(server):
    yield from open_page(server)


def settled(page, selector: str) -> None:
    """Wait until the component's own handler has answered (Gradio's status over it is gone)."""
    page.wait_for_function(
        "(s) => !document.querySelector(s + ' .pending, ' + s + ' .generating')", arg=selector, timeout=LONG
    )


def test_the_first_call_note_after_a_profile_run_says_nothing_wrong(page, server):
    """A Profile run is logged ok without a call latency; unticking every technique afterwards asks the note
    about the plain configuration, whose logged runs are a Generate's first call and that Profile run."""
    from playwright.sync_api import expect

    small(page, "gen")
    page.locator("#generate-btn").click()
    page.locator("#metrics-card").get_by_text("per image").wait_for(timeout=LONG)
    tab(page, "Profile")
    small(page, "prof", steps=3)
    page.locator("#profile-btn").click()
    expect(page.locator("#prof-summary")).to_contain_text("Step 2 of 3", timeout=LONG)
    tab(page, "Generate")
    small(page, "gen")
    box = page.locator("#optimizations-speed").get_by_label("channels_last", exact=False)
    box.check()
    settled(page, "#first-call-note")
    box.uncheck()
    page.wait_for_timeout(500)
    settled(page, "#first-call-note")
    assert "Traceback" not in server.log(), "the note's handler failed"
    assert page.locator("#first-call-note .error").count() == 0, "the note shows an error"
    assert page.locator(".toast-body.error").count() == 0, "an error toast was shown"


def test_history_downloads_the_database_on_the_first_click(page, tmp_path):
    from playwright.sync_api import expect

    tab(page, "History")
    expect(page.locator("#history-table")).to_contain_text("baseline", timeout=LONG)
    with page.expect_download(timeout=30_000) as download:
        page.get_by_role("button", name="Download the database").click()
    saved = tmp_path / "runs.db"
    download.value.save_as(saved)
    with sqlite3.connect(saved) as db:
        assert db.execute("select count(*) from runs").fetchone()[0] >= 1, "the copy holds the logged run"


def test_history_filters_apply_when_picked(page):
    """Picking a status or a technique filters the table at once, without Refresh."""
    from playwright.sync_api import expect

    tab(page, "Generate")
    page.locator("#optimizations-speed").get_by_label("channels_last", exact=False).check()
    page.locator("#generate-btn").click()
    page.locator("#metrics-card").get_by_text("per image").wait_for(timeout=LONG)
    tab(page, "History")
    table = page.locator("#history-table")
    expect(table).to_contain_text("channels_last", timeout=LONG)
    expect(table).to_contain_text("baseline")
    technique = page.get_by_role("combobox", name="Technique", exact=True)
    technique.click()
    page.get_by_role("option", name="channels_last", exact=True).click()
    expect(table).not_to_contain_text("baseline", timeout=30_000)
    expect(table).to_contain_text("channels_last")
    shot(page, "history-filtered")


def test_speed_over_versions_answers_its_first_click_as_it_opens(page):
    """Steps, width and height start empty (the model's own), so the first click asks about the model's
    own size: a sentence on what was found, never "not 0"."""
    from playwright.sync_api import expect

    tab(page, "History")
    page.get_by_text("Speed over library versions").click()
    for field in ("steps", "width", "height"):
        assert page.locator(f"#timeline-{field} textarea").input_value() == "", f"{field} starts filled"
    page.locator("#timeline-btn").click()
    note = page.locator("#timeline-note")
    expect(note).not_to_be_empty(timeout=LONG)
    assert "not 0" not in note.inner_text() and "⚠" not in note.inner_text(), note.inner_text()


def test_a_run_clicked_after_an_error_closes_the_errors_toast(page):
    """A refusal's toast is about that click: the next click on Generate, with the form fixed, closes it
    instead of leaving it over the new run for its ten seconds."""
    from playwright.sync_api import expect

    tab(page, "Generate")
    small(page, "gen")
    page.locator("#gen-steps input").fill("0")
    page.locator("#generate-btn").click()
    toast = page.locator(".toast-body.error")
    expect(toast.first).to_be_visible(timeout=LONG)
    small(page, "gen")
    page.locator("#generate-btn").click()
    expect(toast).to_have_count(0, timeout=3_000)
    page.locator("#metrics-card").get_by_text("per image").wait_for(timeout=LONG)


def test_load_from_image_brings_the_form_it_filled_into_view(page, server):
    tab(page, "Generate")
    image = sorted((server.home / "outputs").glob("run-*.png"))[0]
    page.get_by_text("Load from image").click()
    drop = page.locator("#load-image")
    drop.scroll_into_view_if_needed()
    page.evaluate("window.scrollBy(0, 400)")
    drop.locator("input[type=file]").set_input_files(str(image))
    page.locator("#load-image-note").get_by_text("saved by the studio").wait_for(timeout=30_000)
    prompt = page.locator("#gen-prompt")
    page.wait_for_function(
        "(h) => { const r = document.querySelector('#gen-prompt').getBoundingClientRect();"
        " return r.top >= 0 && r.bottom <= h; }",
        arg=HEIGHT,
        timeout=10_000,
    )
    assert prompt.is_visible()
    page.screenshot(path="test-artifacts/load-from-image-in-view.png")


def test_a_batch_shows_each_of_its_images_in_a_gallery(page):
    from playwright.sync_api import expect

    tab(page, "Generate")
    small(page, "gen")
    page.locator("#gen-batch input").fill("3")
    page.locator("#generate-btn").click()
    page.locator("#metrics-card").get_by_text("per image").wait_for(timeout=LONG)
    gallery = page.locator("#gen-each-image")
    expect(gallery).to_be_visible()
    expect(gallery.locator("img")).to_have_count(3, timeout=30_000)
    expect(gallery).to_contain_text("image 3 of 3")
    gallery.scroll_into_view_if_needed()
    shot(page, "generate-batch-gallery")
    page.locator("#gen-batch input").fill("1")
    page.locator("#generate-btn").click()
    expect(gallery).to_be_hidden(timeout=LONG)
