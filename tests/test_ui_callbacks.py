"""The UI actions as plain functions: state in → state out, without a browser or a server.

Real turns run on the preview engine (tiny random models, 2 diffusion steps); the error paths run
on injected engines that fail the way the real one can.
"""

from __future__ import annotations

import copy
import dataclasses
import errno
import html
import json
import os
import shutil
import threading
import time
from pathlib import Path

import gradio as gr
import imageio_ffmpeg
import numpy as np
import pytest
import torch
from conftest import QIQI_FIELDS

from animegamer.characters.registry import load_registry
from animegamer.command.parser import ClosedVocabulary
from animegamer.game.rules import (
    INSTRUCTION_FIELDS,
    MAX_GAME_TURNS,
    GameStates,
    Session,
    Timings,
    make_instruction,
    record_turn,
)
from animegamer.game.savefile import save_game
from animegamer.nano.vocabulary import closed_vocabulary
from animegamer.serving.clips import PLAYERS_FOLDER, ClipStore
from animegamer.serving.devices import CPU_PLACEMENT
from animegamer.serving.engine import Casting, EngineError
from animegamer.serving.settings import EngineKind
from animegamer.ui import GameUI, Player
from animegamer.ui.contracts import gpu_seconds
from animegamer.ui.examples import ExampleError, load_playthrough, load_playthroughs
from animegamer.ui.state import GameSlot, discard_game_files
from animegamer.ui.views import (
    CHAT_TURNS,
    GALLERY_CLIPS,
    HISTORY_ROWS,
    gauges_html,
    history_frame,
)
from animegamer.video.playthrough import PlaythroughError, concat_mp4

QIQI = QIQI_FIELDS


@pytest.fixture(scope="session")
def engine(preview_engine):
    return preview_engine


@pytest.fixture(scope="module")
def registry():
    return load_registry()



@pytest.fixture
def ui(engine, registry):
    """Deletes at once (no grace period), so tests can see files go."""
    return GameUI(engine, registry, delete_grace_s=0)


@pytest.fixture(scope="module")
def two_turns(engine, registry):
    """A player after two real preview turns (tests using it must not delete its files)."""
    ui = GameUI(engine, registry)
    first = ui.turns.play(None, QIQI, "", "11")
    second = ui.turns.play(
        first.player, QIQI,
        "Character: Qiqi; Motion: slowly walk along the street; Background: evening town.", "12",
    )
    return first, second


def frame_count(path: str | Path) -> int:
    frames = imageio_ffmpeg.read_frames(str(path))
    next(frames)
    return sum(1 for _ in frames)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[float, str | None]] = []

    def __call__(self, progress: float, desc: str | None = None) -> None:
        self.calls.append((progress, desc))


# Playing ----------------------------------------------------------------------------------------


def test_play_returns_a_new_player_and_leaves_the_old_one(two_turns):
    first, second = two_turns
    assert len(first.player.session.turns) == 1
    assert len(second.player.session.turns) == 2
    assert first.player.player_id == second.player.player_id
    assert second.player.session.session_id == first.player.session.session_id
    assert second.player.last_elapsed_s is not None and second.player.last_elapsed_s > 0

    screen = second.screen
    assert screen.summary["turns"] == 2
    assert screen.summary["engine"] == "preview"
    assert screen.summary["last_turn"]["seed"] == 12
    assert screen.summary["gauges"] == second.player.session.gauges.as_dict()
    assert [caption for _, caption in screen.gallery] == [
        "Turn 1: quickly fly on broomstick · day sky",
        "Turn 2: slowly walk along the street · evening town",
    ]
    assert all(Path(path).is_file() for path, _ in screen.gallery)
    assert screen.clip == second.player.session.turns[-1].clip_path
    assert [m["role"] for m in screen.chat] == ["user", "assistant"] * 2
    assert screen.chat[2]["content"] == "slowly walk along the street, evening town"
    assert "Qiqi slowly walks along the street (evening, town)" in screen.chat[3]["content"][0]
    assert screen.chat[3]["content"][1] == {"path": screen.clip}
    assert list(screen.history["Turn"]) == [1, 2]
    assert "Turn 2 played (seed 12)." in screen.status
    assert "Last turn took" in screen.status
    # The untrained preview model's states are never readable; its banner says so, once.
    assert second.player.session.turns[-1].states.unreadable
    assert "could not be read" not in screen.status


def test_play_from_text_fills_the_fields(two_turns):
    _, second = two_turns
    assert second.fields == ("Qiqi", "slowly", "walk along the street", "evening", "town")


def test_play_reports_progress_through_the_turn(ui, two_turns):
    """In the game's words, with the time left from the median of the recent turns."""
    _, second = two_turns
    recorder = Recorder()
    update = ui.turns.play(second.player, QIQI, "", "5", progress=recorder)
    descriptions = [desc or "" for _, desc in recorder.calls]
    took = [turn.timings.total_s for turn in second.player.session.turns]
    eta = (took[0] + took[1]) / 2
    assert descriptions[0] == f"Imagining the next moment… · about {eta:.0f} s left"
    assert any(d.startswith("Drawing the clip, step 1/2 · about") for d in descriptions)
    assert descriptions[-1].startswith("Saving the clip… · about")
    fractions = [fraction for fraction, _ in recorder.calls]
    assert fractions == sorted(fractions)
    assert update.player.session.turns[-1].seed == 5


def test_gauges_show_values_bands_and_last_change(two_turns):
    _, second = two_turns
    session = second.player.session
    html = second.screen.gauges
    for name, value in session.gauges.as_dict().items():
        assert f'data-gauge="{name}" data-value="{value}"' in html
    before = session.turns[0].gauges.as_dict()
    for name, value in session.gauges.as_dict().items():
        delta = value - before[name]
        sign = f"+{delta}" if delta > 0 else ("±0" if delta == 0 else f"−{-delta}")
        assert sign in html
    fresh = gauges_html(Session(character="Qiqi"))
    assert fresh.count("no turn yet") == 3 and fresh.count("ag-fill ag-mid") == 3


# Undo, restart, character ----------------------------------------------------------------------


def test_undo_removes_the_last_turn_and_its_clip(ui):
    played = ui.turns.play(None, QIQI, "", "3").player
    clip = Path(played.session.turns[-1].clip_path)
    update = ui.turns.undo(played)
    assert update.player.session.turns == ()
    assert update.fields == tuple(QIQI[name] for name in INSTRUCTION_FIELDS)
    assert update.screen.gallery == [] and update.screen.clip is None
    assert update.screen.summary["gauges"] == {"stamina": 50, "social": 50, "entertainment": 50}
    assert not clip.exists()
    assert len(played.session.turns) == 1  # the old state is untouched
    with pytest.raises(gr.Error, match="no turn to undo"):
        ui.turns.undo(update.player)


def test_restart_gives_fresh_gauges_and_can_be_undone_once(ui):
    played = ui.turns.play(None, QIQI, "", "4").player
    folder = Path(played.session.turns[-1].clip_path).parent
    update = ui.games.restart(played)
    session = update.player.session
    assert session.turns == () and session.character == "Qiqi"
    assert session.session_id != played.session.session_id
    assert update.screen.summary["gauges"] == {"stamina": 50, "social": 50, "entertainment": 50}
    assert update.fields == ("Qiqi", "quickly", "fly on broomstick", "day/night", "sky")
    assert update.player.previous_game is played.session and folder.is_dir()
    assert "previous game (1 turn) is kept" in update.toast

    again = ui.games.restart(update.player)  # an empty game never replaces the one to go back to
    assert again.player.previous_game is played.session and folder.is_dir()
    back = ui.games.previous_game(again.player)
    assert back.player.session is played.session and back.player.previous_game is None
    assert back.fields == tuple(QIQI.values())
    assert back.screen.summary["turns"] == 1 and back.toast.startswith("Back to your game")
    with pytest.raises(gr.Error, match="no earlier game"):
        ui.games.previous_game(back.player)

    newer = ui.turns.play(ui.games.restart(back.player).player, QIQI, "", "5").player
    dropped = ui.games.restart(newer)  # a third game: the first one's clips go
    assert dropped.player.previous_game is newer.session
    assert not folder.exists()


def test_choose_character_starts_a_game_with_them(ui):
    update = ui.games.choose_character(None, "Sosuke")
    assert update.player.session.character == "Sosuke"
    assert update.fields == ("Sosuke", "happily", "run along the road", "day", "seaside town")
    assert "New game with Sosuke" in update.screen.status
    again = ui.games.choose_character(update.player, "sosuke")
    assert again.player.session.session_id == update.player.session.session_id
    played = ui.turns.play(again.player, {**QIQI, "character": "Sosuke"}, "", "1").player
    switched = ui.games.choose_character(played, "Qiqi")
    assert switched.player.previous_game is played.session
    back = ui.games.previous_game(switched.player)
    assert back.player.session.character == "Sosuke" and len(back.player.session.turns) == 1
    with pytest.raises(gr.Error, match="unknown character"):
        ui.games.choose_character(update.player, "Totoro")


def test_send_reads_the_command_and_shows_a_pending_bubble(ui, two_turns):
    player = ui.new_player()
    sent = ui.turns.send(player, "run, night town")
    assert sent.fields == ("Qiqi", "quickly", "run", "night", "town")
    assert sent.text == "run, night town"
    assert [m["role"] for m in sent.chat] == ["user", "assistant"]
    assert sent.chat[0]["content"] == "quickly run, night town"
    assert '<div class="ag-pending">' in sent.chat[1]["content"]
    assert player.session.turns == ()
    played = two_turns[1].player  # its last turn: slowly walk along the street, evening town
    took = sorted(turn.timings.total_s for turn in played.session.turns)
    again = ui.turns.send(played, "sit on railing")
    assert again.fields == ("Qiqi", "quickly", "sit on railing", "evening", "town")
    assert len(again.chat) == 6
    assert f"(about {(took[0] + took[1]) / 2:.0f} s)" in again.chat[-1]["content"]
    with pytest.raises(gr.Error, match="Type what your character should do") as error:
        ui.turns.send(played, "  ")
    assert error.value.title == "Invalid instruction"
    with pytest.raises(gr.Error, match="This game plays Qiqi"):
        ui.turns.send(played, "Character: Sosuke; Motion: run; Background: day town.")
    with pytest.raises(gr.Error, match="Motion is too long"):
        ui.turns.send(played, "x" * 200)
    assert len(played.session.turns) == 2


def test_chips_change_one_part_of_the_command(ui):
    session = ui.new_player().session
    assert ui.with_word(session, "run, night town", "adverb", "gently") == "gently run, night town"
    assert ui.with_word(session, "", "place", "town") == "quickly fly on broomstick, day/night town"
    assert ui.with_word(session, "??", "motion", "lie down") == "quickly lie down, day/night sky"
    with pytest.raises(gr.Error, match="control or unassigned"):
        ui.with_word(session, "", "place", "\x07")


def test_parse_reads_every_form_as_play_would(ui, two_turns):
    assert ui.turns.parse(None, "Character: Qiqi; Motion: calmly look at the sea; "
                          "Background: evening harbour.") == (
        "Qiqi", "calmly", "look at the sea", "evening", "harbour"
    )
    played = two_turns[1].player  # its last turn: slowly walk along the street, evening town
    assert ui.turns.parse(played, "sit on railing") == (
        "Qiqi", "quickly", "sit on railing", "evening", "town"
    )
    with pytest.raises(gr.Error) as error:
        ui.turns.parse(None, "Character: Qiqi; Mood: happy; Motion: run")
    message = error.value.message
    assert message.startswith("Invalid instruction: Could not read the instruction. Type e.g.")
    assert message.count("Could not read") == 1 and "&#" not in message
    assert "'quickly fly on broomstick, day sky'" in message
    with pytest.raises(gr.Error, match="This game plays Qiqi"):
        ui.turns.parse(None, "Character: Sosuke; Motion: run")


# Save, load, playthrough ------------------------------------------------------------------------


def test_save_and_load_round_trip(ui, two_turns):
    _, second = two_turns
    path = Path(ui.saves.save(second.player))
    assert path.suffix == ".zip" and path.is_file()
    fresh = ui.new_player()
    loaded = ui.saves.load(fresh, str(path))
    session = loaded.player.session
    original = second.player.session
    assert [dataclasses.replace(t, clip_path="") for t in session.turns] == [
        dataclasses.replace(t, clip_path="") for t in original.turns
    ]
    assert all(
        torch.equal(a, b)
        for a, b in zip(session.representations, original.representations, strict=True)
    )
    assert session.session_id != second.player.session.session_id
    assert all(Path(t.clip_path).is_file() for t in session.turns)
    assert loaded.fields == second.fields
    assert loaded.screen.summary["turns"] == 2
    assert [c for _, c in loaded.screen.gallery] == [c for _, c in second.screen.gallery]


def test_load_rejects_a_bad_file_and_keeps_the_game(ui, two_turns, tmp_path):
    _, second = two_turns
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"not a zip")
    with pytest.raises(gr.Error, match="not a saved game"):
        ui.saves.load(second.player, str(bad))
    with pytest.raises(gr.Error, match="Choose a saved game"):
        ui.saves.load(second.player, None)
    assert len(second.player.session.turns) == 2
    assert all(Path(t.clip_path).is_file() for t in second.player.session.turns)


def test_load_refuses_a_game_of_other_models(ui, two_turns, tmp_path):
    """A game saved on the real engine (1920-wide representations) cannot continue on the
    preview models (64), and the reverse."""
    _, second = two_turns
    session = second.player.session
    wide = dataclasses.replace(
        session, representations=tuple(torch.randn(226, 1920) for _ in session.representations)
    )
    path = save_game(wide, tmp_path / "real.zip")
    with pytest.raises(gr.Error, match="saved with other models"):
        ui.saves.load(second.player, str(path))
    assert ui.engine.representation_dim == 64


def test_save_and_playthrough_need_a_turn(ui):
    with pytest.raises(gr.Error, match="nothing to save"):
        ui.saves.save(None)
    with pytest.raises(gr.Error, match="no clip yet"):
        ui.saves.playthrough(ui.new_player())


def test_playthrough_concatenates_every_clip(ui, two_turns):
    _, second = two_turns
    out = ui.saves.playthrough(second.player)
    clips = [t.clip_path for t in second.player.session.turns]
    assert frame_count(out) == sum(frame_count(c) for c in clips)


def test_concat_mp4_scales_other_sizes_and_reports_bad_clips(tmp_path):
    def write(path: Path, size: tuple[int, int], count: int, value: int) -> Path:
        writer = imageio_ffmpeg.write_frames(str(path), size, fps=8, codec="libx264")
        writer.send(None)
        for _ in range(count):
            writer.send(np.full((size[1], size[0], 3), value, np.uint8))
        writer.close()
        return path

    small = write(tmp_path / "a.mp4", (96, 64), 5, 40)
    large = write(tmp_path / "b.mp4", (192, 128), 3, 200)
    out = concat_mp4([small, large], tmp_path / "out.mp4")
    frames = imageio_ffmpeg.read_frames(str(out))
    meta = next(frames)
    values = [np.frombuffer(f, np.uint8).mean() for f in frames]
    assert tuple(meta["size"]) == (96, 64) and meta["fps"] == 8
    assert len(values) == 8
    assert all(abs(v - 40) < 8 for v in values[:5]) and all(abs(v - 200) < 8 for v in values[5:])
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"nope")
    with pytest.raises(PlaythroughError, match="Could not put the clips together"):
        concat_mp4([small, broken], tmp_path / "bad.mp4")
    assert not (tmp_path / "bad.mp4").exists()
    with pytest.raises(PlaythroughError, match="Missing clips"):
        concat_mp4([tmp_path / "gone.mp4"], tmp_path / "bad.mp4")
    with pytest.raises(PlaythroughError, match="no clips"):
        concat_mp4([], tmp_path / "bad.mp4")


# Cleanup ----------------------------------------------------------------------------------------


def test_ended_browser_session_deletes_the_players_files(ui):
    earlier = ui.turns.play(None, QIQI, "", "7").player
    kept = Path(earlier.session.turns[-1].clip_path).parent
    played = ui.turns.play(ui.games.restart(earlier).player, QIQI, "", "6").player
    saved = Path(ui.saves.save(played))
    folder = Path(played.session.turns[-1].clip_path).parent
    assert kept.is_dir()
    discard_game_files(GameSlot(ui.root, played))
    assert not folder.exists() and not saved.exists() and not kept.exists()
    assert not (ui.root / PLAYERS_FOLDER / played.player_id).exists()
    discard_game_files(None)
    discard_game_files(GameSlot(ui.root))


def test_sweep_removes_only_stale_folders(ui):
    stale = ui.root / "stale-session"
    fresh = ui.root / "fresh-session"
    stale.mkdir()
    fresh.mkdir()
    old = time.time() - 10_000
    os.utime(stale, (old, old))
    assert ui.files.sweep(5_000) >= 1
    assert not stale.exists() and fresh.exists()


# Invalid and hostile input ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({**QIQI, "motion": ""}, "Motion is empty"),
        ({**QIQI, "motion": "x" * 10_000}, "Motion is too long"),
        ({**QIQI, "place": "sky\x07"}, "control or unassigned character"),
        ({**QIQI, "adverb": None}, "Adverb is empty"),
        ({**QIQI, "character": "Sosuke"}, "This game plays Qiqi"),
    ],
)
def test_invalid_instructions_are_refused(ui, fields, message):
    player = ui.new_player()
    with pytest.raises(gr.Error, match=message):
        ui.turns.play(player, fields, "", "random")
    assert player.session.turns == ()


def test_hostile_text_is_refused_or_escaped(ui):
    assert ui.turns.parse(None, "<script>alert(1)</script>")[2] == "scriptalert(1)/script"
    update = ui.turns.play(
        None,
        {**QIQI, "motion": 'wave <img src=x onerror="alert(1)"> & smile', "place": "sky 🌸"},
        "",
        "random",
    )
    instruction = update.player.session.turns[-1].instruction
    assert instruction.motion == 'wave img src=x onerror="alert(1)" & smile'
    assert instruction.place == "sky 🌸"
    user_message = update.screen.chat[0]["content"]
    assert "<" not in user_message and "&amp; smile" in user_message
    assert "&quot;alert(1)&quot;" in user_message and "🌸" in user_message
    assert "<img" not in json.dumps(update.screen.summary)


@pytest.mark.parametrize("seed", ["-1", "abc", "1e3", str(2**63), 7.0])
def test_invalid_seeds_are_refused(ui, seed):
    player = ui.new_player()
    with pytest.raises(gr.Error) as error:
        ui.turns.play(player, QIQI, "", seed)
    assert error.value.message.startswith("Invalid seed: The seed must be a whole number")
    assert error.value.title == "Invalid seed" and player.session.turns == ()


def test_gpu_duration_follows_the_steps():
    assert gpu_seconds(50) > gpu_seconds(8) > 0
    assert gpu_seconds(10_000) == 300


# Engine failures ---------------------------------------------------------------------------------


class FailingEngine:
    kind = EngineKind.REAL
    notice = ""
    num_inference_steps = 50
    live_preview = False

    def __init__(self, error: BaseException, output_dir: Path) -> None:
        self.error = error
        self.clips = ClipStore(output_dir)

    def casting(self, character: str) -> Casting:
        return Casting(character, EngineKind.REAL, "models", "converted", "GPU")

    def vocabulary_for(self, character: str) -> ClosedVocabulary | None:
        return None

    placement = CPU_PLACEMENT

    def play(
        self, session, instruction, seed=None, progress=None, num_inference_steps=None,
        on_preview=None,
    ):
        if progress is not None:
            progress(0.0, "Predicting the next game state")
        raise self.error

    def play_batch(self, requests, num_inference_steps=None):
        outcomes = []
        for request in requests:
            try:
                outcomes.append(self.play(request.session, request.instruction, request.seed,
                                          request.progress, num_inference_steps))
            except Exception as error:
                outcomes.append(error)
        return outcomes


@pytest.mark.parametrize(
    ("error", "title", "message"),
    [
        (EngineError("decoder produced NaNs"), "Turn failed", "decoder produced NaNs"),
        (torch.OutOfMemoryError("CUDA out of memory"), "Out of memory", "ran out of memory"),
        (TimeoutError("GPU task aborted"), "Time-out", "ran out of time"),
        (RuntimeError("boom <b>"), "Turn failed", "RuntimeError"),
        (gr.Error("ZeroGPU quota exceeded"), "Error", "ZeroGPU quota exceeded"),
    ],
)
def test_engine_failures_become_messages_and_keep_the_game(
    registry, tmp_path, error, title, message
):
    ui = GameUI(FailingEngine(error, tmp_path), registry)
    player = ui.new_player()
    with pytest.raises(gr.Error, match=message) as caught:
        ui.turns.play(player, QIQI, "", "1")
    assert caught.value.title == title
    assert "<b>" not in caught.value.message
    assert player.session.turns == ()
    assert list(tmp_path.rglob("*.mp4")) == []


def test_failure_outside_the_gpu_function_is_reported(registry, tmp_path):
    def broken_runner(session, instruction, seed, progress=None, on_preview=None, withdrawn=None):
        raise ConnectionError("worker vanished")

    ui = GameUI(FailingEngine(RuntimeError(), tmp_path), registry, run_turn=broken_runner)
    with pytest.raises(gr.Error, match="ConnectionError"):
        ui.turns.play(None, QIQI, "", "1")


class UnreadableStatesEngine(FailingEngine):
    """A real engine whose game-state model wrote state tokens that could not be read."""

    def play(
        self, session, instruction, seed=None, progress=None, num_inference_steps=None,
        on_preview=None,
    ):
        return record_turn(
            session, instruction=instruction, states=GameStates(unreadable=True),
            motion_scope_value=1.0, representation=torch.zeros(226, 4), seed=seed or 0,
            clip_path=str(self.clips.root / "missing.mp4"), timings=Timings(),
        )


def test_a_real_engine_turn_with_unreadable_states_says_so(registry, tmp_path):
    ui = GameUI(UnreadableStatesEngine(RuntimeError(), tmp_path), registry)
    screen = ui.turns.play(None, QIQI, "", "3").screen
    assert ("Turn 1 played (seed 3). The game-state model's state tokens could not be read: "
            "this turn's states count as zero.") in html.unescape(screen.status)


def test_views_skip_clips_that_are_gone(registry, tmp_path):
    session = record_turn(
        Session(character="Qiqi"),
        instruction=make_instruction(QIQI),
        states=GameStates(ml=2, sc=1, et=0, st=-1),
        motion_scope_value=1.0,
        representation=torch.zeros(226, 4),
        seed=9,
        clip_path=str(tmp_path / "missing.mp4"),
        timings=Timings(),
    )
    ui = GameUI(FailingEngine(RuntimeError(), tmp_path), registry)
    screen = ui.screen(Player(session=session), "x")
    assert screen.gallery == [] and screen.clip is None
    assert screen.chat[1]["content"] == [screen.chat[1]["content"][0]]
    row = history_frame(session).iloc[0]
    shown = ["Motion level", "Stamina Δ", "Social Δ", "Entertainment Δ"]
    assert list(row[shown]) == [2, -5, 5, -5]  # applied, not raw


# Examples ---------------------------------------------------------------------------------------


def test_shipped_examples_are_valid(registry, repo_root):
    found = load_playthroughs(repo_root / "examples", registry)
    assert {name for name, items in found.items() if items} == {"Qiqi", "Sosuke"}
    for character, playthroughs in found.items():
        for playthrough in playthroughs:
            assert 3 <= len(playthrough.turns) <= 5
            assert all(turn.character == character for turn in playthrough.turns)
            assert len(playthrough.rows()) == len(playthrough.labels())


def test_broken_example_names_the_file_and_turn(registry, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(
        {"character": "Qiqi", "title": "t", "turns": [{**QIQI, "motion": ""}]}
    ))
    with pytest.raises(ExampleError, match=r"bad\.json: turn 1: Motion is empty"):
        load_playthrough(path, registry)
    path.write_text(json.dumps({"character": "Totoro", "title": "t", "turns": [QIQI]}))
    with pytest.raises(ExampleError, match="unknown character"):
        load_playthrough(path, registry)
    assert load_playthroughs(tmp_path, registry) == {"Qiqi": [], "Sosuke": []}
    path.write_text("{")
    with pytest.raises(ExampleError, match="cannot read the example"):
        load_playthroughs(tmp_path, registry)


# Order of a game's actions, files of ended games ------------------------------------------------


class SlowTurns:
    """A turn runner that holds each turn for `seconds` before playing it on the engine."""

    def __init__(self, engine, seconds: float) -> None:
        self.engine, self.seconds = engine, seconds

    def __call__(self, session, instruction, seed, progress=None, on_preview=None,
                 withdrawn=None):
        time.sleep(self.seconds)
        return self.engine.play(session, instruction, seed=seed)


@pytest.mark.parametrize("action", ["turns.undo", "games.restart"])
def test_an_action_during_a_turn_waits_for_it(engine, registry, action):
    ui = GameUI(engine, registry, run_turn=SlowTurns(engine, 0.5), delete_grace_s=0)
    slot = GameSlot(ui.root)
    turn = threading.Thread(target=lambda: slot.run(lambda p: ui.turns.play(p, QIQI, "", "9")))
    turn.start()
    time.sleep(0.1)
    controller, name = action.split(".")
    after = slot.run(getattr(getattr(ui, controller), name))
    turn.join()
    assert after.player.session.turns == () and slot.player is after.player
    played_folder = ui.root / after.player.session.session_id
    assert not played_folder.exists() or not any(played_folder.iterdir())


def test_a_failed_action_leaves_the_slot_as_it_was(ui):
    slot = GameSlot(ui.root)
    slot.run(lambda p: ui.turns.play(p, QIQI, "", "10"))
    kept = slot.player
    with pytest.raises(gr.Error, match="Motion is empty"):
        slot.run(lambda p: ui.turns.play(p, {**QIQI, "motion": ""}))
    assert slot.player is kept
    assert copy.deepcopy(slot).player is kept and copy.deepcopy(slot) is not slot


def test_a_busy_game_refuses_after_waiting(ui):
    slot = GameSlot(ui.root)
    release = threading.Event()
    holder = threading.Thread(target=lambda: slot.read(lambda p: release.wait(5)))
    holder.start()
    time.sleep(0.05)
    with pytest.raises(gr.Error, match="still busy"):
        slot.run(ui.turns.undo, wait_s=0.05)
    release.set()
    holder.join()


def test_discarded_files_stay_for_the_grace_period(tmp_path):
    now = [100.0]
    store = ClipStore(tmp_path, clock=lambda: now[0])
    folder = tmp_path / "game"
    folder.mkdir()
    (folder / "turn_0001.mp4").write_bytes(b"x")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    for path in (folder, outside, tmp_path):
        store.discard_clip(str(path), grace_s=30)
    assert folder.exists()
    now[0] += 29
    assert store.empty_trash() == 0 and folder.exists()
    now[0] += 2
    assert store.empty_trash() == 3
    assert not folder.exists() and outside.exists() and tmp_path.exists()


# Server-side limits and plain refusals ----------------------------------------------------------


def test_a_huge_character_name_is_refused_without_echoing_it(ui):
    with pytest.raises(gr.Error) as error:
        ui.games.choose_character(None, "x" * 1_000_000)
    assert len(str(error.value)) < 200


def test_a_full_disk_is_reported_as_such(engine, registry, tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    ui = GameUI(engine, registry, run_turn=make_turn_runner_failing(full))
    with pytest.raises(gr.Error, match="disk is full"):
        ui.turns.play(None, QIQI)
    played = GameUI(engine, registry).turns.play(None, QIQI, "", "13").player
    monkeypatch.setattr("animegamer.ui.saves.save_game", full)
    with pytest.raises(gr.Error, match="disk is full"):
        ui.saves.save(played)


def test_a_full_disk_under_the_clip_writer_is_reported_as_such(engine, registry, monkeypatch):
    """ffmpeg, writing the clip in a subprocess, reports a full disk as a broken pipe."""

    def broken_pipe(*args, **kwargs):
        raise OSError(errno.EPIPE, "Broken pipe")

    monkeypatch.setattr(engine.clips, "write_clip", broken_pipe)
    ui = GameUI(engine, registry)
    with pytest.raises(gr.Error, match="Turn failed: Something went wrong") as error:
        ui.turns.play(None, QIQI)
    assert error.value.title == "Turn failed"
    full = shutil.disk_usage(engine.clips.root)._replace(free=4096)
    monkeypatch.setattr("animegamer.ui.messages.shutil.disk_usage", lambda path: full)
    with pytest.raises(gr.Error, match=r"Disk full: The server.*disk is full") as error:
        ui.turns.play(None, QIQI)
    assert error.value.title == "Disk full"


def make_turn_runner_failing(failure):
    from animegamer.ui.turns import turn_errors

    def run_turn(session, instruction, seed, progress=None, on_preview=None, withdrawn=None):
        with turn_errors():
            failure()

    return run_turn


def test_a_game_stops_at_its_turn_limit_and_long_games_render_in_bounded_time(ui, engine):
    played = ui.turns.play(None, QIQI, "", "14").player
    turn = played.session.turns[-1]
    session = played.session
    representation = session.representations[-1]
    while len(session.turns) < MAX_GAME_TURNS:
        session = record_turn(
            session, instruction=turn.instruction, states=turn.states,
            motion_scope_value=turn.motion_scope, representation=representation,
            seed=turn.seed, clip_path=turn.clip_path, timings=turn.timings,
        )
    full = dataclasses.replace(played, session=session)
    with pytest.raises(gr.Error, match=f"reached {MAX_GAME_TURNS} turns"):
        ui.turns.play(full, QIQI)
    started = time.perf_counter()
    screen = ui.start(full).screen
    assert time.perf_counter() - started < 1.0
    assert len(screen.chat) == 2 * CHAT_TURNS + 1
    assert f"{MAX_GAME_TURNS - CHAT_TURNS} earlier turns" in screen.chat[0]["content"]
    assert len(screen.history) == HISTORY_ROWS and screen.history["Turn"].iloc[-1] == 1000
    assert len(screen.gallery) == GALLERY_CLIPS
    assert screen.summary["turns"] == MAX_GAME_TURNS


def test_a_refused_load_leaves_no_folder_behind(ui, tmp_path):
    before = set(ui.root.iterdir())
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"not a zip")
    with pytest.raises(gr.Error, match="not a zip"):
        ui.saves.load(None, str(bad))
    assert set(ui.root.iterdir()) == before


# A closed vocabulary (the Nano world's words on the preview models) -----------------------------


@pytest.fixture(scope="module")
def closed_ui(engine, registry):
    """The preview engine's models behind the Nano world's closed vocabulary."""
    closed = copy.copy(engine)
    closed.vocabulary = closed_vocabulary()
    return GameUI(closed, registry, delete_grace_s=0)


def files_under(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*") if path.is_file())


UNKNOWN = [
    ("quikly run, day town", None, "'quikly' (closest chip: Adverb 'quickly')"),
    ("quickly jumpp, day town", None, "'jumpp' (closest chip: Motion 'jump')"),
    ("", {**QIQI, "time": "nigth"}, "nigth is not known (closest chip: night)"),
    ("Character: Qiqi; Motion: quickly run; Background: day harbur.", None,
     "'harbur' (closest chip: Place 'harbour')"),
    ("Qiqi eats a big cake", None, "Not known: 'eats' (closest chip: "),
]


@pytest.mark.parametrize(("text", "fields", "message"), UNKNOWN)
def test_unknown_words_are_refused_before_a_turn_and_change_nothing(
    closed_ui, text, fields, message
):
    slot = GameSlot(closed_ui.root)
    slot.run(lambda p: closed_ui.turns.play(p, QIQI, "", "5"))
    kept, files = slot.player, files_under(closed_ui.root)
    actions = [lambda p: closed_ui.turns.play(p, fields or QIQI, text, "6")]
    if fields is None:
        actions += [lambda p: closed_ui.turns.send(p, text),
                    lambda p: closed_ui.turns.parse(p, text)]
    for action in actions:
        with pytest.raises(gr.Error) as error:
            slot.run(action)
        assert error.value.title == "Invalid instruction"
        assert error.value.message.startswith(
            "Invalid instruction: The Nano world knows only the words on the chips"
        )
        assert message in error.value.message and "&#" not in error.value.message
    assert slot.player is kept and kept.session.turns[-1].seed == 5
    assert files_under(closed_ui.root) == files


@pytest.mark.parametrize(
    ("text", "motion"),
    [("happily jump, evening harbour", "jump"),
     ("Qiqi flies on broomstick, night sky", "fly on broomstick"),
     ("Character: Qiqi; Motion: slowly walk along the street; Background: day seaside town.",
      "walk"),
     ("Qiqi wants to go for a walk in the town", "walk")],
)
def test_known_words_play_in_the_short_and_the_long_form(closed_ui, text, motion):
    sent = closed_ui.turns.send(None, text)
    assert sent.fields[2] == motion
    update = closed_ui.turns.play(None, QIQI, text, "3")
    assert update.player.session.turns[-1].instruction.motion == motion
    assert update.fields == sent.fields


def test_the_closed_world_starts_from_its_own_words(closed_ui):
    expected = ("Qiqi", "quickly", "fly on broomstick", "day", "sky")
    assert tuple(closed_ui.default_instruction("Qiqi").fields().values()) == expected
    assert closed_ui.default_command(closed_ui.new_player().session) == (
        "quickly fly on broomstick, day sky"
    )
