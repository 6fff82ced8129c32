"""Cut detection (PySceneDetect's content detector) and cutting a frame stream into clips.

Words: a *segment* is the footage between two detected cuts; a *shot* (the paper's animation
shot, one row of the dataset) is one clip of `CLIP_FRAMES` frames at `CLIP_FPS` taken from a
segment. Clips never cross a cut; a segment shorter than one clip gives none (counted as too
short); a longer one gives consecutive clips.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
from scenedetect import ContentDetector, FrameTimecode
from scenedetect.detector import FlashFilter

from animegamer.data.decode import DECODE_FPS
from animegamer.video import DEFAULT_FPS

CLIP_FRAMES = 17
"""Frames of a shot: the VAE needs 4k+1, and 17 at 8 fps are the paper's 2-second clips."""
CLIP_FPS = DEFAULT_FPS
CLIP_STRIDE = DECODE_FPS // CLIP_FPS
"""Decoded frames per clip frame."""
CUT_THRESHOLD = 27.0
"""PySceneDetect's default content threshold."""
MIN_SEGMENT_FRAMES = DECODE_FPS // 2
"""A cut closer than this to the previous one is ignored (flashes, flicker)."""
DETECT_WIDTH = 256
"""Frames are shrunk to at most this width for detection (PySceneDetect's own default does
the same for speed)."""


class CutDetector:
    """Says, frame by frame, whether a frame starts a new segment.

    PySceneDetect's `ContentDetector` in *suppress* mode: it reports a cut on the frame where it
    happens, never later, so clips can be cut while the video streams by.
    """

    def __init__(self, threshold: float = CUT_THRESHOLD) -> None:
        self._detector = ContentDetector(
            threshold=threshold,
            min_scene_len=MIN_SEGMENT_FRAMES,
            filter_mode=FlashFilter.Mode.SUPPRESS,
        )

    def is_cut(self, index: int, frame: np.ndarray) -> bool:
        """Whether frame `index` (RGB, frames fed in order at `DECODE_FPS`) starts a segment."""
        import cv2

        height, width = frame.shape[:2]
        if width > DETECT_WIDTH:
            size = (DETECT_WIDTH, max(1, round(height * DETECT_WIDTH / width)))
            frame = cv2.resize(frame, size, interpolation=cv2.INTER_AREA)
        bgr = cv2.cvtColor(frame, cv2.COLOR_RGB2BGR)
        return bool(self._detector.process_frame(FrameTimecode(index, fps=float(DECODE_FPS)), bgr))


@dataclass(frozen=True)
class Clip:
    """A shot's frames [CLIP_FRAMES, H, W, 3] and where it starts (decoded frame index)."""

    start_frame: int
    frames: np.ndarray

    @property
    def start(self) -> float:
        """Start time in seconds from the video's first frame."""
        return self.start_frame / DECODE_FPS


@dataclass
class CutStats:
    segments: int = 0
    too_short: int = 0
    frames: int = 0


def cut_clips(
    frames: Iterable[np.ndarray], stats: CutStats, threshold: float = CUT_THRESHOLD
) -> Iterator[Clip]:
    """The clips of a stream of frames at `DECODE_FPS`, in order; `stats` counts as it goes.

    Holds at most one clip's frames.
    """
    detector = CutDetector(threshold)
    buffer: list[np.ndarray] = []
    clip_start = 0
    segment_clips = 0
    for index, frame in enumerate(frames):
        stats.frames = index + 1
        cut = detector.is_cut(index, frame)
        if index == 0 or cut:
            if index:
                stats.too_short += int(segment_clips == 0)
            stats.segments += 1
            buffer, clip_start, segment_clips = [], index, 0
        offset = index - clip_start
        if offset >= 0 and offset % CLIP_STRIDE == 0:
            buffer.append(frame)
        if len(buffer) == CLIP_FRAMES:
            yield Clip(clip_start, np.stack(buffer))
            segment_clips += 1
            buffer, clip_start = [], index + CLIP_STRIDE
    if stats.segments:
        stats.too_short += int(segment_clips == 0)
