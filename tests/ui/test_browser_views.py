"""What the pages show, in a real browser (Debian's chromium driven by Playwright) at 1280x900: every table
fits the page, an X/Y Compare's gallery shows every caption and its headline names the X values, a
random-weight model's noise is explained where the image appears, and a bad History date is one sentence.

Screenshots go to test-artifacts/ (look at them after a change): ladder-1280, history-1280, compare-x-axis,
generate-arch-note, history-bad-date.
"""

from __future__ import annotations

import pytest

from tests.ui.browser import ARTIFACTS, HEIGHT, LONG, MARKS, WIDTH, open_page, serve, small, tab

pytestmark = MARKS
FITS = """id => {
  const block = document.getElementById(id);
  const scroller = block.querySelector('.virtual-table-viewport');
  const tables = [...block.querySelectorAll('table')].map(t => t.scrollWidth);
  const split = [];  // header words laid out on more than one line
  for (const header of block.querySelectorAll('th span.header')) {
    const walk = document.createTreeWalker(header, NodeFilter.SHOW_TEXT);
    for (let node = walk.nextNode(); node; node = walk.nextNode()) {
      for (const word of node.data.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, word.index);
        range.setEnd(node, word.index + word[0].length);
        const lines = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
        if (lines.size > 1) split.push(word[0]);
      }
    }
  }
  return {block: block.clientWidth, scroll: scroller.scrollWidth, view: scroller.clientWidth,
          table: Math.max(...tables), page: document.documentElement.scrollWidth, split};
}"""
LAST_CAPTION = """() => {
  const gallery = document.getElementById('cmp-gallery');
  const wrap = gallery.querySelector('.grid-wrap');
  const captions = [...gallery.querySelectorAll('.caption-label')];
  const last = captions[captions.length - 1];
  last.scrollIntoView({block: 'center'});
  const box = last.getBoundingClientRect(), frame = wrap.getBoundingClientRect();
  const hit = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
  return {count: captions.length, text: last.innerText, inside: box.bottom <= frame.bottom + 1,
          scrolls: wrap.scrollHeight > wrap.clientHeight + 1, seen: last.contains(hit) || hit === last};
}"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serve(tmp_path_factory, "browser-views")


@pytest.fixture(scope="module")
def page(server):
    yield from open_page(server)


def _fits(page, elem_id: str) -> None:
    """The table's rendered width is within its block's and the page's, with nothing to scroll sideways, and
    no header word broken over two lines."""
    size = page.evaluate(FITS, elem_id)
    assert not size["split"], f"#{elem_id}: header words broken over two lines: {size['split']}"
    assert size["scroll"] <= size["view"], f"#{elem_id} scrolls sideways: {size}"
    assert size["table"] <= size["block"] <= WIDTH and size["page"] <= WIDTH, f"#{elem_id}: {size}"


def _shot(page, name: str, first: str | None = None, last: str | None = None) -> None:
    """The page from `first`'s top (else the page's) to `last`'s bottom (else the window's), whole width."""
    page.mouse.move(0, 0)  # no hover frame in the picture

    def edge(selector: str, bottom: bool) -> float:
        box = page.locator(selector).bounding_box()
        return page.evaluate("window.scrollY") + box["y"] + (box["height"] if bottom else 0)

    top = max(0.0, edge(first, False) - 16) if first else 0.0
    end = edge(last, True) + 16 if last else top + HEIGHT
    clip = {"x": 0, "y": top, "width": WIDTH, "height": end - top}
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True, clip=clip)


def _model(page, prefix: str, name: str) -> None:
    model = page.locator(f"#{prefix}-model input")
    model.fill(name)
    model.press("Enter")
    page.wait_for_timeout(1000)  # the model's own defaults fill the form; the test's sizes go over them


def test_a_random_weight_model_says_its_images_are_noise_by_design(page):
    from playwright.sync_api import expect

    _model(page, "gen", "flux-tiny")
    small(page, "gen", steps=2, side=64)
    page.locator("#generate-btn").click()
    card = page.locator("#metrics-card")
    expect(card).to_contain_text("Noise by design", timeout=LONG)
    expect(card).to_contain_text("flux-tiny has random weights")
    assert "this run" in card.inner_text() and "the process's peak" in card.inner_text()
    note = card.get_by_text("Noise by design")
    assert note.is_visible() and note.bounding_box()["y"] < HEIGHT, "the note is in the first screen"
    page.evaluate("window.scrollTo(0, 0)")
    _shot(page, "generate-arch-note")
    _model(page, "gen", "tiny-shapes")
    small(page, "gen", steps=2, side=64)
    page.locator("#generate-btn").click()
    expect(card).not_to_contain_text("Noise by design", timeout=LONG)
    expect(card).to_contain_text("per image", timeout=LONG)


def test_the_ladder_table_fits_1280_px_in_words_and_rounded_numbers(page):
    tab(page, "Ladder")
    small(page, "lad", steps=2)
    page.locator("#lad-warmup input").fill("0")
    page.locator("#lad-rounds input").fill("1")
    page.locator("#ladder-btn").click()
    page.locator("#ladder-md").get_by_text("interleaved rounds").wait_for(timeout=LONG)
    page.locator("#ladder-table").get_by_text("OpenVINO runtime").first.wait_for(timeout=10_000)
    page.wait_for_timeout(500)  # the columns are sized once the rows are in
    _fits(page, "ladder-table")
    text = page.locator("#ladder-table").inner_text()
    assert "original" in text and "skipped" in text and "×1.00 (baseline)" in text
    assert "not the ratio of the two latencies" in page.locator("#ladder-md").inner_text()
    _shot(page, "ladder-1280", "#ladder-md", "#ladder-table")


def _axis(page, which: str, name: str, values: str | None = None) -> None:
    """Compare's X axis (`which` ""), or its Y axis ("y-"), set as a user picks it, with its values."""
    box = page.locator(f"#cmp-{which}axis input")
    box.fill(name)
    box.press("Enter")
    if values is not None:
        page.locator(f"#cmp-{which}values textarea, #cmp-{which}values input").first.fill(values)


def test_an_x_axis_compare_shows_every_caption_and_names_the_x_values(page):
    from playwright.sync_api import expect

    tab(page, "Compare")
    small(page, "cmp", steps=2)
    page.get_by_label("More configurations, one per line").fill("deepcache[interval=2]")
    _axis(page, "", "steps", "2,4")
    page.locator("#cmp-warmup input").fill("0")
    page.locator("#cmp-rounds input").fill("1")
    page.locator("#compare-btn").click()
    headline = page.locator("#cmp-headline")
    expect(headline).to_contain_text("Fastest per denoising step", timeout=LONG)
    expect(page.locator("#cmp-table")).to_contain_text("median of 1 round")
    text = headline.inner_text()
    assert "against the baseline at each of 2 steps values (2, 4)" in text, text
    assert "deepcache[interval=2], deepcache[interval=2]" not in text, "a name without its X value"
    if "Faster beyond noise" in text:
        assert " at steps=" in text.split("Faster beyond noise", 1)[1].split("\n", 1)[0], text
    caption = page.evaluate(LAST_CAPTION)
    assert caption["count"] == 8 and caption["text"].startswith("steps=4 · deepcache[interval=2]"), caption
    assert caption["inside"] and caption["seen"] and not caption["scrolls"], (
        f"the last caption is hidden: {caption}"
    )
    for table in ("cmp-table", "xy-speedup", "xy-psnr"):
        _fits(page, table)
    expect(page.locator("#cmp-latency")).to_be_visible()  # 8 bars, named under each
    page.locator("#xy-results").scroll_into_view_if_needed()  # the grid image loads when it comes into view
    page.locator("#xy-grid img").wait_for(timeout=10_000)
    _shot(page, "compare-x-axis", "#cmp-headline", "#cmp-table")
    _axis(page, "", "none")


def test_seeds_by_prompts_draw_a_labelled_grid_for_each_configuration(page):
    """X: 4 seeds from the form's (+4); Y: the prompt's "circle" replaced by "square". The grid has a row per
    configuration and prompt, a column per seed; the heat maps the same rows."""
    from playwright.sync_api import expect

    tab(page, "Compare")
    small(page, "cmp", steps=2)
    page.locator("#cmp-prompt textarea").fill("a big red circle in the middle, on a white background")
    page.get_by_label("More configurations, one per line").fill("")
    _axis(page, "", "seed", "+4")
    _axis(page, "y-", "prompt", "circle,square")
    page.locator("#cmp-warmup input").fill("0")
    page.locator("#cmp-rounds input").fill("1")
    page.locator("#compare-btn").click()
    headline = page.locator("#cmp-headline")
    expect(headline).to_contain_text("× 2 prompt values (circle, square)", timeout=LONG)
    heat = page.locator("#xy-speedup")
    expect(heat).to_contain_text("prompt=square")
    expect(page.locator("#cmp-latency")).to_be_hidden()  # 24 bars: their names would not fit under them
    assert "seed=" in heat.inner_text()
    page.locator("#xy-results").scroll_into_view_if_needed()
    page.locator("#xy-grid img").wait_for(timeout=10_000)
    _shot(page, "compare-seed-by-prompt", "#cmp-headline", "#xy-results")
    for which in ("", "y-"):
        _axis(page, which, "none")


def test_the_autotune_table_fits_1280_px(page):
    from playwright.sync_api import expect

    tab(page, "Auto-tune")
    small(page, "tune", steps=4)
    picked = page.get_by_role("combobox", name="Techniques to search", exact=False)
    for name in ("deepcache", "token_merging"):  # techniques with settings: long configuration names
        picked.fill(name)
        picked.press("Enter")
    page.locator("#tune-rounds input").fill("1")
    page.locator("#tune-confirm input").fill("1")
    page.locator("#tune-btn").click()
    page.locator("#tune-md").get_by_text("baseline").first.wait_for(timeout=LONG)
    expect(page.locator("#tune-table")).to_contain_text("token_merging", timeout=10_000)
    page.wait_for_timeout(500)
    _fits(page, "tune-table")


def test_the_history_table_fits_1280_px(page):
    from playwright.sync_api import expect

    tab(page, "History")
    table = page.locator("#history-table")
    expect(table).to_contain_text("deepcache[interval=2]", timeout=60_000)  # filled when the tab opens
    expect(table).to_contain_text("jit_trace_unet")  # the ladder's long configurations
    page.wait_for_timeout(500)
    _fits(page, "history-table")
    _shot(page, "history-1280", None, "#history-table")


def test_a_bad_history_date_is_one_sentence_and_the_table_stays(page):
    from playwright.sync_api import expect

    tab(page, "History")
    table = page.locator("#history-table")
    expect(table).to_contain_text("baseline", timeout=60_000)
    before = table.inner_text()
    since = page.get_by_label("Since (ISO date)")
    since.fill("yesterday")
    page.locator("#history-btn").click()
    note = page.locator("#history-note")
    expect(note).to_contain_text("Since must be a date or time", timeout=30_000)
    assert "yesterday" in note.inner_text() and "last view" in note.inner_text()
    page.wait_for_timeout(1000)
    assert table.inner_text() == before, "the last good table stays"
    assert page.get_by_text("Error", exact=True).locator("visible=true").count() == 0, "no red Error boxes"
    _shot(page, "history-bad-date", None, "#history-table")
    since.fill("")
    page.locator("#history-btn").click()
    expect(note).to_have_text("", timeout=30_000)


def test_the_api_pages_mcp_header_counts_the_tools_it_lists(page):
    """The API page's MCP tab says as many tools in its header as it lists (Gradio counts every endpoint
    there), and its Python tab still counts the endpoints."""
    from playwright.sync_api import expect

    page.get_by_text("Use via API").first.click()
    counts = page.locator(".counts").first
    expect(counts).to_contain_text("5 MCP Tools", timeout=30_000)  # the MCP tab opens first
    page.screenshot(path=str(ARTIFACTS / "api-mcp-header.png"))
    page.get_by_text("Python", exact=True).first.click()
    expect(counts).to_contain_text("API endpoint", timeout=30_000)
    assert not counts.inner_text().strip().startswith("5 "), "the endpoints keep their own count"
    page.get_by_text("MCP", exact=True).first.click()
    expect(counts).to_contain_text("5 MCP Tools", timeout=30_000)
    page.reload()
