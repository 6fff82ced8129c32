"""The Nano world: episodes of consecutive shots (each rendered by `renderer`), and the whole
world written as a dataset in the data pipeline's format.

A shot is `CLIP_FRAMES` frames (64×96, 8 fps) of one character doing one motion in one place at
one time of day, starting where the previous shot of its episode ended. Annotations are exact:
the instruction the shot was rendered from, the motion's state labels, and the motion scope
measured on the rendered frames with the data pipeline's `motion_scope`. The features are those
of the world's image tower (`tower`: the random stand-in for CLIP, trained on the train split's
frames to tell who, where and when).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import shutil
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from animegamer.data import dataset, layout
from animegamer.data.decode import DECODE_FPS
from animegamer.data.episodes import TEST_FRACTION, choose_test_videos
from animegamer.data.features import TowerFeatureExtractor, write_features
from animegamer.data.flow import MotionLevels, motion_scope
from animegamer.data.report import make_report
from animegamer.data.shots import CLIP_FPS, CLIP_FRAMES, CLIP_STRIDE
from animegamer.data.store import write_atomic, write_json
from animegamer.game.rules import Instruction, make_instruction
from animegamer.models.tiny_shot_encoder import tiny_shot_towers
from animegamer.nano.renderer import (
    X_MAX,
    X_MIN,
    NanoRenderer,
    RenderedShot,
    WorldState,
    lookup,
)
from animegamer.nano.scene import HEIGHT, WIDTH
from animegamer.nano.sprites import look_of, reference_image
from animegamer.nano.tower import TowerTraining, train_world_tower
from animegamer.nano.vocabulary import (
    ADVERBS,
    MOTIONS,
    PLACES,
    TIMES,
)
from animegamer.video.writer import write_mp4

FEATURE_BATCH = 16
TOWER_DIR = "tower"
"""The world's trained image tower, in the dataset folder (a transformers `CLIPVisionModel`)."""
TOWER_WIDTH = 32


@dataclass(frozen=True)
class EpisodeRules:
    """How a random player changes the scene: the chance per turn of a new place and of the
    next time of day (morning → day → … → night → morning)."""

    place_change: float = 0.25
    time_change: float = 0.2


def _phrase(rng: np.random.Generator, words: Sequence[str]) -> str:
    """The canonical word half the time, else one of its other phrases."""
    if len(words) == 1 or rng.random() < 0.5:
        return words[0]
    return words[int(rng.integers(1, len(words)))]


def random_instructions(
    rng: np.random.Generator, character: str, length: int, rules: EpisodeRules = EpisodeRules()
) -> list[Instruction]:
    """A random player's `length` instructions for `character`: a new motion and adverb each
    turn, the place and time kept unless the turn changes them. The sky is only for flying."""
    motions = [m for m in MOTIONS if m.allows(character)]
    time = TIMES[int(rng.integers(len(TIMES)))]
    place = PLACES[int(rng.integers(len(PLACES)))]
    place_text, instructions = None, []
    for turn in range(length):
        motion = motions[int(rng.integers(len(motions)))]
        adverb = ADVERBS[int(rng.integers(len(ADVERBS)))]
        if turn and rng.random() < rules.time_change:
            time = TIMES[(TIMES.index(time) + 1) % len(TIMES)]
        changed = turn and rng.random() < rules.place_change
        if changed or (place.name == "sky" and motion.posture != "fly"):
            choices = [p for p in PLACES if p != place and (p.name != "sky" or
                                                            motion.posture == "fly")]
            place, place_text = choices[int(rng.integers(len(choices)))], None
        place_text = place_text or _phrase(rng, place.words)
        instructions.append(make_instruction({
            "character": character, "adverb": adverb.name, "motion": _phrase(rng, motion.words),
            "time": time.name, "place": place_text,
        }))
    return instructions


def first_state(rng: np.random.Generator, instruction: Instruction) -> WorldState:
    """Where an episode starts: somewhere along the ground, or already in the air to fly."""
    motion, _, time, place = lookup(instruction)
    return WorldState(
        x=float(rng.uniform(X_MIN + 8, X_MAX - 8)), altitude=motion.altitude,
        facing=1 if rng.random() < 0.5 else -1, time=time.name, place=place.name,
    )


def render_episode(
    renderer: NanoRenderer, instructions: Sequence[Instruction], start: WorldState
) -> Iterator[RenderedShot]:
    """The shots of an episode, each starting where the previous one ended."""
    state = start
    for instruction in instructions:
        shot = renderer.render(instruction, state)
        state = shot.end
        yield shot


@dataclass(frozen=True)
class WorldOptions:
    """`shots` in episodes of `episode_length` (the last may be shorter), alternating the
    `characters`; the split keeps whole episodes together."""

    out: Path
    shots: int = 240
    seed: int = 0
    episode_length: int = 8
    characters: tuple[str, ...] = ("Qiqi", "Sosuke")
    test_fraction: float = TEST_FRACTION
    workers: int = 2
    rules: EpisodeRules = EpisodeRules()
    tower: TowerTraining = field(default_factory=TowerTraining)


@dataclass(frozen=True)
class _Row:
    video: str
    video_id: str
    episode_index: int
    shot: RenderedShot

    @property
    def start_frame(self) -> int:
        return self.episode_index * CLIP_FRAMES * CLIP_STRIDE

    @property
    def shot_id(self) -> str:
        return layout.shot_id(self.video_id, self.start_frame)

    @property
    def motion_text(self) -> str:
        return f"{self.shot.instruction.adverb} {self.shot.instruction.motion}"


def world_shots(options: WorldOptions) -> Iterator[_Row]:
    """Every shot of the world, episode by episode (deterministic for `options.seed`)."""
    rng = np.random.default_rng(options.seed)
    renderer = NanoRenderer()
    episodes = math.ceil(options.shots / options.episode_length)
    for episode in range(episodes):
        character = options.characters[episode % len(options.characters)]
        length = min(options.episode_length, options.shots - episode * options.episode_length)
        instructions = random_instructions(rng, character, length, options.rules)
        video = f"nano/{character.lower()}-{episode:05d}"
        shots = render_episode(renderer, instructions, first_state(rng, instructions[0]))
        for index, shot in enumerate(shots):
            yield _Row(video, layout.video_id(video), index, shot)


def _prepare(out: Path) -> None:
    """An empty folder or an earlier world (whose clips and features are removed)."""
    if out.is_dir() and any(out.iterdir()):
        report = out / layout.REPORT
        earlier = report.is_file() and "world" in json.loads(report.read_text(encoding="utf-8"))
        if not earlier:
            raise FileExistsError(
                f"{out} is not empty and holds no Nano world; choose a new folder"
            )
        for name in (layout.CLIPS, layout.FEATURES, TOWER_DIR):
            shutil.rmtree(out / name, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)


def _measure_and_write(out: Path, row: _Row) -> float:
    """The shot's motion scope (on the rendered frames); writes its clip."""
    frames = row.shot.frames
    path = out / layout.clip_path(row.video_id, row.shot_id)
    write_atomic(path, lambda partial: write_mp4(frames, partial, fps=CLIP_FPS))
    return motion_scope(frames)


TOWER_FRAMES = (0, CLIP_FRAMES // 2, CLIP_FRAMES - 1)
"""Frames of each train shot the image tower learns from (first, middle, last: poses vary)."""


def world_feature_extractor(
    out: Path, train_rows: Sequence[_Row], training: TowerTraining
) -> TowerFeatureExtractor:
    """The tiny towers with the image tower trained on `train_rows` (saved to OUT/tower)."""
    towers = tiny_shot_towers(TOWER_WIDTH, training.seed)
    frames = np.stack([row.shot.frames[i] for row in train_rows for i in TOWER_FRAMES])
    labels: dict[str, list[str]] = {"character": [], "place": [], "time": []}
    for row in train_rows:
        for _ in TOWER_FRAMES:
            labels["character"].append(row.shot.instruction.character)
            labels["place"].append(row.shot.start.place)
            labels["time"].append(row.shot.start.time)
    train_world_tower(towers.image_encoder, frames, labels, training)
    towers.image_encoder.save_pretrained(out / TOWER_DIR)
    name = f"nano-world-tower-{TOWER_WIDTH}-{training.seed}-{training.steps}"
    return TowerFeatureExtractor(towers, name)


def _write_features(out: Path, rows: Sequence[_Row], extractor: TowerFeatureExtractor) -> None:
    for begin in range(0, len(rows), FEATURE_BATCH):
        batch = rows[begin : begin + FEATURE_BATCH]
        texts = [row.motion_text for row in batch]
        images = extractor.image_features(np.stack([row.shot.frames[0] for row in batch]))
        words = extractor.text_features(texts)
        for index, row in enumerate(batch):
            path = out / layout.features_path(row.video_id, row.shot_id)
            write_features(path, images[index], words[index], extractor.name, texts[index])


def _card(characters: str, splits: Sequence[str], counts: dict[str, int], seed: int) -> str:
    """The pipeline's card front matter (where the splits are) with the world's own text."""
    front = dataset.card(characters, splits, counts).split("\n# ", 1)[0]
    sizes = ", ".join(f"{counts[s]} {s}" for s in splits)
    return (
        f"{front}\n# AnimeGamer-Nano world: {characters}\n\n"
        f"Rendered by `python -m animegamer.nano world --seed {seed}`: {sizes} shots. Each row is "
        "a 17-frame 64×96 clip (`clip_path`, 8 fps) of a procedural anime world, with the exact "
        "instruction it was rendered from, the motion scope measured on its frames and its level "
        "(`levels.json`), and the state labels (social, entertainment, stamina). An episode is "
        "one continuous playthrough: the character never teleports between its shots. "
        "`reference-<name>.png` shows each character.\n"
    )


def _save_png(image: Image.Image, path: Path) -> None:
    image.save(path, format="PNG")


def _write_references(out: Path, characters: Sequence[str]) -> None:
    images = [reference_image(name) for name in characters]
    for name, image in zip(characters, images, strict=True):
        write_atomic(out / f"{layout.REFERENCE}-{name.lower()}.png", functools.partial(
            _save_png, image))
    sheet = Image.new("RGB", (sum(i.width for i in images), images[0].height))
    for index, image in enumerate(images):
        sheet.paste(image, (index * image.width, 0))
    write_atomic(out / f"{layout.REFERENCE}.png", lambda p: sheet.save(p, format="PNG"))


def build_world(options: WorldOptions) -> dict[str, Any]:
    """Render the world into `options.out` as a dataset; returns the report."""
    if options.shots < 1 or options.episode_length < 1:
        raise ValueError("--shots and --episode-length must be at least 1")
    for character in options.characters:
        look_of(character)
    out = options.out
    _prepare(out)
    rows = list(world_shots(options))
    with ThreadPoolExecutor(max(1, options.workers)) as pool:
        scopes = list(pool.map(lambda row: _measure_and_write(out, row), rows))
    test = choose_test_videos({row.video for row in rows}, options.test_fraction)
    train_rows = [row for row in rows if row.video not in test]
    _write_features(out, rows, world_feature_extractor(out, train_rows or rows, options.tower))
    levels = MotionLevels.fit(s for s in scopes if s > 0)
    table: dict[str, list[dict[str, Any]]] = {split: [] for split in dataset.SPLITS}
    for row, scope in zip(rows, scopes, strict=True):
        instruction, (sc, et, st) = row.shot.instruction, row.shot.labels
        table["test" if row.video in test else "train"].append({
            "shot_id": row.shot_id, "video": row.video,
            "start": row.start_frame / DECODE_FPS,
            "episode_id": f"{row.video_id}-e0001", "episode_index": row.episode_index,
            **instruction.fields(), "instruction": instruction.text,
            "motion_scope": scope, "motion_level": levels.level(scope),
            "sc": sc, "et": et, "st": st,
            "clip_path": layout.clip_path(row.video_id, row.shot_id),
            "features_path": layout.features_path(row.video_id, row.shot_id),
        })
    splits = dataset.write_splits(out, table)
    counts = {split: len(table[split]) for split in splits}
    names = " and ".join(options.characters)
    dataset.write_card(out, _card(names, splits, counts, options.seed))
    write_json(out / layout.LEVELS, levels.to_dict())
    _write_references(out, options.characters)
    videos = sorted({row.video for row in rows})
    report = make_report(
        character=names,
        videos=[{"video": v, "status": "done", "segments": 1, "too_short": 0,
                 "variable_frame_rate": False} for v in videos],
        videos_found=len(videos),
        stages={"clips": len(rows), "static": 0, "shots": len(rows), "answered": len(rows),
                "annotated": len(rows), "features": len(rows)},
        skips=[], rows={split: table[split] for split in splits}, levels=levels,
    )
    report["world"] = {
        "seed": options.seed, "shots": options.shots, "episode_length": options.episode_length,
        "characters": list(options.characters), "size": [HEIGHT, WIDTH], "fps": CLIP_FPS,
        "rules": dataclasses.asdict(options.rules),
    }
    write_json(out / layout.REPORT, report)
    return report
