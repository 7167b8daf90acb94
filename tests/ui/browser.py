"""What the real-browser tests share: Debian's chromium driven by Playwright at 1280x900 against the app as a
user runs it, one server and one page per test module, screenshots into test-artifacts/."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server import ROOT, Server

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts"
MARKS = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="chromium is not installed"),
]
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
WIDTH, HEIGHT = 1280, 900
LONG = 240_000


def serve(tmp_path_factory, name: str) -> Iterator[Server]:
    """A module's own server (its own STUDIO_HOME), stopped after the module."""
    srv = Server(tmp_path_factory.mktemp(name)).start()
    yield srv
    srv.stop()


def open_page(server: Server) -> Iterator:
    """A 1280x900 page on `server`'s app, once the Generate form is there."""
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        page.goto(server.url, wait_until="load")
        page.locator("#generate-btn").wait_for(timeout=60_000)
        yield page
        browser.close()


def small(page, prefix: str, steps: int = 4, side: int = 64) -> None:
    """Small numbers in a tab's form, kept once the page's load has filled in the model's own: typed while the
    load was still writing, "4" became "204" (over the 200-step limit, so the run was refused) or went back to
    "20". The values are typed at once, and each that did not stay for a quarter of a second is typed again.
    """
    wanted = {
        f"#{prefix}-{name} input, #{prefix}-{name} textarea": str(value)
        for name, value in (("steps", steps), ("width", side), ("height", side))
    }
    wrong = dict(wanted)
    for _ in range(20):
        for selector, value in wrong.items():
            page.locator(selector).fill(value)
        page.wait_for_timeout(250)
        shown = {s: page.locator(s).input_value() for s in wanted}
        wrong = {s: v for s, v in wanted.items() if shown[s] != v}
        if not wrong:
            return
    raise AssertionError(f"the form would not keep {wanted}: it shows {shown}")


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def no_horizontal_scroll(page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= WIDTH, f"the page is {width} px wide at a {WIDTH} px window"


def tab(page, name: str) -> None:
    page.get_by_role("tab", name=name).click()


def cancel_answered_late(page, button: str, seconds: float = 3.0) -> None:
    """Click a Cancel `button` whose answer from the server reaches the page `seconds` late (held back after
    the server has answered it: a loaded server or a slow network), by which time the run it stopped has ended
    and shown its own last words. Only that answer is held (the click's first request outside the queue);
    the route is gone once it is in."""
    import time

    held: list[str] = []

    def late(route) -> None:
        if held:  # what the page asks for next goes through as it is
            route.fallback()
            return
        held.append(route.request.url)
        response = route.fetch()
        time.sleep(seconds)
        route.fulfill(response=response)

    page.route("**/gradio_api/run/predict", late)
    page.locator(button).click()
    page.wait_for_timeout(seconds * 1000 + 1000)
    page.unroute("**/gradio_api/run/predict", late)
    assert held, "no answer was held back: the test would prove nothing"
