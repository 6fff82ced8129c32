"""The one instruction parser: forms, cleaning, the character, a closed vocabulary. No models."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import COMMAND_FORMS, QIQI_FIELDS

from animegamer.characters.registry import load_registry
from animegamer.command.free_text import FILLER_WORDS, base_form, reduced
from animegamer.command.parser import (
    InstructionContext,
    OtherCharacterError,
    UnknownCharacterError,
    UnknownWordsError,
    format_command,
    game_context,
    parse_instruction,
    read_instruction,
    reads_back,
    with_word,
)
from animegamer.game.rules import InstructionError, make_instruction
from animegamer.nano.vocabulary import closed_vocabulary, world_words

QIQI = make_instruction({**QIQI_FIELDS, "time": "day/night"})
CONTEXT = InstructionContext(
    fallback=QIQI, character="Qiqi", names=("Qiqi",), others={"Sosuke": ("Sosuke",)},
    adverbs=("gently", "fast"), times=("day", "night"),
)


@pytest.fixture(scope="module")
def registry():
    return load_registry()


@pytest.fixture(scope="module")
def qiqi(registry):
    """A fresh game of Qiqi on free text (the registry's words)."""
    return game_context(registry, "Qiqi")


@pytest.fixture(scope="module")
def nano_qiqi(registry):
    """A fresh game of Qiqi in the Nano world."""
    return game_context(registry, "Qiqi", None, closed_vocabulary())


# Forms ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), COMMAND_FORMS)
def test_every_form_of_the_command_line_reads(qiqi, text, expected):
    assert tuple(read_instruction(text, qiqi).fields().values()) == expected


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("fast run, night town", ("fast", "run", "night", "town")),
        ("walk, seaside town", ("quickly", "walk", "day/night", "seaside town")),
        ("Character: Qiqi; Motion: run; Background: day town.", ("quickly", "run", "day", "town")),
        ("Motion: fast run", ("fast", "run", "day/night", "sky")),
    ],
)
def test_a_command_fills_its_gaps_from_the_game(command, expected):
    instruction = parse_instruction(command, CONTEXT)
    assert (instruction.adverb, instruction.motion, instruction.time, instruction.place) == expected


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("", "Type what your character should do"),
        ("   ", "Type what your character should do"),
        ("\u200b\u2066\ufeff", "Type what your character should do"),
        (", day sky", "Motion is empty"),
        ("Motion: \u200b\u200d; Background: day sky", "Motion is empty"),
        ("x" * 601, "too long"),
        ("x" * 200, "Motion is too long"),
        ("run, day sky\x07", "control or unassigned"),
        ("Character: Qiqi; Mood: happy; Motion: run", "Could not read the instruction"),
        ("Motion: run; Motion: jump", "Could not read the instruction"),
    ],
)
def test_a_bad_command_says_what_is_wrong(command, message):
    with pytest.raises(InstructionError, match=message):
        parse_instruction(command, CONTEXT)


def test_format_and_read_round_trip_and_chips_change_one_part():
    instruction = make_instruction(
        {**QIQI_FIELDS, "adverb": "gently", "motion": "sit on railing", "place": "town"}
    )
    assert format_command(instruction) == "gently sit on railing, day town"
    assert read_instruction(format_command(instruction), CONTEXT) == instruction
    assert with_word("run, night town", "motion", "lie down", CONTEXT) == (
        "quickly lie down, night town"
    )
    assert with_word("", "time", "night", CONTEXT) == "quickly fly on broomstick, night sky"
    assert with_word("x" * 700, "adverb", "gently", CONTEXT) == (
        "gently fly on broomstick, day/night sky"
    )


@pytest.mark.parametrize(
    ("verb", "base"),
    [("flies", "fly"), ("runs", "run"), ("watches", "watch"), ("goes", "go"), ("is", "be"),
     ("has", "have"), ("lies", "lie"), ("kisses", "kiss"), ("dances", "dance"), ("plays", "play"),
     ("uses", "use"), ("fixes", "fix"), ("run", "run"), ("kiss", "kiss")],
)
def test_the_verb_after_a_name_goes_back_to_its_base_form(verb, base):
    assert base_form(verb) == base


def test_the_name_leading_a_sentence_is_the_character_never_the_motion(qiqi):
    played = read_instruction("Qiqi eats a big cake at the beach", qiqi)
    assert played.character == "Qiqi" and played.motion == "eat a big cake at the beach"
    assert "Qiqi" not in played.motion
    with pytest.raises(InstructionError, match="Motion is empty"):
        read_instruction("Qiqi", qiqi)
    # a name that is not the first word is text like any other
    assert read_instruction("wave to Qiqi", qiqi).motion == "wave to Qiqi"


def test_the_trained_sentence_reads_back_unless_a_field_breaks_it():
    assert reads_back(make_instruction({**QIQI_FIELDS, "adverb": "fast"}))
    assert not reads_back(make_instruction({**QIQI_FIELDS, "motion": "fly; Motion: sit"}))
    assert not reads_back(make_instruction({**QIQI_FIELDS, "time": "late night"}))


# Cleaning ----------------------------------------------------------------------------------------

INVISIBLE = [
    *(chr(c) for c in range(0x202A, 0x202F)), *(chr(c) for c in range(0x2066, 0x206A)),
    "\u200e", "\u200f", "\u061c", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff",
    "\U000e0000", "\U000e0001", "\U000e0020", "\U000e0041", "\U000e007f",
]


@pytest.mark.parametrize("char", INVISIBLE, ids=[f"U+{ord(c):04X}" for c in INVISIBLE])
def test_invisible_characters_are_removed_everywhere(char, qiqi):
    text = (
        f"Character: Qi{char}qi; Motion: gen{char}tly sit{char}; "
        f"Background: day{char} to{char}wn"
    )
    assert read_instruction(text, qiqi).fields() == {
        "character": "Qiqi", "adverb": "gently", "motion": "sit", "time": "day", "place": "town",
    }
    fields = {**QIQI_FIELDS, "motion": f"{char}fly{char} on broomstick"}
    assert make_instruction(fields).motion == "fly on broomstick"


@pytest.mark.parametrize("field", ["character", "adverb", "motion", "time", "place"])
def test_a_field_of_invisible_characters_only_is_refused(field):
    with pytest.raises(InstructionError, match="only invisible characters"):
        make_instruction({**QIQI_FIELDS, field: "\u200b\u202e\U000e0041"})


def test_text_is_nfkc_normalised(qiqi):
    played = read_instruction("\uff31\uff49\uff51\uff49\uff1a \uff52\uff55\uff4e\uff0c day town",
                              qiqi)
    assert played.fields() == {
        "character": "Qiqi", "adverb": "quickly", "motion": "run", "time": "day", "place": "town",
    }
    assert make_instruction({**QIQI_FIELDS, "place": "\ufb01eld"}).place == "field"  # ﬁ ligature


# The character -----------------------------------------------------------------------------------


def test_only_the_games_character_plays(qiqi):
    assert read_instruction("Character: qiqi; Motion: run", qiqi).character == "Qiqi"
    with pytest.raises(OtherCharacterError) as other:
        read_instruction("Character: SOSUKE; Motion: run", qiqi)
    assert (other.value.named, other.value.playing) == ("Sosuke", "Qiqi")
    with pytest.raises(OtherCharacterError):
        read_instruction("Sosuke runs, day town", qiqi)
    with pytest.raises(UnknownCharacterError, match="names 'Tombo', who is not in it"):
        read_instruction("Character: Tombo; Motion: run", qiqi)


@pytest.mark.parametrize(
    "text",
    ["Character: Qiq\u0456; Motion: run", "Qiq\u0456 runs, day town",
     "Character: \u03a1iqi; Motion: run"],
)
def test_look_alike_names_are_refused_as_unknown(qiqi, text):
    """Cyrillic і in Qiqi, a Greek capital rho for Q's place: NFKC keeps them, so the name is
    refused, saying which letters only look Latin."""
    with pytest.raises(UnknownCharacterError, match="only look like Latin ones") as error:
        read_instruction(text, qiqi)
    assert "cyrillic" in str(error.value) or "greek" in str(error.value)


# A closed vocabulary -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "unknown", "closest"),
    [
        ("quikly run, day town", "quikly", "Adverb 'quickly'"),
        ("quickly jumpp, day town", "jumpp", "Motion 'jump'"),
        ("Character: Qiqi; Motion: quickly run; Background: nigth town", "nigth", "Time 'night'"),
        ("quickly run, day harbur", "harbur", "Place 'harbour'"),
    ],
)
def test_a_word_the_world_does_not_know_is_refused_with_the_closest_chip(
    nano_qiqi, text, unknown, closest
):
    with pytest.raises(UnknownWordsError) as error:
        read_instruction(text, nano_qiqi)
    message = str(error.value)
    assert message.startswith("The Nano world knows only the words on the chips")
    assert f"Not known: '{unknown}' (closest chip: {closest})." in message


def test_a_refusal_names_every_unknown_word_and_only_chips(nano_qiqi):
    with pytest.raises(UnknownWordsError) as error:
        read_instruction("Qiqi eats a big cake, day beach", nano_qiqi)
    message = str(error.value)
    assert "'eats' (closest chip:" in message and "'big' (closest chip:" in message
    assert "'cake' (closest chip:" in message and "'beach'" not in message  # beach: seaside
    chips = {chip for phrases in nano_qiqi.vocabulary.fields.values() for chip in phrases.chips}
    named = re.findall(r"closest chip: \w+ '([^']+)'", message)
    assert len(named) == 3 and set(named) <= chips


@pytest.mark.parametrize(("text", "expected"), [
    ("Qiqi wants to go for a walk in the town", ("Qiqi", "quickly", "walk", "day", "town")),
    ("in the town, walk slowly", ("Qiqi", "slowly", "walk", "day", "town")),
    ("Please let Qiqi run fast to the harbor tonight!",
     ("Qiqi", "quickly", "run", "night", "harbour")),
    ("Qiqi's sitting gently on the railing", ("Qiqi", "gently", "sit", "day", "sky")),
    ("she is lying on the grass", ("Qiqi", "quickly", "lie down", "day", "grass")),
    ("slowly walk along the street · evening harbour",
     ("Qiqi", "slowly", "walk", "evening", "harbour")),
])
def test_free_text_reads_into_chips_in_any_order(nano_qiqi, text, expected):
    assert tuple(read_instruction(text, nano_qiqi).fields().values()) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("Qiqi in the town at night", "No motion: say what Qiqi should do with a Motion chip"),
    ("run from the town to the harbour", "One place a turn: the instruction names 'town' and "
                                         "'harbour'"),
    ("Qiqi and Sosuke run", "names Qiqi and Sosuke; this game plays one character, Qiqi"),
])
def test_free_text_the_world_cannot_play_in_one_turn_is_refused(nano_qiqi, text, message):
    with pytest.raises(InstructionError, match=re.escape(message)):
        read_instruction(text, nano_qiqi)


def _visitor_sentences() -> list[tuple[str, str, str]]:
    """(character, sentence, expected) of tests/data/visitor_sentences.txt."""
    rows = []
    for line in (Path(__file__).parent / "data" / "visitor_sentences.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        sentence, expected = line.split(" -> ")
        character, _, said = sentence.partition(": ")
        rows.append((character, said, expected) if said else ("Qiqi", sentence, expected))
    return rows


VISITOR_SENTENCES = _visitor_sentences()


def test_there_are_twenty_visitor_sentences_some_refused():
    assert len(VISITOR_SENTENCES) == 20
    assert 3 <= sum(expected.startswith("refused") for *_, expected in VISITOR_SENTENCES) <= 6


@pytest.mark.parametrize(("character", "sentence", "expected"), VISITOR_SENTENCES)
def test_a_visitor_sentence_plays_its_words_or_is_refused_naming_a_chip(
    registry, character, sentence, expected
):
    context = game_context(registry, character, None, closed_vocabulary())
    if expected.startswith("refused: "):
        with pytest.raises(UnknownWordsError) as error:
            read_instruction(sentence, context)
        message = str(error.value)
        assert f"closest chip: {expected.removeprefix('refused: ')}" in message
        refused = re.findall(r"'([^']+)' \(closest chip", message)
        known = {word for phrases in context.vocabulary.fields.values()
                 for chip in phrases.chips for word in chip.casefold().split()}
        assert refused and not {word.casefold() for word in refused} & known
        return
    wanted = {**context.fallback.fields(), "character": character}
    wanted.update(part.split("=") for part in re.findall(r"\w+=[^=]+?(?= \w+=|$)", expected))
    assert read_instruction(sentence, context).fields() == wanted


def test_every_phrase_the_world_reads_means_one_chip_per_field():
    """No two chips of a field share a phrase once filler words are dropped, no phrase is all
    filler, and no chip is a filler word (a chip is never ignored)."""
    vocabulary = closed_vocabulary()
    for key in ("adverb", "motion", "time", "place"):
        meanings: dict[tuple[str, ...], set[str]] = {}
        for chip, phrases in vocabulary.fields[key].listed():
            assert chip.casefold() not in FILLER_WORDS
            for phrase in (chip, *phrases):
                assert reduced(phrase), phrase
                meanings.setdefault(reduced(phrase), set()).add(chip)
        assert all(len(chips) == 1 for chips in meanings.values()), key


def test_the_world_keeps_its_motions_for_their_characters(registry):
    sosuke = game_context(registry, "Sosuke", None, closed_vocabulary())
    with pytest.raises(UnknownWordsError, match=r"Not known: 'fly' .*; 'broomstick'"):
        read_instruction("fly on broomstick, day sky", sosuke)
    assert read_instruction("ride in the car, day forest road", sosuke).motion == "ride in the car"


@pytest.mark.parametrize(("text", "expected"), [
    ("happily jump, evening harbour", ("Qiqi", "happily", "jump", "evening", "harbour")),
    ("Qiqi flies on broomstick, night sky", ("Qiqi", "quickly", "fly on broomstick", "night",
                                             "sky")),
    ("Character: Qiqi; Motion: slowly walk along the street; Background: afternoon seaside town.",
     ("Qiqi", "slowly", "walk", "afternoon", "seaside town")),
    ("gently sit on railing, evening town balcony", ("Qiqi", "gently", "sit", "evening", "town")),
    ("turn head", ("Qiqi", "quickly", "turn head", "day", "sky")),
])
def test_known_words_read_in_every_form(nano_qiqi, text, expected):
    assert tuple(read_instruction(text, nano_qiqi).fields().values()) == expected


def test_a_free_text_world_reads_any_words(qiqi):
    assert read_instruction("asdf qwerty", qiqi).motion == "asdf qwerty"


def test_the_closed_vocabulary_is_the_tokenizers_words():
    """Every word the game accepts on Nano is a whole-word token of its game-state model."""
    vocabulary = closed_vocabulary()
    accepted = {word for phrases in vocabulary.fields.values() for phrase in phrases.phrases
                for word in phrase.split()}
    assert accepted <= set(world_words())


def test_the_nano_defaults_become_words_the_world_knows(nano_qiqi):
    assert nano_qiqi.fallback.time == "day"  # the registry's "day/night"
    assert nano_qiqi.adverbs[:2] == ("slowly", "quickly")
