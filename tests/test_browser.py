"""The game in a real headless Chromium: play, see the clip and the gauges, survive hostile input.

Needs Debian's `chromium` (`apt-get install chromium`) and the `playwright` Python package; it
skips with the reason when either is missing (Playwright's own browser download is never used).
"""

from __future__ import annotations

from pathlib import Path

import pytest

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
TIMEOUT_MS = 90_000
FLAG = "window.__agPwned"
HOSTILE_MOTION = f'wave <img src=x onerror="{FLAG}=1"> hand'
HOSTILE_TEXT = f"<script>{FLAG}=1</script>"



@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.is_file():
        pytest.skip(f"Chromium not found at {CHROMIUM} (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()



def gauge(page, name: str) -> int:
    return int(page.locator(f'#ag-gauges [data-gauge="{name}"]').get_attribute("data-value"))


def field(page, name: str):
    return page.locator(f"#ag-field-{name} textarea, #ag-field-{name} input").first


def expect_toast(page, text: str) -> None:
    toast = page.get_by_test_id("toast-body").filter(has_text=text)
    toast.first.wait_for(timeout=TIMEOUT_MS)
    for close in page.get_by_test_id("toast-close").all():
        close.click()


def test_play_in_the_browser(browser, served_app, tmp_path):
    page = browser.new_page(viewport={"width": 1400, "height": 1400})
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(served_app, wait_until="domcontentloaded")
    play = page.get_by_role("button", name="Play turn", exact=True)
    play.wait_for(timeout=TIMEOUT_MS)
    page.locator("#ag-banner").get_by_text("Preview mode").wait_for(timeout=TIMEOUT_MS)
    before = {name: gauge(page, name) for name in ("stamina", "social", "entertainment")}

    # Refused: empty, 10 000 characters, control characters, a script in the free text.
    field(page, "motion").fill("")
    play.click()
    expect_toast(page, "Motion is empty")
    field(page, "motion").fill("x" * 10_000)
    play.click()
    expect_toast(page, "Motion is too long")
    field(page, "place").fill("sky\u0007")
    field(page, "motion").fill("fly on broomstick")
    play.click()
    expect_toast(page, "control or unassigned character")
    text = page.locator("#ag-text textarea, #ag-text input").first
    text.fill(HOSTILE_TEXT)
    text.press("Enter")
    expect_toast(page, "Could not read the instruction")
    text.fill("")

    # Played, shown as text: markup and emoji in the fields.
    field(page, "motion").fill(HOSTILE_MOTION)
    field(page, "place").fill("sky 🌸")
    play.click()
    gallery = page.locator("#ag-gallery")
    gallery.get_by_text("Turn 1:").first.wait_for(timeout=TIMEOUT_MS)
    gallery.locator("video").first.wait_for(state="attached", timeout=TIMEOUT_MS)
    chat = page.locator("#ag-chat")
    chat.get_by_text("wave img src=x onerror=").first.wait_for(timeout=TIMEOUT_MS)
    assert "🌸" in chat.inner_text()
    assert page.locator("#ag-chat img[onerror], #ag-chat script").count() == 0
    page.locator("#ag-clip video").wait_for(state="attached", timeout=TIMEOUT_MS)

    after = {name: gauge(page, name) for name in before}
    assert after != before
    assert page.locator("#ag-gauges .ag-change").first.inner_text() != "no turn yet"

    # A second turn from a one-click example.
    page.get_by_text("2. carefully hold broom").first.click()
    sync_api.expect(field(page, "motion")).to_have_value("hold broom", timeout=TIMEOUT_MS)
    play.click()
    gallery.get_by_text("Turn 2:").first.wait_for(timeout=TIMEOUT_MS)
    page.locator("#ag-history").get_by_text("hold broom").first.wait_for(timeout=TIMEOUT_MS)

    assert page.evaluate(FLAG) is None
    assert dialogs == []
    shot = tmp_path / "playing.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    page.close()
