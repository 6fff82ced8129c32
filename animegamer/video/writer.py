"""Frames → browser-playable mp4 (H.264, yuv420p, even dimensions, fast start)."""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

import imageio_ffmpeg
import numpy as np

DEFAULT_FPS = 8
QUALITY = 7
"""imageio-ffmpeg's 1..10 scale; 7 is libx264 CRF 15 (the clips are short, keep them sharp)."""


def _even(frames: np.ndarray) -> np.ndarray:
    """Pad odd heights/widths by repeating the last row/column: yuv420p needs even dimensions
    (imageio-ffmpeg would otherwise rescale the picture to a multiple of 16)."""
    _, height, width, _ = frames.shape
    pad = ((0, 0), (0, height % 2), (0, width % 2), (0, 0))
    return np.pad(frames, pad, mode="edge") if any(p[1] for p in pad) else frames


def h264_writer(
    path: str | Path, width: int, height: int, fps: float
) -> Generator[None, np.ndarray | bytes | None, None]:
    """A started imageio-ffmpeg writer of browser-playable H.264: `send` frames, then `close`."""
    writer = imageio_ffmpeg.write_frames(
        str(path),
        (width, height),
        fps=fps,
        codec="libx264",
        pix_fmt_out="yuv420p",
        quality=QUALITY,
        macro_block_size=2,
        output_params=["-movflags", "+faststart"],
    )
    writer.send(None)
    return writer


def write_mp4(frames: np.ndarray, path: str | Path, fps: int = DEFAULT_FPS) -> Path:
    """Write uint8 frames [F, H, W, 3] as an H.264 mp4 that browsers play; returns the path."""
    frames = np.asarray(frames)
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3 or not len(frames):
        raise ValueError(
            f"frames must be uint8 [F, H, W, 3] with F > 0, got {frames.dtype} {frames.shape}"
        )
    frames = _even(frames)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _, height, width, _ = frames.shape
    writer = h264_writer(path, width, height, fps)
    for frame in frames:
        writer.send(np.ascontiguousarray(frame))
    writer.close()
    return path
