"""What the page tells a player about the words: every phrase that plays is listed under its
chip (and listed phrases play that chip), and the instruction's one length limit is the same in
the browser, the parser and README, with a counter."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from animegamer.characters.registry import load_registry
from animegamer.command.parser import game_context, read_instruction
from animegamer.game.rules import MAX_INSTRUCTION_CHARS, InstructionError
from animegamer.nano.vocabulary import MOTIONS, PLACES, SYNONYMS, closed_vocabulary
from animegamer.serving.settings import Settings
from animegamer.ui.blocks import build_app

TITLES = {"Do": "motion", "How": "adverb", "When": "time", "Where": "place"}


@pytest.fixture(scope="module")
def nano_app(preview_engine, tmp_path_factory):
    engine = copy.copy(preview_engine)
    engine.vocabulary = closed_vocabulary()
    return build_app(engine, load_registry(), Settings(output_dir=tmp_path_factory.mktemp("w")))


def shown(demo) -> dict[str, dict]:
    return {
        c["props"]["elem_id"]: c["props"]
        for c in demo.config["components"]
        if c.get("props", {}).get("elem_id")
    }


def listed(markdown: str) -> list[tuple[str, str, str]]:
    """(field, chip, phrase) of each phrase the words tab lists, the chip itself included."""
    rows, field = [], ""
    for line in markdown.splitlines():
        title = re.fullmatch(r"\*\*(\w+)\*\*", line.strip())
        if title:
            field = TITLES[title.group(1)]
        item = re.fullmatch(r"- \*\*([^*]+)\*\*(?:: (.*))?", line.strip())
        if item:
            chip, more = item.groups()
            rows += [(field, chip, p) for p in (chip, *(more.split(", ") if more else ()))]
    return rows


@pytest.mark.parametrize("character", ["Qiqi", "Sosuke"])
def test_every_listed_phrase_plays_its_chip(nano_app, character):
    rows = listed(shown(nano_app)[f"ag-known-words-{character}"]["value"])
    context = game_context(load_registry(), character, None, closed_vocabulary())
    assert {field for field, _, _ in rows} == set(TITLES.values())
    for field, chip, phrase in rows:
        sentence = phrase if field == "motion" else f"{character} walks {phrase}"
        assert read_instruction(sentence, context).fields()[field] == chip, (field, phrase)


@pytest.mark.parametrize("character", ["Qiqi", "Sosuke"])
def test_every_phrase_of_the_world_is_listed_for_whoever_may_use_it(nano_app, character):
    phrases = {phrase for _, _, phrase in listed(shown(nano_app)[f"ag-known-words-{character}"]
                                                  ["value"])}
    theirs = [m for m in MOTIONS if m.allows(character)]
    expected = {w for m in theirs for w in m.words} | {w for p in PLACES for w in p.words}
    chips = {*(m.name for m in theirs), *(p.name for p in PLACES)}
    expected |= {word for chip, more in SYNONYMS if chip in chips for word in more}
    assert expected <= phrases
    others = {w for m in MOTIONS if not m.allows(character) for w in m.words}
    assert not others & phrases
    with pytest.raises(InstructionError):
        read_instruction(sorted(others)[0], game_context(load_registry(), character, None,
                                                          closed_vocabulary()))


def test_one_length_limit_in_the_browser_the_parser_and_readme(nano_app):
    command = shown(nano_app)["ag-command"]
    assert command["max_length"] == MAX_INSTRUCTION_CHARS
    counter = shown(nano_app)["ag-command-counter"]["value"]
    assert counter == f"{len(command['value'])} / {MAX_INSTRUCTION_CHARS} characters"
    counting = [d for d in nano_app.config["dependencies"]
                if d.get("js") and f"/ {MAX_INSTRUCTION_CHARS} characters" in d["js"]]
    assert len(counting) == 1 and not counting[0].get("backend_fn")
    context = game_context(load_registry(), "Qiqi", None, closed_vocabulary())
    assert read_instruction("run" + " " * (MAX_INSTRUCTION_CHARS - 3), context).motion == "run"
    with pytest.raises(InstructionError, match=f"at most {MAX_INSTRUCTION_CHARS}"):
        read_instruction("run" + " " * MAX_INSTRUCTION_CHARS, context)
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    limits = set(re.findall(r"up to (\d[\d,]*) characters", readme))
    assert limits == {str(MAX_INSTRUCTION_CHARS)}
