"""Motion scope from optical flow, and the fitted motion levels (docs/design.md §9)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from animegamer.data.decode import read_clip
from animegamer.data.flow import MotionLevels, motion_scope, motion_stats
from animegamer.video.writer import write_mp4


def moving_square(speed: float, size: tuple[int, int] = (64, 96), frames: int = 17) -> np.ndarray:
    """A textured square crossing a grey background at `speed` px/frame (of a 96-px width)."""
    height, width = size
    scale = width / 96
    video = np.full((frames, height, width, 3), 60, np.uint8)
    side = round(20 * scale)
    texture = np.indices((side, side)).sum(axis=0) % 7 * 30
    for index in range(frames):
        x = round((4 + index * speed) * scale)
        top = height // 3
        video[index, top : top + side, x : x + side] = texture[..., None] + 40
    return video


def test_scope_grows_with_speed_and_is_zero_when_static():
    scopes = [motion_scope(moving_square(speed)) for speed in (1, 2, 4)]
    assert scopes[0] < scopes[1] < scopes[2]
    # Pixels of the 256-px-wide working copy per frame: 1 px at 96 px wide is 2.7 px there.
    assert 1.5 < scopes[0] < 4
    assert motion_scope(moving_square(0)) == 0.0


def test_a_static_clip_stays_static_through_h264(tmp_path):
    frames = read_clip(write_mp4(moving_square(0, (480, 720)), tmp_path / "still.mp4"))
    stats = motion_stats(frames)
    assert stats.moving < 0.002 and stats.scope < 0.5


def test_scope_does_not_depend_on_the_clip_size():
    small, large = motion_scope(moving_square(2)), motion_scope(moving_square(2, (240, 360)))
    assert large == pytest.approx(small, rel=0.25)


@pytest.mark.parametrize(
    ("frames", "message"),
    [
        (np.zeros((1, 8, 8, 3), np.uint8), "F≥2"),
        (np.zeros((3, 8, 8, 3), np.float32), "uint8"),
        (np.zeros((3, 8, 8), np.uint8), "uint8"),
    ],
)
def test_bad_frames_are_refused(frames, message):
    with pytest.raises(ValueError, match=message):
        motion_scope(frames)


def test_unknown_method_is_refused():
    with pytest.raises(ValueError, match="unknown motion scope method"):
        motion_scope(moving_square(1), method="memflow")


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is not None, reason="has torchvision")
def test_raft_without_torchvision_says_so():
    with pytest.raises(ValueError, match="needs torchvision"):
        motion_scope(moving_square(1), method="raft")


def test_levels_fit_level_value_round_trip():
    scopes = [0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 5.0, 8.0, 12.0, 20.0]
    levels = MotionLevels.fit(scopes)
    assert levels.boundaries == pytest.approx(np.quantile(scopes, [0.2, 0.4, 0.6, 0.8]))
    assert [levels.level(s) for s in scopes] == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert levels.values == pytest.approx([0.6, 1.25, 2.5, 6.5, 16.0])
    for level in range(1, 6):
        assert levels.level(levels.value(level)) == level
    saved = json.loads(json.dumps(levels.to_dict()))
    assert MotionLevels.from_dict(saved) == levels
    assert levels.level(0.0) == 1 and levels.level(1e9) == 5


def test_levels_with_ties_leave_no_level_without_a_value():
    levels = MotionLevels.fit([1.0] * 9 + [9.0])
    assert levels.boundaries == (1.0, 1.0, 1.0, 1.0)
    assert levels.values == (1.0, 1.0, 1.0, 1.0, 9.0)
    assert (levels.level(1.0), levels.level(9.0)) == (1, 5)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"boundaries": [1, 2, 3], "values": [1, 2, 3, 4, 5]}, "4 finite boundaries"),
        ({"boundaries": [1, 2, 3, 4], "values": [0, 2, 3, 4, 5]}, "must be positive"),
        ({"boundaries": [4, 3, 2, 1], "values": [1, 2, 3, 4, 5]}, "must not decrease"),
        ({"boundaries": [1, 2, 3, 4], "values": [1, 2, 3, 4, float("nan")]}, "finite values"),
        ({"boundaries": [1, 2, 3, 4]}, "fields 'boundaries' and 'values'"),
    ],
)
def test_bad_level_configs_are_refused(data, message):
    with pytest.raises(ValueError, match=message):
        MotionLevels.from_dict(data)


def test_fitting_needs_positive_scopes():
    for scopes in ([], [0.0, 1.0], [1.0, float("inf")]):
        with pytest.raises(ValueError, match="all positive"):
            MotionLevels.fit(scopes)
    with pytest.raises(ValueError, match=r"1\.\.5"):
        MotionLevels.fit([1.0]).value(6)
