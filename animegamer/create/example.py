"""`python -m animegamer.create example --out DIR`: a small video set to make a character from.

Shots of the Nano world's renderer (`animegamer.nano.world`), written as mp4 videos with hard
cuts, as a creator's footage would be: consecutive shots mostly share a background and differ
only in what the character does, where it stands, or the framing (a close-up). With them come
the reference image and the answers file, keyed by each shot's true start time.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from animegamer.data.annotate import ANSWER_FIELDS
from animegamer.game.rules import Instruction, make_instruction
from animegamer.nano.renderer import NanoRenderer, WorldState, state_labels
from animegamer.nano.sprites import reference_image
from animegamer.nano.vocabulary import MOTIONS
from animegamer.video.writer import write_mp4

EXAMPLE_CHARACTER = "Kiki"
"""The example's character: drawn with the Nano world's Qiqi sprite, named apart from the
registry's Qiqi so that it can be registered beside her."""
SPRITE = "Qiqi"
EXAMPLE_FPS = 8
"""The videos' frame rate: the renderer's (one picture per frame, no repeats)."""
SOURCE_SCALE = 2
"""The videos are the renderer's 64×96 frames enlarged twice (nearest neighbour): footage
larger than the clips, which the build scales down."""
CLOSE_UP = 1.6
"""A close-up shows the scene this many times larger, around the character."""
POSITIONS = (22.0, 74.0, 48.0)
"""Where the character stands in consecutive shots: far enough apart that a cut between two
shots on one background is a visible jump."""
SHOTS = (
    # (video, adverb, motion, time, place, close-up)
    ("walk.mp4", "slowly", "walk", "day", "town", False),
    ("walk.mp4", "gently", "jump", "day", "town", False),
    ("walk.mp4", "gently", "wave hand", "day", "town", True),
    ("walk.mp4", "calmly", "sit", "day", "town", False),
    ("walk.mp4", "quickly", "run", "day", "countryside", False),
    ("walk.mp4", "slowly", "walk", "day", "countryside", True),
    ("walk.mp4", "gently", "turn head", "day", "countryside", False),
    ("rest.mp4", "gently", "lie down", "evening", "grass", False),
    ("rest.mp4", "calmly", "sit", "evening", "grass", True),
    ("rest.mp4", "cheerfully", "talk", "evening", "grass", False),
    ("rest.mp4", "happily", "dance", "evening", "grass", False),
    ("rest.mp4", "slowly", "walk", "evening", "street", False),
    ("rest.mp4", "gently", "wave hand", "evening", "street", True),
    ("rest.mp4", "tiredly", "walk", "night", "street", False),
    ("fly.mp4", "quickly", "fly on broomstick", "day", "sky", False),
    ("fly.mp4", "smoothly", "fly on broomstick", "day", "sky", True),
    ("fly.mp4", "gently", "hold broom", "day", "cliff", False),
    ("fly.mp4", "excitedly", "jump", "day", "cliff", False),
    ("fly.mp4", "curiously", "turn head", "day", "cliff", True),
    ("fly.mp4", "quickly", "run", "day", "forest road", False),
)


@dataclass(frozen=True)
class ExampleShot:
    """A rendered shot of the example: its video, start (s), instruction and frames."""

    video: str
    start: float
    instruction: Instruction
    frames: np.ndarray


def close_up(frames: np.ndarray, x: float, factor: float = CLOSE_UP) -> np.ndarray:
    """The frames enlarged `factor` times around column `x`, the ground kept in view."""
    _, height, width, _ = frames.shape
    crop_h, crop_w = round(height / factor), round(width / factor)
    left = int(min(max(x - crop_w / 2, 0), width - crop_w))
    rows = np.linspace(height - crop_h, height - 1, height).round().astype(int)
    columns = np.linspace(left, left + crop_w - 1, width).round().astype(int)
    return frames[:, rows][:, :, columns]


def render_shots(
    shots: Sequence[tuple[str, str, str, str, str, bool]] = SHOTS,
    character: str = EXAMPLE_CHARACTER,
) -> list[ExampleShot]:
    """Render `shots` in order, each video's shots one after the other from 0 s."""
    renderer = NanoRenderer()
    rendered: list[ExampleShot] = []
    clock: dict[str, float] = {}
    for index, (video, adverb, motion, time, place, near) in enumerate(shots):
        fields = {"adverb": adverb, "motion": motion, "time": time, "place": place}
        instruction = make_instruction({"character": character, **fields})
        drawn = make_instruction({"character": SPRITE, **fields})
        spec = next(m for m in MOTIONS if motion in m.words)
        x = POSITIONS[index % len(POSITIONS)]
        start = WorldState(x=x, altitude=spec.altitude, facing=1 if index % 2 else -1,
                           time=time, place=place)
        frames = renderer.render(drawn, start).frames
        if near:
            frames = close_up(frames, x)
        begin = clock.get(video, 0)
        clock[video] = begin + len(frames)
        rendered.append(ExampleShot(video, begin / EXAMPLE_FPS, instruction, frames))
    return rendered


def answer(shot: ExampleShot) -> dict[str, object]:
    """The shot's true answer, in the annotation format."""
    spec = next(m for m in MOTIONS if shot.instruction.motion in m.words)
    social, entertainment, stamina = state_labels(spec)
    fields = shot.instruction.fields()
    values = {"character_present": True, **fields, "social": social,
              "entertainment": entertainment, "stamina": stamina}
    return {name: values[name] for name in ANSWER_FIELDS}


def write_example(out: Path, shots: Sequence[ExampleShot] | None = None) -> dict[str, Path]:
    """Write the videos, `reference.png` and `answers.jsonl` into `out`; returns their paths."""
    shots = render_shots() if shots is None else shots
    videos = out / "videos"
    for name in dict.fromkeys(shot.video for shot in shots):
        frames = np.concatenate([shot.frames for shot in shots if shot.video == name])
        big = frames.repeat(SOURCE_SCALE, axis=1).repeat(SOURCE_SCALE, axis=2)
        write_mp4(big, videos / name, fps=EXAMPLE_FPS)
    reference = out / "reference.png"
    reference_image(SPRITE).save(reference)
    answers = out / "answers.jsonl"
    lines = [json.dumps({"video": s.video, "start": s.start, "answer": answer(s)}) for s in shots]
    answers.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return {"videos": videos, "reference": reference, "answers": answers}


