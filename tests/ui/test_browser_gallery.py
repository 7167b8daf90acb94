"""History's gallery in a real browser (Debian's chromium driven by Playwright, 1280x900): one's runs as
thumbnails captioned with their prompts, the table's Prompt column, an image picked shown large with its run's
settings, "Reuse this seed" (the seed alone into Generate) and "Send to Generate" (the whole run); on a public
studio, a visitor's gallery holds their own images alone; and, without a browser, the gallery's bound and its
batches. Screenshot: history-gallery."""

from __future__ import annotations

import pytest
from PIL import Image

from studio.ui import gallery_views
from tests.server import Server
from tests.ui.browser import (
    HEIGHT,
    LONG,
    MARKS,
    WIDTH,
    no_horizontal_scroll,
    open_page,
    serve,
    shot,
    small,
    tab,
)


def in_a_browser(test):
    """A test that drives the app in the browser (`MARKS`)."""
    for mark in MARKS:
        test = mark(test)
    return test


RUNS = {  # prompt -> seed: two runs told apart by both
    "a big red circle on the left": 1234,
    "a small blue square at the top": 5678,
}
DRAFT = "a green triangle, typed and not run yet"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory, "browser-gallery")


@pytest.fixture(scope="module")
def page(server):
    yield from open_page(server)


def generate(page, prompt: str, seed: int) -> None:
    """Generate `prompt` at `seed`, small, and wait for this run's card (it names the seed)."""
    from playwright.sync_api import expect

    small(page, "gen")
    page.locator("#gen-prompt textarea").fill(prompt)
    page.locator("#gen-seed input").fill(str(seed))
    page.locator("#generate-btn").click()
    card = page.locator("#metrics-card")
    expect(card).to_contain_text(f"seed {seed}", timeout=LONG)
    card.get_by_text("per image").wait_for(timeout=LONG)


def thumbnails(page, wanted: int) -> list[str]:
    """The gallery's captions, once it shows `wanted` thumbnails."""
    from playwright.sync_api import expect

    items = page.locator("#history-gallery .thumbnail-lg")
    expect(items).to_have_count(wanted, timeout=60_000)
    return [c.strip() for c in page.locator("#history-gallery .caption-label").all_inner_texts()]


def pick(page, prompt: str) -> dict[str, str]:
    """Pick the thumbnail captioned with `prompt`: once it shows large, its run's settings by name."""
    from playwright.sync_api import expect

    page.locator("#history-gallery .thumbnail-lg").filter(has_text=prompt).first.click()
    picked = page.locator("#history-picked")
    expect(picked).to_contain_text(f"Prompt: {prompt}", timeout=30_000)
    expect(page.locator("#history-large img")).to_have_count(1, timeout=30_000)
    said = picked.inner_text().replace("\n", " · ").split(" · ")
    return dict(part.split(": ", 1) for part in said if ": " in part)


@in_a_browser
def test_the_gallery_shows_ones_runs_and_sends_a_picked_one_to_generate(page, server):
    from playwright.sync_api import expect

    for prompt, seed in RUNS.items():
        generate(page, prompt, seed)
    page.locator("#gen-prompt textarea").fill(DRAFT)
    tab(page, "History")
    captions = thumbnails(page, 2)
    assert [c.split(" · ")[0] for c in captions] == list(RUNS)[::-1], f"newest first: {captions}"
    assert all(" · baseline · " in c for c in captions), captions
    table = page.locator("#history-table")
    expect(table).to_contain_text(list(RUNS)[0], timeout=30_000)
    headers = [h.strip() for h in table.locator("thead th").all_inner_texts()]
    assert "Prompt" in headers, headers
    for prompt in RUNS:
        assert prompt in table.inner_text(), f"the table's Prompt column shows {prompt!r}"
    no_horizontal_scroll(page)

    older, seed = next(iter(RUNS.items()))
    said = pick(page, older)
    assert said["Seed"] == str(seed) and said["Prompt"] == older, said
    assert said["Steps"] == "4" and said["Size"] == "64 × 64" and said["Model"] == "tiny-shapes", said
    assert said["Configuration"] == "baseline" and said["Scheduler"] == "default", said
    assert said["Latency"].endswith("on cpu"), said
    page.wait_for_timeout(500)
    shot(page, "history-gallery")

    page.locator("#history-reuse-seed").click()
    expect(page.locator("#gen-seed input")).to_have_value(str(seed), timeout=30_000)
    assert page.locator("#gen-prompt textarea").input_value() == DRAFT, "the prompt stays as typed"
    assert page.locator("#gen-steps input").input_value() == "4"
    expect(page.locator("#gen-loaded-note")).to_contain_text(f"Seed {seed} of run #", timeout=10_000)

    tab(page, "History")  # the view is made anew: nothing picked
    expect(page.locator("#history-picked")).to_contain_text("Pick an image", timeout=30_000)
    expect(page.locator("#history-large img")).to_have_count(0)
    expect(page.locator("#history-send")).to_be_disabled()
    thumbnails(page, 2)
    pick(page, older)
    page.locator("#history-send").click()
    expect(page.locator("#gen-prompt textarea")).to_have_value(older, timeout=30_000)
    assert page.locator("#gen-seed input").input_value() == str(seed)
    expect(page.locator("#gen-loaded-note")).to_contain_text("Loaded run #", timeout=10_000)
    assert "Traceback" not in server.log()


@pytest.fixture(scope="module")
def space(tmp_path_factory):
    """The studio as a public Space: each visitor reads their own runs."""
    srv = Server(tmp_path_factory.mktemp("space-gallery"), SPACE_ID="someone/studio").start()
    yield srv
    srv.stop()


@in_a_browser
def test_a_visitors_gallery_holds_their_own_images_alone(space, page):
    """Two visitors of a public studio, in two browser contexts with their own cookies (beside the module's
    page), each with a run of their own: each gallery shows that one image alone."""
    from playwright.sync_api import expect

    mine = {"a": "a big red circle on the left", "b": "a small blue square at the top"}
    for name, prompt in mine.items():
        context = page.context.browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
        visitor = context.new_page()
        visitor.goto(space.url, wait_until="load")
        visitor.locator("#generate-btn").wait_for(timeout=60_000)
        generate(visitor, prompt, 7)
        tab(visitor, "History")
        expect(visitor.locator("#visitor-note")).to_contain_text("your runs alone", timeout=60_000)
        visitor.locator("#history-btn").click()
        captions = thumbnails(visitor, 1)
        assert captions[0].startswith(prompt), f"visitor {name} sees {captions}"
        context.close()


def test_the_gallery_holds_the_newest_images_at_most_each_of_a_batch_and_none_gone(tmp_path):
    """Run-log rows, newest first: a batch of 3, a run whose image file is gone, a large image, then more runs
    than the gallery holds. The gallery shows each image of the batch, leaves the gone one out, stops at its
    bound; a small image is enlarged pixel for pixel, a large one shrunk."""
    rows = []
    for run_id in range(60, 0, -1):
        paths = [tmp_path / f"run-{run_id:06d}-{i}.png" for i in range(3 if run_id == 60 else 1)]
        for path in paths if run_id != 59 else ():
            Image.new("RGB", (1024, 512) if run_id == 58 else (8, 8), "red").save(path)
        rows.append({"id": run_id, "prompt": f"run {run_id}", "image_paths": [str(p) for p in paths]})
    records = [{"config": "baseline", "latency_s": 0.5, "seconds_per_image": 0.5, "batch": 1} for _ in rows]
    shown = gallery_views.gallery_of(rows, records)
    assert len(shown["gallery"]) == len(shown["images"]) == gallery_views.GALLERY_SIZE == 48
    assert shown["images"][:4] == [[60, 0], [60, 1], [60, 2], [58, 0]], "the batch whole, run 59 left out"
    assert shown["images"][-1] == [14, 0], "the newest images, in the rows' order"
    captions = [caption for _, caption in shown["gallery"]]
    assert (
        captions[1] == "run 60 · baseline · 0.50 s · 2 of 3" and captions[3] == "run 58 · baseline · 0.50 s"
    )
    side = gallery_views.THUMBNAIL_SIDE
    small, large = shown["gallery"][0][0], shown["gallery"][3][0]
    assert small.size == (side, side) and small.getpixel((0, 0)) == (255, 0, 0), "8x8, enlarged"
    assert large.size == (side, side // 2), "1024x512, shrunk"
