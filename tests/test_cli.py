"""`python -m animegamer play` on the preview engine."""

from __future__ import annotations

import dataclasses

from animegamer.__main__ import describe, main
from animegamer.characters import load_registry
from animegamer.hub import HubError
from animegamer.savefile import load_game

FIRST = "Character: Qiqi; Motion: quickly fly on broomstick; Background: day sky."
SECOND = "Character: Qiqi; Motion: gently sit on railing; Background: day town."


def test_play_prints_each_turn_and_saves_the_game(tmp_path, capsys):
    code = main(["play", "--engine", "preview", "--steps", "1", "--seed", "11", FIRST, SECOND,
                 "--out", str(tmp_path / "clips"), "--save", str(tmp_path / "game.zip")])
    out = capsys.readouterr().out
    assert code == 0
    assert "Qiqi: tiny untrained models (preview, CPU)" in out
    assert "turn 1: " + FIRST in out and "turn 2: " + SECOND in out
    assert "seed 11" in out and "seed 12" in out
    names = set(load_registry().names)
    loaded = load_game(tmp_path / "game.zip", tmp_path / "loaded", names)
    assert [turn.instruction.text for turn in loaded.turns] == [FIRST, SECOND]
    assert len(list((tmp_path / "clips").rglob("*.mp4"))) == 2


def test_unreadable_instruction_is_one_line_and_exit_two(tmp_path, capsys):
    code = main(["play", "--engine", "preview", "Qiqi flies", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: Could not read the instruction")
    assert not any(tmp_path.iterdir())


def test_unknown_character_is_refused(tmp_path, capsys):
    code = main(["play", "--engine", "preview", "--character", "Totoro", FIRST,
                 "--out", str(tmp_path)])
    assert code == 2
    assert "unknown character 'Totoro'" in capsys.readouterr().err


def test_checkpoint_errors_are_one_line_and_exit_two(tmp_path, capsys, monkeypatch):
    def unreachable(character, *args, **kwargs):
        raise HubError(f"{character.name}: the Hub cannot be reached")

    monkeypatch.setattr("animegamer.engine.resolve_character", unreachable)
    code = main(["play", "--engine", "real", FIRST, "--out", str(tmp_path)])
    assert code == 2
    assert capsys.readouterr().err == (
        "error: no character can be played here: Qiqi: unavailable (Qiqi: the Hub cannot be "
        "reached)\n"
    )


def test_a_turn_whose_states_could_not_be_read_says_so():
    from animegamer.game import GameStates, Gauges, Timings, Turn, make_instruction

    instruction = make_instruction({"character": "Qiqi", "adverb": "gently", "motion": "walk",
                                    "time": "day", "place": "town"})
    turn = Turn(1, instruction, GameStates(unreadable=True), 0, 0.0, Gauges(), 1, "c.mp4",
                Timings())
    assert describe(turn).endswith("note: The game-state model's state tokens could not be "
                                   "read: this turn's states count as zero.")
    assert "note:" not in describe(dataclasses.replace(turn, states=GameStates()))
