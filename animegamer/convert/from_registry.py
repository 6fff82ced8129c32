"""A registry character's release downloaded, converted and optionally published, as a function:
what `python -m animegamer.convert character` runs.

    from animegamer.convert.from_registry import convert_registry_character

    result = convert_registry_character("Qiqi", out=Path("converted/qiqi"))
    result.folder  # and result.published, result.revision with push_to_hub
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from animegamer.characters import hub
from animegamer.characters.conversion.character import cache_key, convert_release, publish
from animegamer.characters.registry import RegistryError, load_registry
from animegamer.serving.settings import Settings


@dataclass(frozen=True)
class ConvertedCharacter:
    name: str
    folder: Path
    published: str | None = None
    """The Hub commit URL, with `push_to_hub`."""
    revision: str | None = None
    """The published commit, to pin in the registry."""


def convert_registry_character(
    name: str, out: Path | None = None, registry: Path | None = None,
    cache_dir: Path | None = None, check_resources: bool = True,
    push_to_hub: str | None = None, private: bool = False,
    say: Callable[[str], None] = print,
) -> ConvertedCharacter:
    """Convert the release of registry character `name` into `out` (None: the start-up cache,
    exactly as the Space would), then publish the folder to `push_to_hub` when given. The
    registry and cache default to the settings' (`ANIMEGAMER_CHARACTERS`, `ANIMEGAMER_CACHE`).
    Raises `RegistryError`, `HubError` or `ConversionError`."""
    settings = Settings.from_env()
    character = load_registry(registry or settings.registry_path).get(name)
    if character.release is None:
        raise RegistryError(
            f"{character.name} has no release source to convert: its registry entry names only "
            "a converted repo"
        )
    check = check_resources and settings.resource_checks
    if out is None:
        release_only = dataclasses.replace(character, converted=None)
        out = hub.resolve_character(release_only, cache_dir or settings.cache_dir,
                                    check_resources=check)
    else:
        sources = hub.resolve_sources(character.release)
        if hub.is_trusted(out, cache_key(sources)):
            say(f"{out} already holds this conversion; not converting again")
        else:
            files = hub.download_release(character.release, sources)
            convert_release(files, out, name=character.name, check_resources_first=check)
    say(f"converted {character.name}: {out}")
    result = ConvertedCharacter(character.name, out)
    if push_to_hub:
        commit = publish(out, push_to_hub, private=private)
        result = dataclasses.replace(result, published=commit.commit_url, revision=commit.oid)
    return result
