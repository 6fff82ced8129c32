"""The Nano world's image tower: trained on the world's frames, its tokens tell who is in a frame,
which the random stand-in's hardly do."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import CLIPVisionModel

from animegamer.game.rules import make_instruction
from animegamer.models.shot_encoder import clip_pixel_values, image_features
from animegamer.models.tiny_shot_encoder import tiny_shot_towers
from animegamer.nano.renderer import NanoRenderer, WorldState
from animegamer.nano.tower import TowerTraining, train_world_tower

PLACES = ("grass", "town", "forest", "harbour")
TIMES = ("day", "evening")


def _scene_pairs() -> tuple[np.ndarray, np.ndarray]:
    """First frames of Qiqi and Sosuke doing the same thing at the same spot, over scenes."""
    renderer = NanoRenderer()
    frames: dict[str, list[np.ndarray]] = {"Qiqi": [], "Sosuke": []}
    for index, (place, time) in enumerate((p, t) for p in PLACES for t in TIMES):
        x = 20.0 + 7.0 * index
        for character in frames:
            instruction = make_instruction({"character": character, "adverb": "slowly",
                                            "motion": "walk", "time": time, "place": place})
            shot = renderer.render(instruction, WorldState(x, 0.0, 1, time, place))
            frames[character].append(shot.frames[0])
    return np.stack(frames["Qiqi"]), np.stack(frames["Sosuke"])


def _training_set(qiqi: np.ndarray, sosuke: np.ndarray) -> tuple[np.ndarray, dict[str, list[str]]]:
    """The scene pairs as one set of frames and their character, place and time labels."""
    labels = {
        "character": ["Qiqi"] * len(qiqi) + ["Sosuke"] * len(sosuke),
        "place": [p for p in PLACES for _ in TIMES] * 2,
        "time": list(TIMES) * len(PLACES) * 2,
    }
    return np.concatenate([qiqi, sosuke]), labels


def _character_gap(tower: CLIPVisionModel, qiqi: np.ndarray, sosuke: np.ndarray) -> float:
    """Mean over scenes of 1 − cos between the two characters' most different tokens (top 5):
    the scene and the pose are the same, so only who stands there differs."""
    with torch.no_grad():
        a = image_features(tower, clip_pixel_values(qiqi))
        b = image_features(tower, clip_pixel_values(sosuke))
    distance = 1 - torch.nn.functional.cosine_similarity(a, b, dim=-1)
    return float(distance.topk(5, dim=1).values.mean())


def test_training_makes_the_tokens_tell_the_characters_apart() -> None:
    qiqi, sosuke = _scene_pairs()
    tower = tiny_shot_towers(32, seed=0).image_encoder
    before = _character_gap(tower, qiqi, sosuke)
    frames, labels = _training_set(qiqi, sosuke)
    accuracy = train_world_tower(tower, frames, labels, TowerTraining(steps=60, batch_size=16))
    after = _character_gap(tower, qiqi, sosuke)
    assert accuracy["character"] == 1.0 and accuracy["place"] == 1.0, accuracy
    assert after > 1.3 * before, (before, after)
    assert not tower.training


def test_every_label_set_needs_one_label_per_frame() -> None:
    tower = tiny_shot_towers(32, seed=0).image_encoder
    frames = np.zeros((2, 64, 96, 3), np.uint8)
    with pytest.raises(ValueError, match="one label per frame"):
        train_world_tower(tower, frames, {"character": ["Qiqi"]})
    with pytest.raises(ValueError, match="one label per frame"):
        train_world_tower(tower, frames, {})
