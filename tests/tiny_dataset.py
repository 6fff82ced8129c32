"""A tiny dataset in the data pipeline's format, written directly (no video, no annotator): a
coloured square that moves faster at higher motion levels, in 17-frame clips, with tiny-tower
features and fitted levels. For the training and evaluation tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from animegamer.data import layout
from animegamer.data.dataset import card, write_card, write_splits
from animegamer.data.features import tiny_feature_extractor, write_features
from animegamer.data.flow import MotionLevels, motion_scope
from animegamer.game.rules import make_instruction
from animegamer.video.writer import write_mp4

MOTIONS = (("slowly", "walk", 1, 0, 0, 1), ("quickly", "run", 4, 0, 1, -1),
           ("gently", "wave hand", 2, 1, 0, 0), ("happily", "jump", 5, 0, 1, -1))
"""(adverb, motion, speed in px/frame, sc, et, st) of the shots, in turn."""


def moving_square(speed: int, height: int, width: int, colour: tuple[int, int, int],
                  frames: int = 17) -> np.ndarray:
    clip = np.full((frames, height, width, 3), 40, dtype=np.uint8)
    clip[:, height // 2:] = 90
    for i in range(frames):
        x = (4 + speed * i) % (width - 16)
        clip[i, height // 2 - 12:height // 2 + 4, x:x + 16] = colour
    return clip


def write_tiny_dataset(out: Path, episodes: int = 2, shots: int = 4,
                       size: tuple[int, int] = (64, 96), features: bool = True) -> Path:
    """`episodes` episodes of `shots` shots (the last episode is the test split)."""
    out = Path(out)
    height, width = size
    extractor = tiny_feature_extractor() if features else None
    rows: dict[str, list[dict]] = {"train": [], "test": []}
    scopes = []
    for e in range(episodes):
        video = f"video-{e}"
        colour = (200, 60 + 60 * e, 40)
        for s in range(shots):
            adverb, motion, speed, sc, et, st = MOTIONS[s % len(MOTIONS)]
            frames = moving_square(speed, height, width, colour)
            shot = f"{video}-{s:03d}"
            clip = out / layout.CLIPS / video / f"{shot}.mp4"
            clip.parent.mkdir(parents=True, exist_ok=True)
            write_mp4(frames, clip, fps=8)
            place, time = ("town", "day") if e % 2 == 0 else ("forest", "night")
            instruction = make_instruction({"character": "Qiqi", "adverb": adverb,
                                            "motion": motion, "time": time, "place": place})
            feature_path = ""
            if extractor is not None:
                path = out / layout.FEATURES / video / f"{shot}.safetensors"
                path.parent.mkdir(parents=True, exist_ok=True)
                text = f"{adverb} {motion}"
                write_features(path, extractor.image_features(frames[:1])[0],
                               extractor.text_features([text])[0], extractor.name, text)
                feature_path = str(path.relative_to(out))
            scope = motion_scope(frames)
            scopes.append(scope)
            rows["test" if e == episodes - 1 else "train"].append({
                "shot_id": shot, "video": video, "start": 2.0 * s,
                "episode_id": f"{video}-e0", "episode_index": s,
                "character": "Qiqi", "adverb": adverb, "motion": motion, "time": time,
                "place": place, "instruction": instruction.text,
                "motion_scope": scope, "motion_level": 0,
                "sc": sc, "et": et, "st": st,
                "clip_path": str(clip.relative_to(out)), "features_path": feature_path,
            })
    levels = MotionLevels.fit(scopes)
    for split_rows in rows.values():
        for row in split_rows:
            row["motion_level"] = levels.level(row["motion_scope"])
    splits = write_splits(out, rows)
    (out / layout.LEVELS).write_text(json.dumps(levels.to_dict()))
    write_card(out, card("Qiqi", splits, {k: len(v) for k, v in rows.items()}))
    return out
