"""The data side of training: anime videos → an annotated, episode-ordered `datasets` dataset.

`build_dataset` and its `summary` (`from_videos`, loaded on first use) are what
`python -m animegamer.data build|show` (see `__main__`) runs. Modules, one job each: `decode`
(ffmpeg reading), `shots` (cuts and clips), `flow` (motion scope and levels; torch-free, the game
and training import it), `extract` (the per-video CPU stage), `annotate` (answers and their
strict parser), `features` (cached shot features), `episodes`, `dataset` (rows and Parquet),
`report`, `store` (work records, atomic writes), `layout` (file names), `build` (the stages),
`show`. Nothing here is imported by the game at start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from animegamer.data.build import BuildOptions, BuildResult
    from animegamer.data.from_videos import build_dataset, summary

__all__ = ["BuildOptions", "BuildResult", "build_dataset", "summary"]


def __getattr__(name: str) -> object:
    if name in ("build_dataset", "summary"):
        from animegamer.data import from_videos

        return getattr(from_videos, name)
    if name in ("BuildOptions", "BuildResult"):
        from animegamer.data import build

        return getattr(build, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
