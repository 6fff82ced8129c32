"""The game in a real headless Chromium, as a visitor sees it on a laptop (1280×900, light) and
on a phone (390×844, dark): what shows where, what overlaps, what moves, what the command line
holds, the notices, the clip forming during a turn, and hostile text that never executes.

Needs Debian's `chromium` (`apt-get install chromium`) and the `playwright` Python package; it
skips with the reason when either is missing (Playwright's own browser download is never used).
One app server serves the whole module, on the preview engine (tiny random models) unless
`ANIMEGAMER_BROWSER_ENGINE=nano` picks the Nano world. Set `ANIMEGAMER_SCREENSHOT_DIR` to keep the
screenshots; the README's (desktop.png, phone.png, preview.png) show Nano, what a visitor without a
GPU plays:

    ANIMEGAMER_BROWSER_ENGINE=nano ANIMEGAMER_SCREENSHOT_DIR=assets/screenshots \
        .venv/bin/python -m pytest tests/test_browser.py -k "layout or forming"
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import free_port

from animegamer.characters.registry import load_registry
from animegamer.serving.settings import Settings
from animegamer.serving.stand_ins import create_nano_engine
from animegamer.ui.blocks import build_app
from animegamer.ui.contracts import shows_live_preview
from animegamer.ui.events import INVALID
from animegamer.ui.layout import launch_options
from animegamer.ui.turns import turn_errors

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
TIMEOUT_MS = 120_000
STEP_DELAY_S = 0.15
"""Each progress report and preview of a turn waits this long, so that a turn lasts about a
second and what it shows on the way can be seen (the preview engine would be over in a blink)."""
TURN_STEPS = 4
"""Denoising steps of the module's turns: enough for the engine to preview the clip twice."""
FLAG = "window.__agPwned"
HOSTILE_COMMAND = f'wave <img src=x onerror="{FLAG}=1"> hand, day sky 🌸'
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
SIZES = [(DESKTOP, "light"), (PHONE, "dark")]
SIZE_IDS = ["desktop-light", "phone-dark"]
MAX_SHIFT_PX = 4
PAGE_PARTS = {
    "picker": "#ag-who",
    "clip": "#ag-clip",
    "gauges": "#ag-gauges",
    "command": "#ag-command-row",
    "buttons": "#ag-actions",
    "status": "#ag-status",
    "chips": ".ag-suggestions",
    "story title": "#ag-story-title",
    "story": "#ag-chat",
}
"""The page's parts, in the order a phone shows them; none may overlap another."""
BOXES_JS = """(selectors) => Object.fromEntries(Object.entries(selectors).map(([name, s]) => {
  const e = [...document.querySelectorAll(s)].find(x => x.offsetParent !== null);
  if (!e) return [name, null];
  const r = e.getBoundingClientRect();
  return [name, {x: r.x, y: r.y + window.scrollY, w: r.width, h: r.height}];
}))"""
CLIPPED_CHIPS_JS = """() => [...document.querySelectorAll('.ag-chip-row')]
  .filter(row => row.offsetParent !== null)
  .flatMap(row => [...row.querySelectorAll('button.gallery-item')].map(chip => {
    let box = row;  // the nearest ancestor that clips (or the row itself)
    for (let e = chip.parentElement; e && e !== row.parentElement; e = e.parentElement) {
      if (getComputedStyle(e).overflowX !== 'visible') { box = e; break; }
    }
    const c = chip.getBoundingClientRect(), b = box.getBoundingClientRect();
    const clipped = c.left < b.left - 1 || c.right > b.right + 1;
    const scrolls = ['auto', 'scroll'].includes(getComputedStyle(box).overflowX)
      && getComputedStyle(box).maskImage !== 'none';
    return clipped && !scrolls ? chip.innerText : null;
  })).filter(Boolean)"""
PICKER_JS = """() => {
  const input = document.querySelector('#ag-character input');
  const arrow = document.querySelector('#ag-character .icon-wrap');
  const i = input.getBoundingClientRect(), a = arrow.getBoundingClientRect();
  const textEnd = i.right - parseFloat(getComputedStyle(input).paddingRight);
  return {textEnd, arrowStart: a.left};
}"""
STORY_OVERLAP_JS = """() => {
  const chat = document.querySelector('#ag-chat');
  const scroller = [...chat.querySelectorAll('*')].find(e => e.scrollHeight > e.clientHeight + 4
    && ['auto', 'scroll'].includes(getComputedStyle(e).overflowY));
  if (scroller) scroller.scrollTop = scroller.scrollHeight / 2;
  const tools = [...chat.querySelectorAll('.icon-button-wrapper.top-panel, label, .label')]
    .filter(e => e.offsetParent !== null && !e.closest('.message'))
    .map(e => e.getBoundingClientRect());
  const view = (scroller || chat).getBoundingClientRect();
  const hits = [];
  for (const m of chat.querySelectorAll('.message')) {
    const r = m.getBoundingClientRect();
    const top = Math.max(r.top, view.top), bottom = Math.min(r.bottom, view.bottom);
    if (bottom <= top) continue;  // scrolled out of sight
    for (const t of tools) {
      if (t.left < r.right && r.left < t.right && t.top < bottom && top < t.bottom)
        hits.push(m.innerText.slice(0, 40));
    }
  }
  return hits;
}"""
WATCH_PREVIEW_JS = """() => {
  window.__agPreviews = [];
  new MutationObserver(() => {
    const img = document.querySelector('#ag-preview .ag-preview img');
    const video = document.querySelector('#ag-clip video');
    if (img && !video && !window.__agPreviews.includes(img.src)) window.__agPreviews.push(img.src);
  }).observe(document.querySelector('#ag-preview'),
    {subtree: true, childList: true, attributes: true});
}"""


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.is_file():
        pytest.skip(f"Chromium not found at {CHROMIUM} (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def browser_engine(preview_engine, tmp_path_factory):
    """The preview engine, or the Nano world's with `ANIMEGAMER_BROWSER_ENGINE=nano`."""
    chosen = os.environ.get("ANIMEGAMER_BROWSER_ENGINE", "preview")
    if chosen == "preview":
        return preview_engine
    if chosen != "nano":
        raise ValueError(f"ANIMEGAMER_BROWSER_ENGINE must be preview or nano, not {chosen!r}")
    output = tmp_path_factory.mktemp("nano-clips")
    return create_nano_engine(Settings(engine="nano", output_dir=output))


@pytest.fixture(scope="module")
def game_url(browser_engine) -> Iterator[str]:
    """The app on the module's engine, its turns slowed down enough to watch them form."""
    engine = browser_engine

    def slow_turn(session, instruction, seed, progress=None, on_preview=None, withdrawn=None):
        def report(fraction, desc=None):
            time.sleep(STEP_DELAY_S)
            if progress is not None:
                progress(fraction, desc=desc)

        def preview(clip_preview):
            time.sleep(STEP_DELAY_S)
            on_preview(clip_preview)

        previews = {} if on_preview is None else {"on_preview": preview}
        with turn_errors(engine.clips.root):
            return engine.play(
                session, instruction, seed=seed, progress=report,
                num_inference_steps=TURN_STEPS, **previews,
            )

    registry = load_registry()
    settings = Settings(engine=engine.kind, output_dir=engine.clips.root)
    demo = build_app(engine, registry, settings, run_turn=slow_turn)
    _, url, _ = demo.launch(
        server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True, quiet=True,
        **launch_options(registry, settings),
    )
    yield url
    demo.close()


def open_game(browser, url: str, viewport: dict[str, int], scheme: str):
    page = browser.new_page(viewport=viewport, color_scheme=scheme)
    page.set_default_timeout(TIMEOUT_MS)
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(url, wait_until="domcontentloaded")
    play_button(page).wait_for()
    page.locator("#ag-gauges .ag-gauge").first.wait_for()
    return page, dialogs


def play_button(page):
    return page.get_by_role("button", name="Play turn", exact=True)


def command(page):
    return page.locator("#ag-command input, #ag-command textarea").first


def gauge(page, name: str) -> int:
    return int(page.locator(f'#ag-gauges [data-gauge="{name}"]').get_attribute("data-value"))


def boxes(page) -> dict[str, dict[str, float]]:
    found = page.evaluate(BOXES_JS, PAGE_PARTS)
    missing = [name for name, box in found.items() if box is None]
    assert not missing, f"not shown: {missing}"
    return found


def overlapping(found: dict[str, dict[str, float]]) -> list[tuple[str, str]]:
    names = list(found)
    pairs = []
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            a, b = found[first], found[second]
            if (a["x"] < b["x"] + b["w"] - 1 and b["x"] < a["x"] + a["w"] - 1
                    and a["y"] < b["y"] + b["h"] - 1 and b["y"] < a["y"] + a["h"] - 1):
                pairs.append((first, second))
    return pairs


def assert_in_view(page, locator, what: str) -> None:
    """`locator` entirely inside the window, and the page not scrolled."""
    box = locator.bounding_box()
    viewport = page.viewport_size
    assert box is not None, f"{what} is not shown"
    assert page.evaluate("window.scrollY") == 0, f"the page scrolled before {what}"
    assert box["y"] >= 0 and box["y"] + box["height"] <= viewport["height"] + 1, (what, box)
    assert box["x"] >= 0 and box["x"] + box["width"] <= viewport["width"] + 1, (what, box)


def notices(page, settle_ms: int = 1500) -> list[str]:
    """The game's notices on screen once they have settled (each toast message), then closed."""
    page.wait_for_timeout(settle_ms)
    texts = page.evaluate(
        """() => [...document.querySelectorAll('[data-testid="toast-text"], '
             + '[data-testid="toast-body"] .toast-text')].map(e => e.innerText.trim())"""
    )
    if not texts:  # an older toast markup: one body per message
        texts = [t.split("\n")[-1] for t in page.get_by_test_id("toast-body").all_inner_texts()]
    for close in page.get_by_test_id("toast-close").all():
        close.click()
    return texts


def expect_toast(page, text: str) -> None:
    page.get_by_test_id("toast-body").filter(has_text=text).first.wait_for()
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


def play_turn(page, text: str, turn: int) -> None:
    command(page).fill(text)
    command(page).press("Enter")
    page.locator(f"#ag-chat .ag-turn-{turn}").wait_for()
    page.locator("#ag-clip video").wait_for(state="attached")


def check_layout(page, viewport: dict[str, int]) -> dict[str, Any]:
    """The page's parts: in the phone's order on a phone, none overlapping, no chip cut off,
    the picker's arrow clear of its text. Returns their boxes."""
    found = boxes(page)
    assert overlapping(found) == []
    assert page.evaluate(CLIPPED_CHIPS_JS) == [], "chips cut off with nothing showing they scroll"
    picker = page.evaluate(PICKER_JS)
    assert picker["textEnd"] <= picker["arrowStart"] + 1, picker
    if viewport is PHONE:
        tops = [found[name]["y"] for name in PAGE_PARTS]
        assert tops == sorted(tops), dict(zip(PAGE_PARTS, tops, strict=True))
        assert found["story"]["y"] < 1.5 * viewport["height"], found["story"]
    return found


@pytest.mark.parametrize(("viewport", "scheme"), SIZES, ids=SIZE_IDS)
def test_a_turn_keeps_the_layout_and_empties_the_command_line(
    browser, game_url, tmp_path, viewport, scheme
):
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
    before = check_layout(page, viewport)

    # Enter plays; the line empties at once; the adverb left out is the character's default.
    command(page).fill("run, night town")
    command(page).press("Enter")
    page.locator("#ag-chat .ag-pending").wait_for()
    sync_api.expect(command(page)).to_have_value("")
    progress = page.locator("#ag-clip [role=progressbar]").first
    progress.wait_for()
    assert_in_view(page, progress, "the turn's progress")
    page.locator("#ag-chat .ag-turn-1").wait_for()
    page.locator("#ag-clip video").wait_for(state="attached")
    sync_api.expect(command(page)).to_have_value("")
    assert page.locator("#ag-chat").get_by_text("Qiqi quickly runs (night, town)").count() == 1
    assert_in_view(page, page.locator("#ag-clip video"), "the new clip")
    played = {name: gauge(page, name) for name in ("stamina", "social", "entertainment")}
    assert played != {"stamina": 50, "social": 50, "entertainment": 50}

    after = check_layout(page, viewport)
    moved = {
        name: (before[name]["y"], after[name]["y"]) for name in PAGE_PARTS
        if abs(after[name]["y"] - before[name]["y"]) > MAX_SHIFT_PX
    }
    assert moved == {}, f"moved after the first turn: {moved}"
    if viewport is PHONE:
        first_entry = page.locator("#ag-chat .message").first.bounding_box()
        assert first_entry["y"] + page.evaluate("window.scrollY") < 1.5 * viewport["height"]
    for turn in (2, 3):
        play_turn(page, "wave hand, day town", turn)
    screenshot(page, tmp_path, "desktop" if viewport is DESKTOP else "phone")
    assert page.evaluate(STORY_OVERLAP_JS) == [], "the story's tools cover its entries"
    assert dialogs == []
    page.close()


@pytest.mark.parametrize(("viewport", "scheme"), SIZES, ids=SIZE_IDS)
def test_one_notice_per_switch_with_the_kept_games_count(browser, game_url, viewport, scheme):
    page, _ = open_game(browser, game_url, viewport, scheme)
    play_turn(page, "run, night town", 1)
    picker = page.locator("#ag-character input")

    def switch_to(name: str) -> list[str]:
        picker.click()
        page.get_by_role("option", name=re.compile(f"^{name}")).click()
        page.locator("#ag-chips-motions-" + name).wait_for()
        return notices(page)

    assert switch_to("Sosuke") == [
        "New game with Sosuke (Ponyo on the Cliff). Your previous game (1 turn) is kept: "
        "“Back to previous game” returns to it."
    ]
    assert switch_to("Qiqi") == ["New game with Qiqi (Kiki's Delivery Service)."]
    back = page.locator("#ag-back")
    sync_api.expect(back).to_have_text("Back to previous game (1 turn)")
    back.click()
    assert notices(page) == ["Back to your game with Qiqi (Kiki's Delivery Service): 1 turn."]
    page.locator("#ag-chat .ag-turn-1").wait_for()
    assert gauge(page, "social") != 50 or gauge(page, "stamina") != 50
    page.close()


def test_the_stage_shows_the_clip_forming(browser, game_url, browser_engine, tmp_path):
    if not shows_live_preview(browser_engine):
        pytest.skip("this engine reports no live preview (engine.live_preview and on_preview)")
    page, _ = open_game(browser, game_url, DESKTOP, "light")
    page.evaluate(WATCH_PREVIEW_JS)
    command(page).fill("fly on broomstick, day sky")
    command(page).press("Enter")
    page.wait_for_function("window.__agPreviews.length >= 2")  # a later, clearer estimate
    screenshot(page, tmp_path, "preview")
    page.locator("#ag-chat .ag-turn-1").wait_for()
    sync_api.expect(page.locator("#ag-preview .ag-preview")).to_have_count(0)
    page.close()


def test_suggestions_examples_and_hostile_text(browser, game_url):
    page, dialogs = open_game(browser, game_url, DESKTOP, "light")
    line = command(page)

    # Refused, with the toast's own title and the command line marked; the game is unchanged.
    line.fill("")
    play_button(page).click()
    expect_toast(page, "Invalid instruction: Type what your character should do")
    sync_api.expect(page.locator("#ag-command")).to_have_class(re.compile(INVALID))
    line.fill("fly, day sky\u0007")
    line.press("Enter")
    expect_toast(page, "control or unassigned character")
    sync_api.expect(line).to_have_value("fly, day sky\u0007")
    assert page.locator("#ag-chat .ag-story").count() == 0

    # A chip changes one part of the command; the other parts are one tap away.
    line.fill("fly, day sky")
    page.locator("#ag-tab-adverbs-Qiqi-button").click()
    page.locator("#ag-chips-adverbs-Qiqi").get_by_text("gently", exact=True).click()
    sync_api.expect(line).to_have_value("gently fly, day sky")

    # Markup is played as text, never run.
    line.fill(HOSTILE_COMMAND)
    line.press("Enter")
    page.locator("#ag-chat .ag-turn-1").wait_for()
    chat = page.locator("#ag-chat")
    chat.get_by_text("wave img src=x onerror=").first.wait_for()
    assert "🌸" in chat.inner_text()
    assert page.locator("#ag-chat img[onerror], #ag-chat script").count() == 0

    # An example plays at once, whatever the command line holds.
    line.fill("something half typed")
    page.locator("#ag-tab-examples-Qiqi-button").click()
    page.locator("#ag-examples-Qiqi").get_by_text("gently sit on railing, day town").click()
    page.locator("#ag-chat .ag-turn-2").wait_for()
    sync_api.expect(line).to_have_value("")
    page.locator("#ag-history-box").get_by_text("History").click()
    page.locator("#ag-history").get_by_text("sit on railing").first.wait_for()

    assert page.evaluate(FLAG) is None
    assert dialogs == []
    page.close()


WATCH_PREVIEW_FIT_JS = """() => {
  window.__agPreviewFits = [];
  new MutationObserver(() => {
    const images = [...document.querySelectorAll('#ag-preview .ag-preview img')];
    if (images.length) window.__agPreviewFits.push(images.every(img => {
      const box = img.getBoundingClientRect();
      return box.left >= 0 && box.right <= window.innerWidth + 1 && box.width > 0;
    }));
  }).observe(document.querySelector('#ag-preview'),
    {subtree: true, childList: true, attributes: true});
}"""


def test_on_a_phone_an_example_tapped_below_the_stage_plays_in_view(
    browser, game_url, browser_engine
):
    """Scrolled down to the Try examples, a tap plays the example and brings the stage back
    into view; every example, the placeholder and each preview frame fit the phone's width."""
    page, dialogs = open_game(browser, game_url, PHONE, "light")
    command(page).fill("")
    fits = page.evaluate("""() => {
      const line = document.querySelector('#ag-command input, #ag-command textarea');
      return line.scrollWidth <= line.clientWidth;
    }""")
    assert fits, "the command line's placeholder is cut"
    page.evaluate(WATCH_PREVIEW_FIT_JS)
    tab = page.locator("#ag-tab-examples-Qiqi-button")
    tab.scroll_into_view_if_needed()
    tab.click()
    examples = page.locator("#ag-examples-Qiqi button.gallery-item")
    examples.first.wait_for()
    widths = examples.evaluate_all("items => items.map(i => i.getBoundingClientRect().right)")
    assert max(widths) <= PHONE["width"] + 1, widths
    example = page.locator("#ag-examples-Qiqi").get_by_text("gently sit on railing, day town")
    example.scroll_into_view_if_needed()
    assert page.locator("#ag-clip").bounding_box()["y"] < 0  # the stage is above the screen
    example.click()
    page.locator("#ag-chat .ag-turn-1").wait_for()
    clip = page.locator("#ag-clip").bounding_box()
    assert clip["y"] >= -1 and clip["y"] + clip["height"] <= PHONE["height"] + 1, clip
    if shows_live_preview(browser_engine):
        previews = page.evaluate("window.__agPreviewFits")
        assert previews and all(previews), previews
    assert dialogs == []
    page.close()


MARK_JS = """() => getComputedStyle(
  document.querySelector('#ag-command input, #ag-command textarea')).boxShadow"""
"""How the command line is marked, as the browser draws it (Gradio's theme sets its outline to
none with !important, so an outline rule would be in the CSS and never on the screen)."""
RED_RGB = "rgb(239, 68, 68)"


@pytest.mark.parametrize(("viewport", "scheme"), SIZES, ids=SIZE_IDS)
def test_a_reload_keeps_the_game_and_refusals_show_where_the_player_looks(
    browser, game_url, viewport, scheme
):
    page, dialogs = open_game(browser, game_url, viewport, scheme)
    play_turn(page, "run, night town", 1)
    played = {name: gauge(page, name) for name in ("stamina", "social", "entertainment")}

    # A refused command: its reason stays in the story once the notice is gone, the line marked.
    command(page).fill("fly, day sky\u0007")
    command(page).press("Enter")
    refusal = page.locator("#ag-chat .ag-refusal")
    refusal.wait_for()
    notices(page)
    assert "control or unassigned character" in refusal.inner_text()
    assert RED_RGB in page.evaluate(MARK_JS)

    # A press while the turn runs says so, and marks nothing.
    command(page).fill("wave hand, day town")
    command(page).press("Enter")
    page.locator("#ag-chat .ag-pending").wait_for()
    play_button(page).click()
    expect_toast(page, "Turn running: Your turn is still being played")
    assert RED_RGB not in page.evaluate(MARK_JS)

    # A reload in the middle of that turn comes back to the same game (the turn is dropped);
    # the browser keeps a key, not the game.
    assert page.locator("#ag-chat .ag-pending").count() == 1, "the turn ended before the reload"
    page.reload(wait_until="domcontentloaded")
    page.locator("#ag-chat .ag-turn-1").wait_for()
    assert {name: gauge(page, name) for name in played} == played
    assert page.locator("#ag-chat").get_by_text("Qiqi quickly runs (night, town)").count() == 1
    stored = page.evaluate("() => JSON.stringify(Object.assign({}, localStorage))")
    assert len(stored) < 300, stored
    play_turn(page, "wave hand, day town", 2)
    sync_api.expect(page.locator("#ag-status")).to_contain_text("Turn 2 played")

    # Another browser (its own storage) gets a game of its own.
    other, _ = open_game(browser, game_url, viewport, scheme)
    other.locator("#ag-status").get_by_text("Playing").wait_for()
    assert other.locator("#ag-chat .ag-story").count() == 0
    assert [gauge(other, name) for name in played] == [50, 50, 50]
    assert dialogs == []
    other.close()
    page.close()
