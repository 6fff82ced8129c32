"""How faithfully a clip draws the Nano world: the measures of docs/nano.md's fidelity table.

Each compares a clip (uint8 [F, H, W, 3]) with what the world itself draws: the background
of the instructed place and time (`scene.render_background`) and the colours the world draws a
character with under that time's light. They read pixels only, so they score the world's own
render, a VAE's reconstruction and a decoder's clip alike.
"""

from __future__ import annotations

import cv2
import numpy as np

from animegamer.nano.scene import sprite_light
from animegamer.nano.sprites import (
    BROOM_STICK,
    BROOM_STRAW,
    CAR_BODY,
    CAR_GLASS,
    EYE,
    MOUTH,
    WHEEL,
    CharacterLook,
    look_of,
)
from animegamer.nano.vocabulary import TimeSpec

SPRITE_DIFFERENCE = 48
"""A pixel is the sprite's where it differs from the background by more than this (any
channel, 0..255)."""
PALETTE_DISTANCE = 28
"""A sprite pixel is in the character's colours within this distance (any channel) of one."""
PROPS = {"Qiqi": (BROOM_STICK, BROOM_STRAW), "Sosuke": (CAR_BODY, CAR_GLASS, WHEEL)}
_SSIM_C1 = (0.01 * 255) ** 2
_SSIM_C2 = (0.03 * 255) ** 2


def ssim(first: np.ndarray, second: np.ndarray) -> float:
    """Structural similarity of two uint8 images [H, W, 3] (or stacks [..., H, W, 3]), the
    mean over pixels and channels: Wang et al. 2004 with its 11×11 Gaussian window (σ 1.5)."""
    if first.shape != second.shape:
        raise ValueError(f"images of shapes {first.shape} and {second.shape}")
    images = first.reshape(-1, *first.shape[-3:]), second.reshape(-1, *second.shape[-3:])
    scores = [_ssim_map(a.astype(np.float64), b.astype(np.float64)).mean()
              for a, b in zip(*images, strict=True)]
    return float(np.mean(scores))


def _ssim_map(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    def blur(image: np.ndarray) -> np.ndarray:
        return cv2.GaussianBlur(image, (11, 11), 1.5, borderType=cv2.BORDER_REFLECT)

    mean_a, mean_b = blur(a), blur(b)
    var_a = blur(a * a) - mean_a**2
    var_b = blur(b * b) - mean_b**2
    covariance = blur(a * b) - mean_a * mean_b
    return ((2 * mean_a * mean_b + _SSIM_C1) * (2 * covariance + _SSIM_C2)) / (
        (mean_a**2 + mean_b**2 + _SSIM_C1) * (var_a + var_b + _SSIM_C2)
    )


def sprite_mask(frames: np.ndarray, background: np.ndarray) -> np.ndarray:
    """bool [F, H, W]: where the clip differs from the background by > `SPRITE_DIFFERENCE`."""
    difference = np.abs(frames.astype(np.int16) - background.astype(np.int16)[None])
    return difference.max(axis=-1) > SPRITE_DIFFERENCE


def character_colours(character: str, time: TimeSpec) -> np.ndarray:
    """[K, 3]: every colour the world draws `character` (its look, face and props) with
    under `time`'s light."""
    light = np.array(sprite_light(time.light))
    look: CharacterLook = look_of(character)
    colours = [look.hair, look.skin, look.top, look.bottom, look.shoes, look.accent, EYE, MOUTH,
               *PROPS.get(look.name, ())]
    return np.minimum(255.0, np.array(colours, dtype=np.float64) * light)


def palette_share(frames: np.ndarray, background: np.ndarray, character: str,
                  time: TimeSpec) -> float:
    """The share of the clip's sprite pixels within `PALETTE_DISTANCE` of one of the
    character's colours (0 where the clip has no sprite pixel)."""
    pixels = frames[sprite_mask(frames, background)].astype(np.float64)
    if not len(pixels):
        return 0.0
    table = character_colours(character, time)
    nearest = np.abs(pixels[:, None, :] - table[None]).max(axis=-1).min(axis=1)
    return float((nearest <= PALETTE_DISTANCE).mean())


def sprite_pixels(frames: np.ndarray, background: np.ndarray) -> float:
    """Sprite pixels per frame, on average."""
    return float(sprite_mask(frames, background).sum(axis=(1, 2)).mean())


def centroid_travel(frames: np.ndarray, background: np.ndarray) -> float:
    """The farthest the sprite's centroid gets from where it is in the first frame that has
    one, in pixels (0 without a sprite in two frames)."""
    masks = sprite_mask(frames, background)
    centres = [np.argwhere(mask).mean(axis=0) for mask in masks if mask.any()]
    if len(centres) < 2:
        return 0.0
    return float(max(np.linalg.norm(centre - centres[0]) for centre in centres[1:]))


def median_frame(frames: np.ndarray) -> np.ndarray:
    """The clip's temporal median frame, uint8 [H, W, 3] (a still background shows through a
    sprite that moves)."""
    return np.median(frames, axis=0).round().astype(np.uint8)
