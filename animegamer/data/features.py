"""Cached shot features: what the shot encoder's frozen towers make of a shot (docs/design.md §9).

A `ShotFeatureExtractor` turns first frames into image tokens (CLIP ViT-B/16 penultimate layer,
196×768 for the real towers) and motion texts into text tokens (T5 v1.1 XXL, 30×4096); the
widths are the extractor's. Each shot's features are one safetensors file, `image_features` and
`text_features`, with the extractor's name and the motion text in its metadata (`source`), so a
file made by another extractor or for another text is made again.

`TowerFeatureExtractor` runs the shot encoder's towers (`animegamer.models.shot_encoder`, the
same functions the pipeline's `encode_shot` uses): the registry's real ones
(`registry_feature_extractor`) or tiny random ones (`tiny_feature_extractor`) that run the whole
path on a CPU in tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
from safetensors import safe_open

from animegamer.data.errors import DataError
from animegamer.data.store import write_atomic

if TYPE_CHECKING:
    import torch

    from animegamer.characters.registry import ShotTowerSources
    from animegamer.models.shot_encoder import ShotTowers

class ShotFeatureExtractor(Protocol):
    """The frozen towers of the shot encoder, as the data pipeline uses them."""

    name: str

    def image_features(self, first_frames: np.ndarray) -> torch.Tensor:
        """uint8 first frames [B, H, W, 3] → image tokens [B, 196, width]."""
        ...

    def text_features(self, motion_texts: list[str]) -> torch.Tensor:
        """Motion descriptions ("softly talk") → text tokens [B, 30, width]."""
        ...


class TowerFeatureExtractor:
    """Features from `ShotTowers`, named for the cache (a new name remakes cached files)."""

    def __init__(self, towers: ShotTowers, name: str) -> None:
        self.towers = towers
        self.name = name

    def image_features(self, first_frames: np.ndarray) -> torch.Tensor:
        return self.towers.image_features(first_frames)

    def text_features(self, motion_texts: list[str]) -> torch.Tensor:
        return self.towers.text_features(motion_texts)


def tiny_feature_extractor(width: int = 32, seed: int = 0) -> TowerFeatureExtractor:
    """Random towers of toy width with the real token counts (196 image, 30 text tokens)."""
    from animegamer.models.tiny_shot_encoder import tiny_shot_towers

    name = f"tiny-random-sincos-{width}-{seed}"
    return TowerFeatureExtractor(tiny_shot_towers(width, seed), name)


def registry_feature_extractor(sources: ShotTowerSources) -> TowerFeatureExtractor:
    """The real towers at the registry's pinned revisions (downloaded once into the Hub cache).

    A tower that is neither cached nor reachable is a `DataError` naming its repository and
    what to do, raised before anything is built."""
    import torch

    from animegamer.characters.hub import HubError, fetch
    from animegamer.models.shot_encoder import ShotTowers

    gpu = torch.cuda.is_available()
    folders = []
    for ref, patterns in ((sources.image_encoder, ["*.json", "*.safetensors"]),
                          (sources.text_encoder, ["*.json", "*.safetensors"]),
                          (sources.tokenizer, None)):
        try:
            folders.append(fetch(ref, patterns))
        except (HubError, OSError) as error:
            reason = " ".join(str(error).split())
            raise DataError(
                f"the real shot towers need {ref.describe()}, which is not in the Hugging Face "
                f"cache and cannot be downloaded ({reason}). Run once with network access "
                "(about 10 GB, kept in the cache), or copy a cache that holds it into HF_HOME; "
                "on a CPU use the CPU recipe (recipes/cpu.yaml: tiny towers)"
            ) from None
    image_folder, text_folder, tokenizer_folder = folders
    towers = ShotTowers.from_pretrained(
        image_folder, text_folder, tokenizer_folder,
        dtype=torch.bfloat16 if gpu else torch.float32, device="cuda" if gpu else "cpu",
    )
    name = ";".join(ref.describe() for ref in (sources.image_encoder, sources.text_encoder))
    return TowerFeatureExtractor(towers, name)


FEATURE_KINDS = ("none", "real", "tiny")
"""What a build caches: no features, the registry's real towers', or tiny random towers'."""


def feature_extractor(kind: str) -> ShotFeatureExtractor | None:
    """The extractor for a `FEATURE_KINDS` name (`DataError` when the real towers cannot be
    had)."""
    if kind == "tiny":
        return tiny_feature_extractor()
    if kind == "real":
        from animegamer.characters.registry import load_registry

        towers = load_registry().shot_towers
        if towers is None:
            raise DataError("the real shot towers need `shot_towers` in the character registry")
        return registry_feature_extractor(towers)
    return None


def is_current(path: Path, extractor: str, motion_text: str) -> bool:
    """Whether `path` holds features made by `extractor` for `motion_text`."""
    if not path.is_file():
        return False
    try:
        with safe_open(str(path), framework="numpy") as file:
            metadata = file.metadata() or {}
    except (OSError, ValueError):
        return False
    return metadata == _metadata(extractor, motion_text)


def _metadata(extractor: str, motion_text: str) -> dict[str, str]:
    """One metadata entry: safetensors writes several in no fixed order, and a rerun must write
    the same bytes."""
    return {"source": json.dumps({"extractor": extractor, "motion_text": motion_text})}


def write_features(
    path: Path, image: torch.Tensor, text: torch.Tensor, extractor: str, motion_text: str
) -> Path:
    """Write one shot's features atomically."""
    from safetensors.torch import save_file

    tensors = {"image_features": image.contiguous(), "text_features": text.contiguous()}
    metadata = _metadata(extractor, motion_text)
    return write_atomic(path, lambda partial: save_file(tensors, str(partial), metadata=metadata))
