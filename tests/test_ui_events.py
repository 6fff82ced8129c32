"""The browser events' plain handlers, without a browser: the live preview's generator, the
notices of a game replaced, and the command line around a turn."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import pytest

from animegamer.characters.registry import load_registry
from animegamer.ui import GameUI
from animegamer.ui.events import Pending, restore_after_failure, run_with_previews, send_command
from animegamer.ui.state import GameSlot
from animegamer.ui.views import preview_html


@dataclass(frozen=True)
class FakePreview:
    frames: np.ndarray
    step: int = 1
    num_steps: int = 4


def preview(value: int) -> FakePreview:
    return FakePreview(np.full((3, 4, 6, 3), value, np.uint8))


def shown(value: int) -> str:
    return preview_html(preview(value).frames, 1, 4)


@pytest.fixture(scope="module")
def ui(preview_engine):
    return GameUI(preview_engine, load_registry())


def test_previews_come_in_order_then_the_update_and_never_after_it():
    released = [threading.Event() for _ in range(3)]

    def turn(on_preview):
        for value, gate in zip((10, 20, 30), released, strict=True):
            on_preview(preview(value))
            gate.wait(timeout=5)
        return "update"

    steps = run_with_previews(turn, live=True)
    shown_frames = []
    for gate in released:
        shown_frames.append(next(steps))
        gate.set()
    assert shown_frames == [shown(v) for v in (10, 20, 30)]
    assert list(steps) == ["update"]


def test_without_live_preview_the_turn_runs_in_the_callers_thread():
    threads = []

    def turn(on_preview):
        threads.append((threading.current_thread(), on_preview))
        return "update"

    assert list(run_with_previews(turn, live=False)) == ["update"]
    assert threads == [(threading.current_thread(), None)]


def test_a_failed_turn_raises_in_the_event_after_its_previews():
    def turn(on_preview):
        on_preview(preview(1))
        raise ValueError("boom")

    steps = run_with_previews(turn, live=True)
    with pytest.raises(ValueError, match="boom"):
        list(steps)


def test_preview_html_inlines_each_frame():
    html = preview_html(preview(200).frames, 2, 8)
    assert html.count('src="data:image/png;base64,') == 3
    assert 'class="ag-preview"' in html and "step 2 of 8" in html


def test_the_command_line_empties_when_sent_and_returns_when_the_turn_fails(ui):
    slot = GameSlot(ui.root)
    pending, line, chat = send_command(ui, slot, "run, night town")
    assert line["value"] == "" and pending.text == "run, night town"
    assert pending.instruction.motion == "run" and chat[-1]["role"] == "assistant"
    story, stage_preview, restored = restore_after_failure(ui, slot, pending, "")
    assert story == [] and stage_preview == "" and restored == "run, night town"
    typed_since = restore_after_failure(ui, slot, Pending("run", pending.instruction), "wave")
    assert typed_since[2] == {"__type__": "update"}


def test_one_notice_per_switch_counts_the_game_it_replaced(ui):
    played = ui.turns.play(None, {"character": "Qiqi", "adverb": "quickly", "motion": "run",
                            "time": "day", "place": "town"}, "", "5").player
    switched = ui.games.choose_character(played, "Sosuke")
    assert "previous game (1 turn) is kept" in switched.toast
    again = ui.games.choose_character(switched.player, "Qiqi")  # replaces an empty game
    assert again.toast == "New game with Qiqi (Kiki's Delivery Service)."
    assert again.player.previous_game is played.session  # the game with a turn stays
    same = ui.games.choose_character(again.player, "Qiqi")  # the picker reporting its choice again
    assert same.toast is None and same.player is again.player
