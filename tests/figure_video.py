"""Generated footage like a game's unit animations: one painted background and camera, a figure
(a spearman: body, head, shield, spear) that idles, walks or attacks with a fast lunge, and hard
cuts where only the figure's place and pose change. For the cut-detection tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import imageio_ffmpeg
import numpy as np

SIZE = (360, 640)
"""(height, width) of the generated videos."""


@dataclass(frozen=True)
class FigureShot:
    """A shot: where the figure stands (x, fraction of the width), what it does, for how long
    (seconds), and which way it faces."""

    x: float
    action: str  # "idle", "walk" or "attack"
    seconds: float
    facing: int = 1


def background(size: tuple[int, int] = SIZE, seed: int = 0) -> np.ndarray:
    """A painted field: sky gradient, hills, a textured ground with tufts and stones."""
    height, width = size
    rng = np.random.default_rng(seed)
    rows = np.linspace(0, 1, height)[:, None]
    sky = np.stack([110 + 60 * rows, 150 + 50 * rows, 210 + 20 * rows], -1) * np.ones((1, width, 1))
    image = sky.copy()
    columns = np.arange(width)
    hill = (0.45 + 0.05 * np.sin(columns / 53.0) + 0.03 * np.sin(columns / 17.0)) * height
    ground = rows * height > hill[None, :]
    image[ground] = (70, 120, 55)
    texture = rng.normal(0, 9, (height, width, 1))
    image[ground] += texture[ground]
    for _ in range(60):  # tufts and stones
        cy, cx = rng.integers(int(0.55 * height), height), rng.integers(0, width)
        r = int(rng.integers(2, 6))
        colour = rng.choice([(50, 95, 40), (130, 125, 115), (95, 140, 60)])
        image[max(cy - r, 0):cy + r, max(cx - r, 0):cx + r] = colour
    return np.clip(image, 0, 255).astype(np.uint8)


def _box(image: np.ndarray, top: float, left: float, height: float, width: float,
         colour: tuple[int, int, int]) -> None:
    row, column = round(top), round(left)
    image[max(row, 0):max(row + int(height), 0), max(column, 0):max(column + int(width), 0)] = (
        colour)


def draw_figure(image: np.ndarray, x: float, lean: float, reach: float, step: float,
                facing: int) -> None:
    """The spearman with its feet at 80 % of the height, centred on column `x` (pixels):
    `lean` shifts the body forward (px), `reach` extends the spear (px), `step` spreads the legs."""
    height, _ = image.shape[:2]
    unit = height / 240
    feet = 0.8 * height
    body_h, body_w = 70 * unit, 26 * unit
    cx = x + facing * lean
    legs_top = feet - 34 * unit
    for side in (-1, 1):
        _box(image, legs_top, cx - 6 * unit + side * (step + 6 * unit) - 4 * unit, 34 * unit,
             9 * unit, (60, 50, 45))
    body_top = legs_top - body_h
    _box(image, body_top, cx - body_w / 2, body_h, body_w, (170, 40, 35))  # red tunic
    _box(image, body_top - 24 * unit, cx - 11 * unit, 24 * unit, 22 * unit, (225, 190, 150))
    _box(image, body_top - 30 * unit, cx - 13 * unit, 9 * unit, 26 * unit, (150, 150, 160))
    shield_x = cx - facing * 20 * unit - 12 * unit
    _box(image, body_top + 10 * unit, shield_x, 40 * unit, 24 * unit, (200, 170, 40))
    spear_y = body_top + 24 * unit
    length = 60 * unit + reach
    start = cx if facing > 0 else cx - length
    _box(image, spear_y, start, 4 * unit, length, (110, 80, 50))
    tip = cx + facing * length
    _box(image, spear_y - 4 * unit, tip - 6 * unit, 12 * unit, 12 * unit, (220, 220, 230))


ATTACK = [(0, 0), (-6, -10), (-10, -16), (28, 70), (40, 110), (40, 110), (30, 80), (16, 40),
          (6, 12), (0, 0), (0, 0), (0, 0)]
"""(lean, reach) of an attack's frames at 12 frames per second: wind-up, a lunge of 50 px and
110 px of spear in two frames at a 360-pixel height, hold, recovery."""


def shot_frames(shot: FigureShot, fps: float, base: np.ndarray) -> list[np.ndarray]:
    """The frames of `shot` at `fps` on `base`."""
    height, width = base.shape[:2]
    unit = height / 240
    frames = []
    for index in range(round(shot.seconds * fps)):
        t = index / fps
        x, lean, reach, step = shot.x * width, 0.0, 0.0, 0.0
        if shot.action == "idle":
            lean = 2 * unit * np.sin(2 * np.pi * t)
        elif shot.action == "walk":
            x += shot.facing * 40 * unit * t
            step = 8 * unit * np.sin(2 * np.pi * 2 * t)
        else:
            lean, reach = ATTACK[int(t * 12) % len(ATTACK)]
            lean, reach = lean * unit, reach * unit
        image = base.copy()
        draw_figure(image, x, lean, reach, step, shot.facing)
        frames.append(image)
    return frames


def drifting_clouds(frame: np.ndarray, index: int, speed: float) -> None:
    """Two clouds in the sky, `speed` pixels further right each frame (at 640 wide)."""
    width = frame.shape[1]
    scale = width / 640
    left = int(index * speed * scale) % width
    for x in (left, (left + width // 2) % width):
        frame[int(20 * scale):int(60 * scale), x:x + int(90 * scale)] = (235, 235, 240)


def write_figure_video(path: Path, shots: list[FigureShot], fps: float = 24,
                       size: tuple[int, int] = SIZE, clouds: float = 0.0) -> list[float]:
    """Write `shots` one after another on one background (with `drifting_clouds` at `clouds`
    pixels a frame, when given); returns each cut's time (s)."""
    base = background(size)
    height, width = size
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = imageio_ffmpeg.write_frames(str(path), (width, height), fps=fps, macro_block_size=2,
                                         quality=8)
    writer.send(None)
    cuts, frames = [], 0
    for shot in shots:
        if frames:
            cuts.append(frames / fps)
        for frame in shot_frames(shot, fps, base):
            if clouds:
                drifting_clouds(frame, frames, clouds)
            writer.send(frame)
            frames += 1
    writer.close()
    return cuts
