"""write_mp4: H.264 / yuv420p mp4s that read back with the right frames."""

from __future__ import annotations

from pathlib import Path

import imageio.v2 as imageio
import numpy as np
import pytest

from animegamer.video.writer import write_mp4


def read_mp4(path: Path) -> tuple[np.ndarray, dict]:
    reader = imageio.get_reader(str(path), format="FFMPEG")
    try:
        return np.stack(list(reader.iter_data())), reader.get_meta_data()
    finally:
        reader.close()


def _gradient_clip(frames: int, height: int, width: int) -> np.ndarray:
    y, x = np.mgrid[0:height, 0:width]
    clip = [
        np.stack([x * 255 // width, y * 255 // height, np.full_like(x, 8 * f)], -1)
        for f in range(frames)
    ]
    return np.asarray(clip, dtype=np.uint8)


def test_mp4_reads_back(tmp_path):
    clip = _gradient_clip(17, 64, 96)
    path = write_mp4(clip, tmp_path / "sub" / "clip.mp4")
    assert path == tmp_path / "sub" / "clip.mp4"
    frames, meta = read_mp4(path)
    assert frames.shape == (17, 64, 96, 3)
    assert meta["codec"] == "h264" and meta["pix_fmt"].startswith("yuv420p")
    assert meta["fps"] == 8.0
    assert np.abs(frames.astype(int) - clip).mean() < 4


def test_odd_sizes_are_padded_to_even(tmp_path):
    frames, meta = read_mp4(write_mp4(_gradient_clip(3, 33, 45), tmp_path / "odd.mp4", fps=4))
    assert frames.shape == (3, 34, 46, 3)
    assert meta["fps"] == 4.0


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros((2, 8, 8, 3), np.float32),
        np.zeros((8, 8, 3), np.uint8),
        np.zeros((2, 8, 8, 4), np.uint8),
        np.zeros((0, 8, 8, 3), np.uint8),
    ],
)
def test_rejects_what_is_not_uint8_rgb_frames(tmp_path, bad):
    with pytest.raises(ValueError, match="uint8"):
        write_mp4(bad, tmp_path / "bad.mp4")
