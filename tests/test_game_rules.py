"""Game rules: gauge arithmetic, motion scope, instruction validation, undo/restart."""

from __future__ import annotations

import pickle

import pytest
import torch
from conftest import QIQI_FIELDS

from animegamer.game.rules import (
    MAX_SEED,
    GameStates,
    Gauges,
    InstructionError,
    SeedError,
    Session,
    Timings,
    apply_states,
    check_seed,
    effective_motion_level,
    make_instruction,
    new_session,
    parse_seed,
    record_turn,
    restart,
    undo,
)

DEMO_TABLE = (0.5, 1.0, 5.0, 20.0, 40.0)
QIQI = QIQI_FIELDS


@pytest.mark.parametrize(
    ("before", "states", "after"),
    [
        # stamina follows 5·ST with no idle decay; social/entertainment decay by 5 when Δ = 0
        (Gauges(50, 50, 50), GameStates(3, 0, 0, 0), Gauges(50, 45, 45)),
        (Gauges(50, 50, 50), GameStates(3, 1, 2, -1), Gauges(45, 55, 60)),
        (Gauges(50, 50, 50), GameStates(1, -5, 5, 5), Gauges(75, 25, 75)),
        (Gauges(98, 3, 97), GameStates(2, -1, 1, 1), Gauges(100, 0, 100)),
        (Gauges(2, 4, 0), GameStates(5, 0, 0, -5), Gauges(0, 0, 0)),
        (Gauges(0, 100, 100), GameStates(4, 5, 5, 5), Gauges(25, 100, 100)),
        (Gauges(100, 0, 0), GameStates(0, 0, 0, 0), Gauges(100, 0, 0)),
    ],
)
def test_gauges_follow_five_times_delta_clamped(before, states, after):
    assert apply_states(before, states) == after


def test_gauges_start_at_fifty():
    assert new_session("Qiqi").gauges == Gauges(50, 50, 50)


@pytest.mark.parametrize(("ml", "level"), [(1, 1), (2, 2), (3, 3), (4, 4), (5, 5)])
def test_predicted_motion_level_is_played(ml, level):
    assert effective_motion_level(ml) == level


@pytest.mark.parametrize("ml", [0, -1, 6, 99])
def test_unparsable_motion_level_plays_as_level_three(ml):
    assert effective_motion_level(ml) == 3


def test_instruction_text_is_the_trained_sentence():
    instruction = make_instruction(QIQI)
    assert instruction.text == (
        "Character: Qiqi; Motion: quickly fly on broomstick; Background: day sky."
    )


def test_fields_are_whitespace_normalised_and_stripped_of_angle_brackets():
    instruction = make_instruction(
        {**QIQI, "motion": "  fly \t on\n broomstick ", "place": "<TURN>sky<Strength_5>"}
    )
    assert instruction.motion == "fly on broomstick"
    assert instruction.place == "TURNskyStrength_5"
    assert "<" not in instruction.text and ">" not in instruction.text


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("character", "", "Character is empty"),
        ("adverb", "   ", "Adverb is empty"),
        ("motion", None, "Motion is empty"),
        ("place", "<>", "Place is empty"),
        ("time", "x" * 81, "Time is too long"),
        ("motion", "y" * 10_000, "Motion is too long"),
        ("place", "sky\x00", "control"),
        ("place", "sky\x1b[31m", "control"),
        ("character", 42, "must be text"),
    ],
)
def test_invalid_fields_are_rejected_with_the_field_named(field, value, message):
    with pytest.raises(InstructionError, match=message):
        make_instruction({**QIQI, field: value})


def test_emoji_and_non_latin_text_are_accepted_as_text():
    instruction = make_instruction({**QIQI, "place": "sky 🌙", "character": "琪琪"})
    assert instruction.place == "sky 🌙"
    assert instruction.character == "琪琪"


def _play(session: Session, states: GameStates, value: float) -> Session:
    return record_turn(
        session,
        instruction=make_instruction(QIQI),
        states=states,
        motion_scope_value=DEMO_TABLE[effective_motion_level(states.ml) - 1],
        representation=torch.full((226, 8), value),
        seed=7,
        clip_path=f"clip_{value}.mp4",
        timings=Timings(1.0, 2.0, 3.0),
    )


def test_record_turn_keeps_only_the_window_and_never_mutates():
    session = new_session("Qiqi", window=3)
    played = session
    for value in range(6):
        previous = played
        played = _play(played, GameStates(2, 1, 1, -1), float(value))
        assert len(previous.turns) == value
    assert session.turns == () and session.representations == ()
    assert [turn.index for turn in played.turns] == [1, 2, 3, 4, 5, 6]
    assert [float(rep[0, 0]) for rep in played.representations] == [3.0, 4.0, 5.0]
    assert [float(rep[0, 0]) for rep in played.history_representations] == [4.0, 5.0]
    assert [turn.index for turn in played.history_turns] == [5, 6]


def test_window_one_has_no_history():
    played = _play(_play(new_session("Qiqi"), GameStates(3, 0, 0, 0), 1.0),
                   GameStates(3, 0, 0, 0), 2.0)
    assert played.history_representations == ()
    assert played.history_turns == ()
    assert len(played.representations) == 1


def test_undo_restores_gauges_and_window():
    session = new_session("Qiqi", window=2)
    one = _play(session, GameStates(2, 1, 0, 1), 1.0)
    two = _play(one, GameStates(5, -3, 4, -5), 2.0)
    back = undo(two)
    assert back == one
    assert back.gauges == one.gauges
    assert [float(r[0, 0]) for r in back.history_representations] == [1.0]
    assert undo(back).gauges == Gauges()


def test_undo_without_turns_is_an_error():
    with pytest.raises(InstructionError, match="no turn to undo"):
        undo(new_session("Qiqi"))


def test_restart_resets_everything_but_character_and_window():
    played = _play(new_session("Sosuke", window=2), GameStates(1, 2, 3, 4), 1.0)
    fresh = restart(played)
    assert (fresh.character, fresh.window, fresh.turns, fresh.gauges) == (
        "Sosuke", 2, (), Gauges())
    assert fresh.session_id != played.session_id


def test_window_bounds():
    with pytest.raises(ValueError, match="window"):
        new_session("Qiqi", window=0)
    with pytest.raises(ValueError, match="window"):
        new_session("Qiqi", window=6)


def test_sessions_pickle_round_trip():
    played = _play(new_session("Qiqi", window=2), GameStates(2, 1, 1, 1), 1.0)
    assert pickle.loads(pickle.dumps(played)) == played


@pytest.mark.parametrize(
    ("text", "seed"),
    [("", None), (" Random ", None), (None, None), ("0", 0), ("42", 42), (str(MAX_SEED), MAX_SEED),
     (7, 7)],
)
def test_seeds_typed_by_a_player(text, seed):
    assert parse_seed(text) == seed


@pytest.mark.parametrize("text", ["-1", str(MAX_SEED + 1), "1.5", "abc", "9" * 40, "1e3"])
def test_bad_seeds_are_refused(text):
    with pytest.raises(SeedError, match="whole number from 0 to"):
        parse_seed(text)


def test_seed_bounds_are_the_same_for_every_caller():
    assert check_seed(MAX_SEED) == MAX_SEED
    for bad in (-1, MAX_SEED + 1, True, 1.0):
        with pytest.raises(SeedError):
            check_seed(bad)
