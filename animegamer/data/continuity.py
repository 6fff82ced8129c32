"""Whether a content spike is a cut or fast motion: the foreground's discontinuity.

Between two shots on one background with one camera only the figure changes, its place and its
pose; PySceneDetect's scores of such a cut (content 4.9 to 6.2 on real game art) are those of a
fast attack inside a shot (up to 5.5). What tells them apart is what comes before and after:
inside a shot the figure returns to pictures seen just before (an attack winds up from its
stance and recovers to it, a walk cycles, an idle breathes), while after a cut nothing looks
like the other shot. `Continuity` keeps a second of small greyscale frames each side of a spike
and measures that: the least difference between a frame before and a frame after, as a share of
the difference across the spike itself (`discontinuity`): about 0 for motion that returns, near
1 for a cut.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from animegamer.data.decode import DECODE_FPS

WINDOW_S = 1.0
"""Seconds each side of a spike searched for a return: an attack or walk cycle."""
SMALL_WIDTH = 96
"""Frames are compared at this width."""
PIXEL_CHANGE = 20
"""A grey level difference above this is a changed pixel (compression noise stays below)."""


def small_grey(frame: np.ndarray) -> np.ndarray:
    """The frame (RGB) as greyscale `SMALL_WIDTH` wide, for comparisons."""
    import cv2

    grey = cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)
    height, width = grey.shape
    if width > SMALL_WIDTH:
        size = (SMALL_WIDTH, max(8, round(SMALL_WIDTH * height / width)))
        grey = cv2.resize(grey, size, interpolation=cv2.INTER_AREA)
    return grey.astype(np.int16)


def changed(a: np.ndarray, b: np.ndarray) -> float:
    """The share of pixels that differ between two `small_grey` frames."""
    return float((np.abs(a - b) > PIXEL_CHANGE).mean())


@dataclass
class Continuity:
    """A rolling store of the distinct frames (`add`) from which `discontinuity` is measured at
    a spike once `WINDOW_S` of frames after it have come (`ready`)."""

    window: int = round(WINDOW_S * DECODE_FPS)
    """Decoded frames each side."""
    _frames: deque[tuple[int, np.ndarray]] = field(default_factory=deque)

    def add(self, index: int, frame: np.ndarray, keep_from: int) -> None:
        """Store decoded frame `index` (RGB); frames before `keep_from` - window are dropped."""
        self._frames.append((index, small_grey(frame)))
        while self._frames and self._frames[0][0] < keep_from - self.window:
            self._frames.popleft()

    def ready(self, spike: int, last: int) -> bool:
        """Whether the frames after `spike` are all in, `last` being the newest."""
        return last >= spike + self.window

    def discontinuity(self, spike: int, since: int) -> float:
        """The least difference between a frame in the second before `spike` (from `since`
        on: the last cut) and one from `spike` on, over the difference across it (1.0 when
        nothing before it is stored)."""
        before = [g for i, g in self._frames if max(since, spike - self.window) <= i < spike]
        after = [g for i, g in self._frames if spike <= i < spike + self.window]
        if not before or not after:
            return 1.0
        across = changed(before[-1], after[0])
        if across == 0:
            return 0.0
        pairs = np.abs(np.stack(before)[:, None] - np.stack(after)[None]) > PIXEL_CHANGE
        return float(pairs.mean(axis=(2, 3)).min()) / across
