"""Scripted playthroughs (`examples/*.json`): a few instructions per character, one click each.

A file holds `{"character": <registry name>, "title": str, "turns": [<instruction fields>...]}`;
every turn is validated like a player's instruction, so a broken example fails at start-up.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from animegamer.characters.registry import Registry, UnknownCharacterError
from animegamer.game.rules import (
    INSTRUCTION_FIELDS,
    Instruction,
    InstructionError,
    make_instruction,
)

logger = logging.getLogger(__name__)

DEFAULT_EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"


class ExampleError(ValueError):
    """An example file that cannot be used; the message names the file and the turn."""


class UnknownCharacterExample(ExampleError):
    """An example for a character that the registry does not list."""


@dataclass(frozen=True)
class Playthrough:
    character: str
    title: str
    turns: tuple[Instruction, ...]

    def rows(self) -> list[list[str]]:
        """One row of field values per turn, in `INSTRUCTION_FIELDS` order."""
        return [[getattr(turn, name) for name in INSTRUCTION_FIELDS] for turn in self.turns]

    def labels(self) -> list[str]:
        return [
            f"{i}. {turn.adverb} {turn.motion} · {turn.time} {turn.place}"
            for i, turn in enumerate(self.turns, start=1)
        ]


def load_playthrough(path: Path, registry: Registry) -> Playthrough:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ExampleError(f"{path}: cannot read the example ({error})") from error
    if not isinstance(data, dict) or set(data) != {"character", "title", "turns"}:
        raise ExampleError(f"{path}: expected exactly the keys character, title, turns")
    try:
        character = registry.get(str(data["character"])).name
    except UnknownCharacterError as error:
        raise UnknownCharacterExample(f"{path}: {error}") from error
    turns_raw = data["turns"]
    if not isinstance(turns_raw, list) or not turns_raw:
        raise ExampleError(f"{path}: 'turns' must be a non-empty list")
    turns = []
    for index, raw in enumerate(turns_raw, start=1):
        if not isinstance(raw, dict) or set(raw) != set(INSTRUCTION_FIELDS):
            raise ExampleError(f"{path}: turn {index} needs exactly {list(INSTRUCTION_FIELDS)}")
        try:
            turns.append(make_instruction(raw))
        except InstructionError as error:
            raise ExampleError(f"{path}: turn {index}: {error}") from error
    return Playthrough(character=character, title=str(data["title"]), turns=tuple(turns))


def load_playthroughs(folder: Path, registry: Registry) -> dict[str, list[Playthrough]]:
    """Every example in `folder`, grouped by character (registry order); none if it is absent.

    Examples of a character the registry does not list are skipped (a duplicated Space may drop
    characters by editing the registry only); any other problem in a file is an error.
    """
    found: dict[str, list[Playthrough]] = {name: [] for name in registry.names}
    if folder.is_dir():
        for path in sorted(folder.glob("*.json")):
            try:
                playthrough = load_playthrough(path, registry)
            except UnknownCharacterExample as error:
                logger.warning("skipping example %s", error)
                continue
            found[playthrough.character].append(playthrough)
    return found
