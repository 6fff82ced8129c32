"""Adding a trained character to a registry file (`--register`).

The entry is written into the file's `characters:` list as text, so the file's comments and
layout stay as they were, and the whole file is validated with the new entry (`parse_registry`)
before it is written. Its `converted.repo` is the character folder's path relative to the
registry file's folder, as every relative path in a registry is.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from animegamer.characters.registry import (
    RegistryError,
    is_local_path,
    load_registry,
    parse_registry,
)
from animegamer.data.store import write_atomic
from animegamer.game.rules import ACTION_FIELDS

EXAMPLES = 5
"""Distinct instructions of the dataset listed as the entry's examples."""
_TOP_LEVEL = re.compile(r"^[^\s#]")


def registry_path_of(character_dir: Path, registry: Path) -> str:
    """`character_dir` as a registry path: relative to the registry file's folder, starting
    with ./ or ../ (a registry reads any other value as a Hub repo id)."""
    relative = Path(os.path.relpath(character_dir.resolve(), registry.resolve().parent))
    text = relative.as_posix()
    return text if text.startswith("../") else f"./{text}"


def distinct_instructions(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The dataset rows' instructions (their action fields), each once, in the rows' order."""
    instructions: list[dict[str, str]] = []
    for row in rows:
        fields = {key: row[key] for key in ACTION_FIELDS}
        if fields not in instructions:
            instructions.append(fields)
    return instructions


def entry(name: str, character_dir: Path, registry: Path,
          rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The registry entry of a trained character: its dataset's first instruction as the
    defaults, the next distinct ones as examples."""
    instructions = distinct_instructions(rows)
    if not instructions:
        raise RegistryError(f"cannot register {name}: its dataset has no rows")
    return {
        "name": name,
        "defaults": {"character": name, **instructions[0]},
        "examples": instructions[1 : 1 + EXAMPLES],
        "weights": {"converted": {"repo": registry_path_of(character_dir, registry)}},
    }


def _with_entry(text: str, new: dict[str, Any]) -> str:
    """The registry text with `new` appended to its `characters:` list."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith("characters:")), None)
    if start is None:
        raise RegistryError("the registry has no top-level 'characters:' list")
    end = next((i for i in range(start + 1, len(lines)) if _TOP_LEVEL.match(lines[i])), len(lines))
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    dumped = yaml.safe_dump([new], sort_keys=False, allow_unicode=True, width=100)
    block = "\n" + "".join(f"  {line}" if line.strip() else line
                           for line in dumped.splitlines(keepends=True))
    if lines[end - 1 : end] and not lines[end - 1].endswith("\n"):
        lines[end - 1] += "\n"
    return "".join(lines[:end]) + block + "".join(lines[end:])


def check_name_free(registry: Path, name: str, character_dir: Path) -> bool:
    """Whether `registry` already lists `name` with `character_dir` (True) or not at all
    (False); `RegistryError` when it lists `name` with other weights, or is not a valid
    registry."""
    current = load_registry(registry)
    wanted = character_dir.resolve()
    for character in current.characters:
        if character.name.casefold() != name.casefold():
            continue
        converted = character.converted
        if converted and is_local_path(converted.repo) and Path(converted.repo) == wanted:
            return True
        raise RegistryError(
            f"{registry} already lists a character named {character.name} with other weights: "
            "pick another --character, or remove that entry"
        )
    return False


def register(registry: Path, new: dict[str, Any]) -> bool:
    """Add `new` to the registry file; False when the same character (same name, same folder)
    is already there. `RegistryError` for a file that is not a valid registry, a name taken by
    another character, or an entry that does not validate; the file is then left as it was."""
    character_dir = registry.parent / new["weights"]["converted"]["repo"]
    if check_name_free(registry, new["name"], character_dir):
        return False
    text = registry.read_text(encoding="utf-8")
    updated = _with_entry(text, new)
    parse_registry(yaml.safe_load(updated), registry)
    write_atomic(registry, lambda partial: partial.write_text(updated, encoding="utf-8"))
    return True
