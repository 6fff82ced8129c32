"""The command line, the chips' words and the story's words: pure functions, no models."""

from __future__ import annotations

import dataclasses
import sys
import types

import pytest
import torch
from conftest import QIQI_FIELDS

from animegamer.characters import load_registry
from animegamer.game import (
    GameStates,
    Gauges,
    InstructionError,
    Session,
    Timings,
    make_instruction,
    record_turn,
)
from animegamer.ui.callbacks import in_vocabulary
from animegamer.ui.command import CommandContext, format_command, read_command, with_word
from animegamer.ui.story import (
    eta_seconds,
    motion_words,
    nudges,
    progress_text,
    stage_text,
    third_person,
    turn_sentence,
)
from animegamer.ui.views import banner_html, chat_messages, gauges_html, history_frame
from animegamer.ui.vocabulary import NANO_MODULE, registry_vocabulary, vocabulary_for

QIQI = make_instruction({**QIQI_FIELDS, "time": "day/night"})
CONTEXT = CommandContext(fallback=QIQI, adverbs=("gently", "fast"), times=("day", "night"))


@dataclasses.dataclass
class Kind:
    kind: str


@pytest.fixture(scope="module")
def registry():
    return load_registry()


# The command line --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("run", ("quickly", "run", "day/night", "sky")),
        ("fast run, night town", ("fast", "run", "night", "town")),
        ("slowly walk along the street · evening harbour", ("slowly", "walk along the street",
                                                           "evening", "harbour")),
        ("walk, seaside town", ("quickly", "walk", "day/night", "seaside town")),
        ("gently sit on railing, night", ("gently", "sit on railing", "night", "sky")),
        ("gently sit on railing; seaside town", ("gently", "sit on railing", "day/night",
                                                 "seaside town")),
        ("fly", ("quickly", "fly", "day/night", "sky")),
        ("Character: Qiqi; Motion: run; Background: day town.", ("quickly", "run", "day", "town")),
        ("character: Qiqi; motion: happily jump", ("happily", "jump", "day/night", "sky")),
    ],
)
def test_a_command_fills_its_gaps_from_the_game(command, expected):
    instruction = read_command(command, CONTEXT)
    assert (instruction.adverb, instruction.motion, instruction.time, instruction.place) == expected
    assert instruction.character == "Qiqi"


def test_a_command_may_name_the_character_and_is_normalised():
    instruction = read_command("Character: Sosuke; Motion: <b>wave</b>  hand", CONTEXT)
    assert instruction.character == "Sosuke" and instruction.motion == "bwave/b hand"


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("", "Type what your character should do"),
        ("   ", "Type what your character should do"),
        (", day sky", "Motion is empty"),
        ("x" * 601, "too long"),
        ("x" * 200, "Motion is too long"),
        ("run, day sky\x07", "control or unassigned"),
        ("Character: Qiqi; Mood: happy; Motion: run", "Could not read the instruction"),
    ],
)
def test_a_bad_command_says_what_is_wrong(command, message):
    with pytest.raises(InstructionError, match=message):
        read_command(command, CONTEXT)


def test_format_and_read_round_trip_and_chips_change_one_part():
    instruction = make_instruction(
        {**QIQI_FIELDS, "adverb": "gently", "motion": "sit on railing", "place": "town"}
    )
    assert format_command(instruction) == "gently sit on railing, day town"
    assert read_command(format_command(instruction), CONTEXT) == instruction
    assert with_word("run, night town", "motion", "lie down", CONTEXT) == (
        "quickly lie down, night town"
    )
    assert with_word("", "time", "night", CONTEXT) == "quickly fly on broomstick, night sky"
    assert with_word("x" * 700, "adverb", "gently", CONTEXT) == (
        "gently fly on broomstick, day/night sky"
    )


# The chips' words --------------------------------------------------------------------------------


def test_registry_words_come_from_defaults_then_examples(registry):
    qiqi = registry.get("Qiqi")
    words = registry_vocabulary(qiqi)
    assert words["adverbs"] == ["quickly", "smoothly", "gently"]
    assert words["motions"][0] == "fly on broomstick" and "lie down" in words["motions"]
    assert words["times"] == ["day/night", "day", "night"]
    assert vocabulary_for(qiqi, Kind("preview")) == words == vocabulary_for(qiqi, Kind("real"))


def test_the_nano_world_offers_exactly_its_words(registry, monkeypatch):
    fake = types.ModuleType(NANO_MODULE)
    fake.NANO_VOCABULARY = {  # type: ignore[attr-defined]
        "motions": ("walk", "run"), "adverbs": ("slowly",), "times": ("dawn",), "places": (),
    }
    monkeypatch.setitem(sys.modules, NANO_MODULE, fake)
    qiqi = registry.get("Qiqi")
    words = vocabulary_for(qiqi, Kind("nano"))
    assert words["motions"] == ["walk", "run"] and words["adverbs"] == ["slowly"]
    assert words["times"] == ["dawn"]
    assert words["places"] == registry_vocabulary(qiqi)["places"]  # empty: the registry's
    fake.MOTIONS = (  # type: ignore[attr-defined]
        types.SimpleNamespace(name="run", allows=lambda name: name == "Qiqi"),
    )
    assert vocabulary_for(registry.get("Sosuke"), Kind("nano"))["motions"] == ["walk"]
    assert vocabulary_for(qiqi, Kind("nano"))["motions"] == ["walk", "run"]
    monkeypatch.setitem(sys.modules, NANO_MODULE, None)  # the module is missing
    assert vocabulary_for(qiqi, Kind("nano")) == registry_vocabulary(qiqi)


# The story's words -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "expected"),
    [("fly", "flies"), ("run", "runs"), ("watch", "watches"), ("go", "goes"), ("play", "plays"),
     ("have", "has"), ("lie", "lies"), ("kiss", "kisses")],
)
def test_third_person(verb, expected):
    assert third_person(verb) == expected


def test_a_turn_is_a_sentence_about_the_character():
    assert turn_sentence("Qiqi", QIQI, GameStates(ml=4, st=-1)) == (
        "Qiqi quickly flies on broomstick (day/night, sky) — getting tired."
    )
    assert turn_sentence("Qiqi", QIQI, GameStates(et=1)).endswith("— having fun.")
    assert turn_sentence("Qiqi", QIQI, GameStates()).endswith("(day/night, sky).")
    assert motion_words(1) == "still (1/5)" and motion_words(5) == "wild (5/5)"


def test_nudges_at_low_and_high_gauges():
    assert nudges("Qiqi", Gauges(stamina=20, social=21, entertainment=90)) == [
        "Qiqi needs rest: try sitting or lying down.",
        "Qiqi is having a great time.",
    ]
    assert nudges("Qiqi", Gauges()) == []


def test_eta_is_the_median_of_recent_turns_and_stages_read_as_a_game():
    assert eta_seconds([]) is None
    assert eta_seconds([100.0, 1.0, 2.0, 3.0, 4.0, 50.0]) == 3.0
    assert stage_text("Predicting the next game state") == "Imagining the next moment…"
    assert stage_text("Denoising step 12/50") == "Drawing the clip, step 12/50"
    assert stage_text("Something new") == "Something new"
    assert progress_text("Denoising step 5/10", 0.5, 20.0) == (
        "Drawing the clip, step 5/10 · about 10 s left"
    )
    assert progress_text("Writing the clip", 0.97, None) == "Saving the clip…"


def turn_with(session: Session, states: GameStates) -> Session:
    return record_turn(
        session, instruction=QIQI, states=states, motion_scope_value=1.0,
        representation=torch.zeros(226, 4), seed=1, clip_path="", timings=Timings(total_s=2.0),
    )


def test_the_story_shows_the_applied_changes_that_the_gauges_show():
    """At 3 stamina a −1 prediction (−5) can only take 3: the chip, the gauge and the history
    all say −3."""
    session = Session(character="Qiqi")
    for _ in range(9):
        session = turn_with(session, GameStates(st=-1, sc=1, et=1))
    session = dataclasses.replace(
        session,
        turns=(*session.turns[:-1], dataclasses.replace(
            session.turns[-1], gauges=Gauges(stamina=3, social=95, entertainment=100)
        )),
    )
    session = turn_with(session, GameStates(ml=5, st=-1, sc=1, et=1))
    assert session.gauges == Gauges(stamina=0, social=100, entertainment=100)
    answer = chat_messages(session, "Qiqi")[-1]["content"][0]
    assert "Stamina −3" in answer and "Social +5" in answer and "Entertainment ±0" in answer
    assert "motion wild (5/5)" in answer and "Qiqi needs rest" in answer
    assert 'ag-change ag-down">−3' in gauges_html(session)
    assert list(history_frame(session).iloc[-1])[3:6] == [-3, 5, 0]
    earlier = chat_messages(session, "Qiqi")[-3]["content"][0]
    assert "needs rest" not in earlier  # nudges only on the newest turn


def test_player_words_are_escaped_in_the_story():
    instruction = make_instruction({**QIQI_FIELDS, "motion": "wave & <smile>"})
    session = record_turn(
        Session(character="Qiqi"), instruction=instruction, states=GameStates(),
        motion_scope_value=1.0, representation=torch.zeros(226, 4), seed=1, clip_path="",
        timings=Timings(),
    )
    user, answer = chat_messages(session, "Qiqi")
    assert user["content"] == "quickly wave &amp; smile, day sky"
    assert "Qiqi quickly waves &amp; smile" in answer["content"][0]


def test_the_banner_names_the_world():
    assert banner_html("real", "") == ""
    nano = banner_html("nano", "Trained <here>.")
    assert "Playing the Nano world: a small anime world trained on a CPU" in nano
    assert "Trained &lt;here&gt;." in nano
    assert "Preview engine" in banner_html("preview", "x")


def test_defaults_the_chips_do_not_offer_become_a_word_they_do():
    words = {"adverbs": ["slowly"], "motions": ["fly on broomstick"], "times": ["morning", "day"],
             "places": []}
    assert in_vocabulary(QIQI, words) == dataclasses.replace(QIQI, time="day")
    assert in_vocabulary(QIQI, registry_vocabulary(load_registry().get("Qiqi"))) == QIQI
