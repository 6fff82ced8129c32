"""A game that survives a reload (the browser keeps a key, the server the game) and refusals the
player sees where they look, without a browser: the page-load handler, the shelf of kept games,
and the handler that shows a refused command (tests/test_browser.py checks both in Chromium)."""

from __future__ import annotations

import threading
from pathlib import Path

import gradio as gr
import pytest
from conftest import QIQI_FIELDS

from animegamer.characters.registry import load_registry
from animegamer.ui import GameUI
from animegamer.ui.events import INVALID, resume_game, send_command, show_refusal
from animegamer.ui.messages import LOST_GAME
from animegamer.ui.shelf import GameShelf
from animegamer.ui.state import ACTION_WAIT_S, GameSlot, discard_game_files

SKIP = {"__type__": "update"}


@pytest.fixture(scope="module")
def ui(preview_engine):
    return GameUI(preview_engine, load_registry())


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def page_load(ui: GameUI, key: object) -> tuple[GameSlot, list, str, str]:
    """A new browser session's page load: (its slot, its story, its status line, the key the
    browser keeps)."""
    out = resume_game(ui, GameSlot(ui.root), key)
    slot, chat, status, kept_key = out[0], out[2], out[7], out[-1]
    return slot, chat, status, kept_key


def play(ui: GameUI, slot: GameSlot) -> None:
    slot.run(lambda player: ui.turns.play(player, QIQI_FIELDS, "", "3"))


def command_line(ui: GameUI, key: str) -> dict:
    return resume_game(ui, GameSlot(ui.root), key)[8]


def test_a_reload_comes_back_to_the_game_and_other_keys_do_not(ui):
    slot, chat, _, key = page_load(ui, "")
    assert chat == [] and len(key) >= 32
    assert "value" not in command_line(ui, key)  # a new game: the line as the player types it
    play(ui, slot)
    clip = Path(slot.player.session.turns[-1].clip_path)

    reloaded, chat, status, same_key = page_load(ui, key)
    assert reloaded is slot and same_key == key
    assert "Qiqi quickly flies on broomstick" in str(chat) and LOST_GAME not in status
    assert command_line(ui, key)["value"] == "quickly fly on broomstick, day sky"

    other, other_chat, _, other_key = page_load(ui, "")  # another browser: no key yet
    assert other is not slot and other_key != key and other_chat == []
    guessed, guessed_chat, _, _ = page_load(ui, key[:-1] + ("A" if key[-1] != "A" else "B"))
    assert guessed is not slot and guessed_chat == []
    assert clip.is_file()


def test_a_game_the_server_lost_is_said_once(ui):
    _, chat, status, key = page_load(ui, "a-key-from-before-a-restart")
    assert LOST_GAME in status and chat == []
    _, _, status, _ = page_load(ui, key)
    assert LOST_GAME not in status
    for junk in (123, ["x"], "k" * 100):  # whatever the browser's storage holds
        slot, _, status, new_key = page_load(ui, junk)
        assert LOST_GAME in status and new_key != junk and slot.player is None


def test_a_kept_game_outlives_its_session_until_idle_then_its_files_go(ui):
    clock = Clock()
    shelf = GameShelf(keep_s=60)
    slot = GameSlot(ui.root, clock=clock)
    key = shelf.keep(slot)
    play(ui, slot)
    clip = Path(slot.player.session.turns[-1].clip_path)
    discard_game_files(slot)  # Gradio ends the tab's session: the kept game stays
    assert clip.is_file() and shelf.find(key) is slot
    clock.now += 59
    shelf.expire()
    assert shelf.find(key) is slot
    clock.now += 2
    shelf.expire()
    assert shelf.find(key) is None and len(shelf) == 0
    assert slot.player is None and not clip.exists()


def test_a_busy_game_is_not_forgotten_and_the_idlest_go_over_capacity(ui):
    clock = Clock()
    shelf = GameShelf(keep_s=60, capacity=2)
    busy = GameSlot(ui.root, clock=clock)
    busy_key = shelf.keep(busy)
    release = threading.Event()
    holder = threading.Thread(target=busy.read, args=(lambda _: release.wait(5),))
    holder.start()
    try:
        clock.now += 100
        shelf.expire()
        assert shelf.find(busy_key) is busy  # a long action is no idleness
    finally:
        release.set()
        holder.join()
    clock.now += 61
    shelf.expire()
    assert len(shelf) == 0

    slots, keys = [], []
    for _ in range(3):
        slots.append(GameSlot(ui.root, clock=clock))
        keys.append(shelf.keep(slots[-1]))
        clock.now += 1
    assert [shelf.find(key) for key in keys] == [None, slots[1], slots[2]]


def test_a_refused_command_stays_in_the_story_and_marks_the_line(ui):
    slot = GameSlot(ui.root)
    play(ui, slot)
    typed = "<b>fly</b>, day sky\u0007"  # a control character: refused before the turn
    with pytest.raises(gr.Error) as refused:
        send_command(ui, slot, typed)
    story, line = show_refusal(ui, slot, typed)
    assert INVALID in line["elem_classes"]
    assert "Qiqi quickly flies on broomstick" in str(story[:-2])  # the game's story stays
    assert story[-2] == {"role": "user", "content": "&lt;b&gt;fly&lt;/b&gt;, day sky\u0007"}
    note = story[-1]["content"]
    assert note.startswith('<div class="ag-refusal">Not played. ')
    assert refused.value.message in note and "Invalid instruction" in note
    assert len(slot.player.session.turns) == 1


def test_a_press_while_a_turn_runs_says_so(ui):
    clock = Clock()
    slot = GameSlot(ui.root, clock=clock)
    send_command(ui, slot, "run, night town")  # the line empties; the turn is on its way
    with pytest.raises(gr.Error, match="Turn running: Your turn is still being played"):
        send_command(ui, slot, "")
    assert show_refusal(ui, slot, "") == [SKIP, SKIP]  # the pending bubble stays; no mark
    story, line = show_refusal(ui, slot, "run\u0007")
    assert story == SKIP and INVALID in line["elem_classes"]  # typed meanwhile and refused
    clock.now += ACTION_WAIT_S + 1  # a turn whose event never ran is not waited for forever
    with pytest.raises(gr.Error, match="Invalid instruction"):
        send_command(ui, slot, "")
    clock.now -= ACTION_WAIT_S + 1
    slot.turn_sent(False)  # the turn is over
    with pytest.raises(gr.Error, match="Invalid instruction"):
        send_command(ui, slot, "")
