"""AnimeGamer-Nano: a small procedural anime world that the project renders, trains on and plays
on a CPU (issue 14).

`vocabulary` (the words the world knows: `NANO_VOCABULARY`), `sprites` (Qiqi, Sosuke and a
friend), `scene` (places × times of day), `world` (shots, episodes, state rules, the dataset),
`make_world` (`build_datasets` and `train_world`, loaded on first use) and the command line
`python -m animegamer.nano world|train`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from animegamer.nano.vocabulary import NANO_VOCABULARY, NanoVocabulary

if TYPE_CHECKING:
    from animegamer.nano.make_world import NanoTraining, WorldDataset, build_datasets, train_world

NANO_WORLD = "nano"
"""The `world` an installed Nano character folder's manifest names (`convert.character`): one
model set per character, as the release has one per film."""
_PIPELINE = ("NanoTraining", "WorldDataset", "build_datasets", "train_world")
"""What `__getattr__` loads from `make_world` on first use."""

__all__ = [
    "NANO_VOCABULARY", "NANO_WORLD", "NanoTraining", "NanoVocabulary", "WorldDataset",
    "build_datasets", "train_world",
]


def __getattr__(name: str) -> object:
    if name in _PIPELINE:
        from animegamer.nano import make_world

        return getattr(make_world, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
