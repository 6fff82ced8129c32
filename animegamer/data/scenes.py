"""A dataset's scenes: for each time of day and place its rows name, the background its shots
share, estimated as the per-pixel median of their frames (a figure that moves, or stands in
another spot in each shot, drops out of it). A decoder that draws on a scene (`scene_channels`,
see `NanoTransformer3DModel`) trains on them, and the character folder keeps them, so a
creator's character draws its own places:

    scenes/index.json    {"<time>|<place>": "<n>.png", ...}
    scenes/<n>.png       uint8 RGB at the clips' size
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from animegamer.data.dataset import read_rows
from animegamer.data.decode import read_clip
from animegamer.data.errors import DataError

SCENES = "scenes"
INDEX = "index.json"
SAMPLED_FRAMES = (0, 4, 8, 12, 16)
"""The frames of each shot that the median reads."""
SHOTS_PER_SCENE = 64
"""The shots a scene's median reads at most: 320 frames, 320 MB at the paper's 480×720."""

SceneKey = tuple[str, str]
"""A scene by its (time, place)."""


def scene_key(row: Mapping[str, Any]) -> SceneKey:
    """The scene a dataset row's shot stands in."""
    return str(row["time"]), str(row["place"])


def median_scenes(
    dataset: Path, rows: Sequence[dict[str, Any]], shots_per_scene: int = SHOTS_PER_SCENE
) -> dict[SceneKey, np.ndarray]:
    """The background of every (time, place) the rows name: the per-pixel median of the
    sampled frames of at most `shots_per_scene` of its clips, spread evenly over its rows (so
    memory stays bounded, whatever the dataset's size)."""
    by_key: dict[SceneKey, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_key[scene_key(row)].append(row)
    if not by_key:
        raise DataError(f"{dataset}: no shots to estimate the scenes from")
    scenes = {}
    for key, key_rows in sorted(by_key.items()):
        picked = np.linspace(0, len(key_rows) - 1, min(len(key_rows), shots_per_scene))
        frames: list[np.ndarray] = []
        for index in np.unique(picked.round().astype(int)):
            clip = read_clip(dataset / key_rows[index]["clip_path"])
            frames.extend(clip[[i for i in SAMPLED_FRAMES if i < len(clip)]])
        scenes[key] = np.median(np.stack(frames), axis=0).astype(np.uint8)
    return scenes


class SceneTable:
    """A `SceneSource` over fixed backgrounds: the exact (time, place) when it has it, else the
    same place at another time, else the first scene (a player may combine words no shot
    did)."""

    def __init__(self, scenes: Mapping[SceneKey, np.ndarray]) -> None:
        if not scenes:
            raise ValueError("a scene table needs at least one scene")
        self.scenes = dict(sorted(scenes.items()))

    def __call__(self, time: str, place: str) -> np.ndarray:
        if (time, place) in self.scenes:
            return self.scenes[(time, place)]
        same_place = [image for (_, where), image in self.scenes.items() if where == place]
        return same_place[0] if same_place else next(iter(self.scenes.values()))

    @classmethod
    def from_dataset(cls, dataset: Path, rows: Sequence[dict[str, Any]]) -> SceneTable:
        return cls(median_scenes(dataset, rows))

    def save(self, folder: Path) -> Path:
        """Write `folder/scenes/` (replacing one there); returns it."""
        target = Path(folder) / SCENES
        target.mkdir(parents=True, exist_ok=True)
        for stale in target.glob("*.png"):
            stale.unlink()
        index = {}
        for number, (key, image) in enumerate(self.scenes.items()):
            Image.fromarray(image).save(target / f"{number}.png")
            index["|".join(key)] = f"{number}.png"
        (target / INDEX).write_text(json.dumps(index, indent=2) + "\n")
        return target

    @classmethod
    def load(cls, folder: Path) -> SceneTable | None:
        """The table a character folder keeps, None when it has none; DataError when it is
        unreadable."""
        index_path = Path(folder) / SCENES / INDEX
        if not index_path.is_file():
            return None
        try:
            index = json.loads(index_path.read_text())
            scenes = {}
            for key, name in index.items():
                time, place = key.split("|", 1)
                with Image.open(index_path.parent / name) as image:
                    scenes[(time, place)] = np.asarray(image.convert("RGB"))
        except (OSError, ValueError) as error:
            raise DataError(f"{index_path}: unreadable scene table ({error})") from None
        return cls(scenes)


class DatasetScenes:
    """The `SceneSource` of a dataset folder's own scenes: `SceneTable.from_dataset` of its train
    split, estimated once, on first use, so a run's phases and its character folder share one
    reading of the clips."""

    def __init__(self, dataset: Path) -> None:
        self.dataset = Path(dataset)
        self._table: SceneTable | None = None

    @property
    def table(self) -> SceneTable:
        if self._table is None:
            rows = read_rows(self.dataset).get("train", [])
            self._table = SceneTable.from_dataset(self.dataset, rows)
        return self._table

    def __call__(self, time: str, place: str) -> np.ndarray:
        return self.table(time, place)
