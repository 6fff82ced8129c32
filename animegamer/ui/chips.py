"""The words the suggestion chips offer: one list per instruction part.

On a world with a closed vocabulary (Nano: `TurnEngine.vocabulary`) the chips are exactly the
words it knows, the same object that refuses any other word; elsewhere they come from the
character registry (the character's defaults, then its examples), since the real models were
trained on free text. `known_words` lists, under each chip, every other phrase the closed world
reads as it (the phrases its models were trained on and the synonyms a sentence may use).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from animegamer.characters.registry import Character
from animegamer.command.parser import ClosedVocabulary
from animegamer.game.rules import ACTION_FIELDS

PART_FIELDS = {f"{field}s": field for field in ACTION_FIELDS}
"""Each chip group and the instruction field its chips fill."""
PARTS = tuple(PART_FIELDS)
"""The chip groups, in the order a command reads: `<adverb> <motion>, <time> <place>`."""


class HasVocabulary(Protocol):
    def vocabulary_for(self, character: str) -> ClosedVocabulary | None: ...


def _unique(words: Iterable[str]) -> list[str]:
    """`words` without repeats (case-insensitive), in first-seen order."""
    seen: set[str] = set()
    kept = []
    for word in words:
        key = word.lower()
        if word and key not in seen:
            seen.add(key)
            kept.append(word)
    return kept


def registry_vocabulary(character: Character) -> dict[str, list[str]]:
    """The character's default instruction, then the words of its registry examples."""
    instructions = (character.defaults, *character.examples)
    return {
        part: _unique(getattr(instruction, field) for instruction in instructions)
        for part, field in PART_FIELDS.items()
    }


def vocabulary_for(character: Character, engine: HasVocabulary) -> dict[str, list[str]]:
    """The chips for `character` on `engine`: `{"adverbs": [...], "motions": [...], "times":
    [...], "places": [...]}`."""
    vocabulary = engine.vocabulary_for(character.name)
    if vocabulary is None:
        return registry_vocabulary(character)
    closed = vocabulary.for_character(character.name)
    return {part: list(closed.fields[field].chips) for part, field in PART_FIELDS.items()}


def known_words(
    character: Character, engine: HasVocabulary, titles: Mapping[str, str]
) -> str | None:
    """Markdown: per chip group (`titles`: group → its title), each chip with the other phrases
    the world plays as it; None where the models read free text (any words play)."""
    vocabulary = engine.vocabulary_for(character.name)
    if vocabulary is None:
        return None
    closed = vocabulary.for_character(character.name)
    lines = [
        "A sentence may use any of these words, in any order; each plays its chip (in bold). "
        "Small words (the, to, in, wants, goes…) are skipped; other words are refused."
    ]
    for part, title in titles.items():
        lines.append(f"\n**{title}**\n")
        lines.extend(
            f"- **{chip}**" + (f": {', '.join(phrases)}" if phrases else "")
            for chip, phrases in closed.fields[PART_FIELDS[part]].listed()
        )
    return "\n".join(lines)
