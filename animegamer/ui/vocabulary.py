"""The words the suggestion chips offer: one list per instruction part.

On the Nano world the chips are exactly the words its renderer knows
(`animegamer.nano.vocabulary.NANO_VOCABULARY`); elsewhere they come from the character registry
(the character's defaults, then its examples), since the real models were trained on free text.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable
from typing import Any, Protocol

from animegamer.characters import Character
from animegamer.settings import EngineKind

logger = logging.getLogger(__name__)

PARTS = ("adverbs", "motions", "times", "places")
"""The chip groups, in the order a command reads: `<adverb> <motion>, <time> <place>`."""
PART_FIELDS = {"adverbs": "adverb", "motions": "motion", "times": "time", "places": "place"}
NANO_MODULE = "animegamer.nano.vocabulary"


class HasKind(Protocol):
    @property
    def kind(self) -> str: ...


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


def _nano_words(vocabulary: Any, part: str) -> list[str]:
    """A part of `NANO_VOCABULARY`, a mapping or an object with one attribute per part."""
    words = vocabulary[part] if isinstance(vocabulary, dict) else getattr(vocabulary, part)
    return _unique(str(word) for word in words)


def nano_vocabulary(character: str | None = None) -> dict[str, list[str]] | None:
    """The Nano world's words, or None when its module is not installed.

    With `character`, motions the world keeps for someone else (its `MOTIONS` specs that do not
    `allows(character)`, e.g. Qiqi's broom for Sosuke) are left out.
    """
    try:
        module = importlib.import_module(NANO_MODULE)
    except ImportError:
        return None
    words = {part: _nano_words(module.NANO_VOCABULARY, part) for part in PARTS}
    specs = getattr(module, "MOTIONS", ())
    if character is not None:
        others = {spec.name for spec in specs if not spec.allows(character)}
        words["motions"] = [motion for motion in words["motions"] if motion not in others]
    return words


def vocabulary_for(character: Character, engine: HasKind) -> dict[str, list[str]]:
    """The chips for `character` on `engine` (what plays it: its `Casting`): `{"adverbs":
    [...], "motions": [...], "times": [...], "places": [...]}`.

    On the Nano world a part that the world leaves empty, or the whole vocabulary when its
    module is missing, falls back to the registry's words.
    """
    own = registry_vocabulary(character)
    if engine.kind != EngineKind.NANO:
        return own
    nano = nano_vocabulary(character.name)
    if nano is None:
        logger.warning("%s is missing: the chips use the registry's words", NANO_MODULE)
        return own
    return {part: nano[part] or own[part] for part in PARTS}
