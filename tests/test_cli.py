"""`python -m animegamer play` on the preview engine."""

from __future__ import annotations

import dataclasses

from animegamer.__main__ import main
from animegamer.characters.hub import HubError
from animegamer.characters.registry import load_registry
from animegamer.game.save_reading import load_game
from animegamer.play import describe

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
    clips = tmp_path / "clips"
    assert sorted(path.name for path in clips.iterdir()) == ["turn_0001_11.mp4", "turn_0002_12.mp4"]
    assert f"clip {clips / 'turn_0002_12.mp4'} (" in out  # where it is, not where it was made


def test_unreadable_instruction_is_one_line_and_exit_two(tmp_path, capsys):
    code = main(["play", "--engine", "preview", FIRST, "Character: Qiqi; Mood: happy; Motion: run",
                 "--out", str(tmp_path)])
    last = capsys.readouterr().err.splitlines()[-1]  # after the models' loading bars
    assert code == 2
    assert last.startswith("error: instruction 2: Could not read the instruction. Type e.g.")
    assert not list(tmp_path.rglob("*.mp4"))  # the first, readable, instruction did not play


def test_the_cli_reads_the_command_lines_forms_and_refuses_other_characters(tmp_path, capsys):
    code = main(["play", "--engine", "preview", "--steps", "1", "--out", str(tmp_path),
                 "Qiqi flies, night town", "gently sit on railing",
                 "Character: Qiqi; Motion: happily jump"])
    out = capsys.readouterr().out
    assert code == 0
    assert "turn 1: Character: Qiqi; Motion: quickly fly; Background: night town." in out
    assert "turn 2: Character: Qiqi; Motion: gently sit on railing; Background: night town." in out
    assert "turn 3: Character: Qiqi; Motion: happily jump; Background: night town." in out
    code = main(["play", "--engine", "preview", "--out", str(tmp_path / "other"),
                 "Character: Sosuke; Motion: quickly run"])
    assert code == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith(
        "error: instruction 1: This game plays Qiqi"
    )


def test_the_nano_world_refuses_unknown_words_before_any_turn(tmp_path, capsys):
    out = tmp_path / "clips"
    code = main(["play", "--engine", "nano", "--steps", "1", "--out", str(out),
                 "happily jump, evening harbour", "Qiqi eats a big cake at the beach"])
    err = capsys.readouterr().err.splitlines()[-1]
    assert code == 2
    assert err.startswith("error: instruction 2: The Nano world knows only the words on the chips")
    assert "Not known: 'eats' (closest chip: " in err and "'cake' (closest chip: " in err
    assert not list(tmp_path.rglob("*.mp4"))
    code = main(["play", "--engine", "nano", "--steps", "1", "--out", str(out),
                 "happily jump, evening harbour",
                 "Character: Qiqi; Motion: slowly walk; Background: night town."])
    assert code == 0
    assert "Motion: happily jump; Background: evening harbour." in capsys.readouterr().out
    assert len(list(out.rglob("*.mp4"))) == 2


def test_unknown_character_is_refused(tmp_path, capsys):
    code = main(["play", "--engine", "preview", "--character", "Totoro", FIRST,
                 "--out", str(tmp_path)])
    assert code == 2
    assert "unknown character 'Totoro'" in capsys.readouterr().err


def test_checkpoint_errors_are_one_line_and_exit_two(tmp_path, capsys, monkeypatch):
    def unreachable(character, *args, **kwargs):
        raise HubError(f"{character.name}: the Hub cannot be reached")

    monkeypatch.setattr("animegamer.serving.casting.resolve_character", unreachable)
    code = main(["play", "--engine", "real", FIRST, "--out", str(tmp_path)])
    assert code == 2
    assert capsys.readouterr().err == (
        "error: no character can be played here: Qiqi: unavailable (Qiqi: the Hub cannot be "
        "reached)\n"
    )


def test_a_turn_whose_states_could_not_be_read_says_so():
    from animegamer.game.rules import GameStates, Gauges, Timings, Turn, make_instruction

    instruction = make_instruction({"character": "Qiqi", "adverb": "gently", "motion": "walk",
                                    "time": "day", "place": "town"})
    turn = Turn(1, instruction, GameStates(unreadable=True), 0, 0.0, Gauges(), 1, "c.mp4",
                Timings())
    assert describe(turn).endswith("note: The game-state model's state tokens could not be "
                                   "read: this turn's states count as zero.")
    assert "note:" not in describe(dataclasses.replace(turn, states=GameStates()))
    assert "note:" not in describe(turn, with_note=False)  # the preview engine's notice says it
