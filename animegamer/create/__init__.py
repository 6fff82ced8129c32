"""A playable, registered character from a folder of videos: `create_character` (`pipeline`),
whose command line is `python -m animegamer.create`; `register` writes the registry entry and
`example` a small video set to try it on.

    from animegamer.create import CreateOptions, create_character

    result = create_character(CreateOptions(videos=Path("videos"), character="Kiki",
                                            reference_image=Path("kiki.png"),
                                            annotations=Path("answers.jsonl"), out=Path("kiki")))
    result.character_dir, result.losses

The API is loaded on first use: importing `animegamer.create.example` does not import the data
and training stacks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from animegamer.create.pipeline import (
        CreateError,
        CreateOptions,
        CreateResult,
        create_character,
    )

__all__ = ["CreateError", "CreateOptions", "CreateResult", "create_character"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from animegamer.create import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
