"""The fidelity measures of Nano's clips against what the world draws (docs/nano.md)."""

from __future__ import annotations

import numpy as np
import pytest

from animegamer.nano.fidelity import (
    centroid_travel,
    character_colours,
    median_frame,
    palette_share,
    sprite_mask,
    sprite_pixels,
    ssim,
)
from animegamer.nano.scene import render_background
from animegamer.nano.vocabulary import PLACES, TIMES

DAY = next(t for t in TIMES if t.name == "day")
TOWN = next(p for p in PLACES if p.name == "town")


def test_ssim_is_one_for_equal_images_and_the_closed_form_for_flat_ones():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (16, 24, 3), dtype=np.uint8)
    assert ssim(image, image) == pytest.approx(1.0)
    # Two flat images: no variance, so SSIM is the luminance term (2ab + C1) / (a² + b² + C1).
    a, b, c1 = 100.0, 150.0, (0.01 * 255) ** 2
    flat_a = np.full((16, 24, 3), a, dtype=np.uint8)
    flat_b = np.full((16, 24, 3), b, dtype=np.uint8)
    assert ssim(flat_a, flat_b) == pytest.approx((2 * a * b + c1) / (a * a + b * b + c1))
    assert ssim(image, 255 - image) < 0


def test_ssim_refuses_images_of_different_shapes():
    with pytest.raises(ValueError, match="shapes"):
        ssim(np.zeros((4, 4, 3), np.uint8), np.zeros((4, 5, 3), np.uint8))


def _clip_with_square(colour: tuple[int, int, int], path: list[tuple[int, int]]) -> np.ndarray:
    background = render_background(TOWN, DAY)
    frames = np.repeat(background[None], len(path), axis=0)
    for frame, (top, left) in zip(frames, path, strict=True):
        frame[top:top + 6, left:left + 4] = colour
    return frames


def test_a_square_in_qiqis_dress_colour_is_all_palette_and_grey_is_none():
    background = render_background(TOWN, DAY)
    dress = tuple(int(c) for c in character_colours("Qiqi", DAY)[2])
    inside = _clip_with_square(dress, [(30, 40)] * 3)
    assert sprite_pixels(inside, background) == 24
    assert palette_share(inside, background, "Qiqi", DAY) == 1.0
    grey = _clip_with_square((128, 255, 128), [(30, 40)] * 3)
    assert palette_share(grey, background, "Qiqi", DAY) == 0.0
    assert palette_share(background[None], background, "Qiqi", DAY) == 0.0


def test_the_centroid_travel_is_the_farthest_shift_from_the_first_frame():
    background = render_background(TOWN, DAY)
    clip = _clip_with_square((255, 0, 0), [(30, 10), (30, 40), (34, 25)])
    assert centroid_travel(clip, background) == pytest.approx(30.0)
    assert sprite_mask(clip, background).sum() == 3 * 24
    assert centroid_travel(background[None].repeat(3, axis=0), background) == 0.0


def test_the_median_frame_shows_the_background_through_a_moving_sprite():
    background = render_background(TOWN, DAY)
    clip = _clip_with_square((255, 0, 0), [(30, 10), (30, 40), (30, 70)])
    np.testing.assert_array_equal(median_frame(clip), background)
