"""The chips' words and the story's words: pure functions, no models."""

from __future__ import annotations

import dataclasses
import html
import re

import pytest
import torch
from conftest import QIQI_FIELDS

from animegamer.characters.registry import load_registry
from animegamer.command.parser import ClosedVocabulary
from animegamer.game.rules import (
    GameStates,
    Gauges,
    Session,
    Timings,
    make_instruction,
    record_turn,
)
from animegamer.nano.vocabulary import MOTIONS, closed_vocabulary
from animegamer.serving.engine import Casting
from animegamer.serving.settings import EngineKind
from animegamer.ui.chips import registry_vocabulary, vocabulary_for
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

QIQI = make_instruction({**QIQI_FIELDS, "time": "day/night"})


@dataclasses.dataclass
class Engine:
    vocabulary: ClosedVocabulary | None

    def vocabulary_for(self, character: str) -> ClosedVocabulary | None:
        return self.vocabulary


@pytest.fixture(scope="module")
def registry():
    return load_registry()


# The chips' words --------------------------------------------------------------------------------


def test_registry_words_come_from_defaults_then_examples(registry):
    qiqi = registry.get("Qiqi")
    words = registry_vocabulary(qiqi)
    assert words["adverbs"] == ["quickly", "smoothly", "gently"]
    assert words["motions"][0] == "fly on broomstick" and "lie down" in words["motions"]
    assert words["times"] == ["day/night", "day", "night"]
    assert vocabulary_for(qiqi, Engine(None)) == words


def test_a_closed_world_offers_exactly_its_words(registry):
    """The chips are the closed vocabulary's own chips, less the motions kept for others."""
    qiqi, sosuke = registry.get("Qiqi"), registry.get("Sosuke")
    words = vocabulary_for(qiqi, Engine(closed_vocabulary()))
    assert words["adverbs"][:3] == ["slowly", "quickly", "gently"]
    assert words["times"] == ["morning", "day", "afternoon", "evening", "night"]
    assert "fly on broomstick" in words["motions"] and "ride in the car" not in words["motions"]
    assert "town" in words["places"] and "town balcony" not in words["places"]  # chips only
    sosukes = vocabulary_for(sosuke, Engine(closed_vocabulary()))["motions"]
    assert "ride in the car" in sosukes and "fly on broomstick" not in sosukes


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


NANO_SENTENCES = {
    "fly on broomstick": "Qiqi quickly flies on broomstick (day, sky).",
    "fly": "Qiqi quickly flies (day, sky).",
    "walk": "Qiqi quickly walks (day, sky).",
    "walk through the trees": "Qiqi quickly walks through the trees (day, sky).",
    "walk along the street": "Qiqi quickly walks along the street (day, sky).",
    "walk in the street": "Qiqi quickly walks in the street (day, sky).",
    "run": "Qiqi quickly runs (day, sky).",
    "run along the road": "Qiqi quickly runs along the road (day, sky).",
    "jump": "Qiqi quickly jumps (day, sky).",
    "sit": "Qiqi quickly sits (day, sky).",
    "sit on railing": "Qiqi quickly sits on railing (day, sky).",
    "sit down": "Qiqi quickly sits down (day, sky).",
    "lie down": "Qiqi quickly lies down (day, sky).",
    "lie on the grass": "Qiqi quickly lies on the grass (day, sky).",
    "wave hand": "Qiqi quickly waves hand (day, sky).",
    "wave to a friend": "Qiqi quickly waves to a friend (day, sky).",
    "hold broom": "Qiqi quickly holds broom (day, sky).",
    "turn head": "Qiqi quickly turns head (day, sky).",
    "look at the sea": "Qiqi quickly looks at the sea (day, sky).",
    "look around": "Qiqi quickly looks around (day, sky).",
    "talk": "Qiqi quickly talks (day, sky).",
    "talk to a friend": "Qiqi quickly talks to a friend (day, sky).",
    "dance": "Qiqi quickly dances (day, sky).",
    "ride in the car": "Qiqi quickly rides in the car (day, sky).",
    "ride in the purple car": "Qiqi quickly rides in the purple car (day, sky).",
}
"""The story's sentence for every motion phrase the Nano world knows, written out by hand: the
first verb takes the third person (-s, -es, -ies)."""


def test_the_story_reads_every_motion_of_the_nano_world():
    phrases = {phrase for motion in MOTIONS for phrase in motion.words}
    assert set(NANO_SENTENCES) == phrases  # a new motion needs its sentence here
    for motion, sentence in NANO_SENTENCES.items():
        instruction = make_instruction({**QIQI_FIELDS, "motion": motion})
        assert turn_sentence("Qiqi", instruction, GameStates()) == sentence


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
    assert list(history_frame(session).iloc[-1][["Stamina Δ", "Social Δ", "Entertainment Δ"]]) == [
        -3, 5, 0
    ]
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


def test_the_banner_names_what_plays_the_character():
    trained = Casting("Spearman", EngineKind.REAL, "runs/spearman/run/character", "trained")
    assert summary_of(banner_html(trained, "No GPU was found.")) == "Spearman: trained here, CPU"
    converted = Casting("Qiqi", EngineKind.REAL, "cache/Qiqi", "converted", "GPU")
    assert summary_of(banner_html(converted, "x")) == "Qiqi: the release's weights, converted, GPU"
    assert banner_html(converted, "") == ""  # its own weights, nothing to say
    nano = Casting("Qiqi", EngineKind.NANO, "nano/qiqi", "Nano world",
                   note="its weights need a GPU")
    shown = banner_html(nano, "Trained <here>.")
    assert summary_of(shown) == (
        "Qiqi: played by the Nano world, a small anime world trained on a CPU (its weights "
        "need a GPU)")
    assert "<p>Trained &lt;here&gt;.</p>" in shown
    preview = Casting("Sosuke", EngineKind.PREVIEW, "tiny untrained models", "preview")
    assert summary_of(banner_html(preview, "x")).startswith("Sosuke: played by the preview engine")
    hostile = Casting("<b>Tux</b>", EngineKind.REAL, "runs/tux", "trained")
    assert "<b>" not in banner_html(hostile, "x")


def summary_of(banner: str) -> str:
    """The banner's headline (its summary line), unescaped."""
    found = re.search(r"<summary>(.*)</summary>", banner)
    assert found is not None, banner
    return html.unescape(found.group(1))
