"""The game in a real headless Chromium, as a visitor sees it on a laptop and on a phone, in
light and dark mode: the stage, the command line and the progress stay in view, Enter plays,
a restart can be undone, and hostile text never executes.

Needs Debian's `chromium` (`apt-get install chromium`) and the `playwright` Python package; it
skips with the reason when either is missing (Playwright's own browser download is never used).
Set `ANIMEGAMER_SCREENSHOT_DIR` to keep the screenshots (the README's come from here).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import free_port

from animegamer.characters import load_registry
from animegamer.settings import Settings
from animegamer.ui.callbacks import make_turn_runner
from animegamer.ui.layout import INVALID, build_app, launch_options

pytestmark = pytest.mark.browser
sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing")

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 60_000
STEP_DELAY_S = 0.12
"""Each progress report of a turn waits this long, so that a turn lasts about a second and its
progress can be seen (the preview engine's two steps would be over in a blink)."""
FLAG = "window.__agPwned"
HOSTILE_COMMAND = f'wave <img src=x onerror="{FLAG}=1"> hand, day sky 🌸'
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.is_file():
        pytest.skip(f"Chromium not found at {CHROMIUM} (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def game_url(preview_engine, tmp_path_factory) -> Iterator[str]:
    """The app on the preview engine, with turns slowed down enough to watch their progress."""
    runner = make_turn_runner(preview_engine)

    def slow_turn(session, instruction, seed, progress=None):
        def report(fraction, desc=None):
            time.sleep(STEP_DELAY_S)
            if progress is not None:
                progress(fraction, desc=desc)

        return runner(session, instruction, seed, report)

    registry = load_registry()
    settings = Settings(engine="preview", output_dir=preview_engine.clips.root)
    demo = build_app(preview_engine, registry, settings, run_turn=slow_turn)
    _, url, _ = demo.launch(
        server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True, quiet=True,
        **launch_options(registry, settings),
    )
    yield url
    demo.close()


def open_game(browser, url: str, viewport: dict[str, int], scheme: str):
    page = browser.new_page(viewport=viewport, color_scheme=scheme)
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(url, wait_until="domcontentloaded")
    play_button(page).wait_for(timeout=TIMEOUT_MS)
    page.locator("#ag-gauges .ag-gauge").first.wait_for(timeout=TIMEOUT_MS)
    return page, dialogs


def play_button(page):
    return page.get_by_role("button", name="Play turn", exact=True)


def command(page):
    return page.locator("#ag-command input, #ag-command textarea").first


def gauge(page, name: str) -> int:
    return int(page.locator(f'#ag-gauges [data-gauge="{name}"]').get_attribute("data-value"))


def assert_in_view(page, locator, what: str) -> None:
    """`locator` entirely inside the window, and the page not scrolled."""
    box = locator.bounding_box()
    viewport = page.viewport_size
    assert box is not None, f"{what} is not shown"
    assert page.evaluate("window.scrollY") == 0, f"the page scrolled before {what}"
    assert box["y"] >= 0 and box["y"] + box["height"] <= viewport["height"] + 1, (what, box)
    assert box["x"] >= 0 and box["x"] + box["width"] <= viewport["width"] + 1, (what, box)


def expect_toast(page, text: str) -> None:
    toast = page.get_by_test_id("toast-body").filter(has_text=text).first
    toast.wait_for(timeout=TIMEOUT_MS)
    for close in page.get_by_test_id("toast-close").all():
        close.click()


def luminance(css_colour: str) -> float:
    """0 (black) … 1 (white) for a computed `rgb(...)`/`rgba(...)` colour."""
    channels = css_colour[css_colour.index("(") + 1 : css_colour.index(")")].split(",")
    red, green, blue = (float(c) / 255 for c in channels[:3])
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


def screenshot(page, tmp_path: Path, name: str) -> Path:
    folder = Path(os.environ.get("ANIMEGAMER_SCREENSHOT_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    page.screenshot(path=str(path))
    return path


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_stage_command_and_progress_stay_in_view(browser, game_url, tmp_path, viewport, scheme):
    page, dialogs = open_game(browser, game_url, viewport, scheme)
    assert_in_view(page, play_button(page), "the Play button")
    assert_in_view(page, command(page), "the command line")
    text_colour = page.locator(".ag-banner").evaluate("e => getComputedStyle(e).color")
    assert (luminance(text_colour) > 0.5) == (scheme == "dark"), text_colour
    small = page.evaluate(
        """() => [...document.querySelectorAll('#ag-main button, .ag-chip-row button')]
             .filter(b => b.offsetParent !== null && b.getBoundingClientRect().height < 44)
             .map(b => b.innerText)"""
    )
    assert small == [], f"tap targets under 44 px: {small}"

    # Enter plays; the adverb left out is the character's default, shown in the story.
    command(page).fill("run, night town")
    command(page).press("Enter")
    page.locator('#ag-chat .ag-pending').wait_for(timeout=TIMEOUT_MS)
    progress = page.locator("#ag-clip [role=progressbar]").first
    progress.wait_for(timeout=TIMEOUT_MS)
    assert_in_view(page, progress, "the turn's progress")
    page.locator('#ag-chat .ag-turn-1').wait_for(timeout=TIMEOUT_MS)
    sync_api.expect(command(page)).to_have_value("quickly run, night town")
    assert page.locator("#ag-chat").get_by_text("Qiqi quickly runs (night, town)").count() == 1
    page.locator("#ag-clip video").wait_for(state="attached", timeout=TIMEOUT_MS)
    assert_in_view(page, page.locator("#ag-clip video"), "the new clip")
    assert_in_view(page, page.locator("#ag-gauges"), "the gauges")
    played = {name: gauge(page, name) for name in ("stamina", "social", "entertainment")}
    assert played != {"stamina": 50, "social": 50, "entertainment": 50}
    change = page.locator("#ag-chat .ag-change.ag-g-social").first.inner_text()
    assert change == f"Social {played['social'] - 50:+d}".replace("-", "−").replace("+0", "±0")
    if viewport is DESKTOP or scheme == "dark":
        screenshot(page, tmp_path, f"{'desktop' if viewport is DESKTOP else 'phone'}-{scheme}")

    # A restart can be undone.
    page.get_by_role("button", name="New game", exact=True).click()
    expect_toast(page, "is kept")
    back = page.locator("#ag-back")
    sync_api.expect(back).to_have_text("Back to previous game (1 turns)", timeout=TIMEOUT_MS)
    assert gauge(page, "social") == 50
    back.click()
    expect_toast(page, "Back to your game")
    page.locator('#ag-chat .ag-turn-1').wait_for(timeout=TIMEOUT_MS)
    assert {name: gauge(page, name) for name in played} == played
    assert dialogs == []
    page.close()


def test_suggestions_examples_and_hostile_text(browser, game_url):
    page, dialogs = open_game(browser, game_url, DESKTOP, "light")
    line = command(page)

    # Refused, with the toast's own title and the command line marked; the game is unchanged.
    line.fill("")
    play_button(page).click()
    expect_toast(page, "Invalid instruction: Type what your character should do")
    sync_api.expect(page.locator("#ag-command")).to_have_class(re.compile(INVALID))
    line.fill("x" * 10_000)
    line.press("Enter")
    expect_toast(page, "too long")
    line.fill("fly, day sky\u0007")
    line.press("Enter")
    expect_toast(page, "control or unassigned character")
    assert page.locator("#ag-chat .ag-story").count() == 0

    # A chip changes one part of the command.
    line.fill("fly, day sky")
    page.locator("#ag-chips-adverbs-Qiqi").get_by_text("gently", exact=True).click()
    sync_api.expect(line).to_have_value("gently fly, day sky", timeout=TIMEOUT_MS)

    # Markup is played as text, never run.
    line.fill(HOSTILE_COMMAND)
    line.press("Enter")
    story = page.locator('#ag-chat .ag-turn-1')
    story.wait_for(timeout=TIMEOUT_MS)
    chat = page.locator("#ag-chat")
    chat.get_by_text("wave img src=x onerror=").first.wait_for(timeout=TIMEOUT_MS)
    assert "🌸" in chat.inner_text()
    assert page.locator("#ag-chat img[onerror], #ag-chat script").count() == 0

    # An example plays at once, whatever the command line holds.
    line.fill("something half typed")
    page.locator("#ag-examples-Qiqi").get_by_text("gently sit on railing, day town").click()
    page.locator('#ag-chat .ag-turn-2').wait_for(timeout=TIMEOUT_MS)
    sync_api.expect(line).to_have_value("gently sit on railing, day town")
    page.locator("#ag-history-box").get_by_text("History").click()
    page.locator("#ag-history").get_by_text("sit on railing").first.wait_for(timeout=TIMEOUT_MS)

    assert page.evaluate(FLAG) is None
    assert dialogs == []
    page.close()
