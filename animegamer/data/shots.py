"""Cut detection (PySceneDetect's content and adaptive detectors, combined) and cutting a frame
stream into clips.

Words: a *segment* is the footage between two detected cuts; a *shot* (the paper's animation
shot, one row of the dataset) is one clip of `CLIP_FRAMES` frames at `CLIP_FPS` taken from a
segment. Clips never cross a cut; a segment shorter than `MIN_SEGMENT_SECONDS` gives none
(counted as too short); a longer one gives consecutive clips.

A video is read twice: once small to find the cuts (`detect_cuts`), once at the clip size to cut
the clips (`cut_clips`), so no frame waits in memory for a decision that comes later.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from scenedetect import AdaptiveDetector, ContentDetector, FrameTimecode, StatsManager
from scenedetect.detector import FlashFilter

from animegamer.data.decode import DECODE_FPS
from animegamer.video.writer import DEFAULT_FPS

CLIP_FRAMES = 17
"""Frames of a shot: the VAE needs 4k+1, and 17 at 8 fps are the paper's 2-second clips."""
CLIP_FPS = DEFAULT_FPS
CLIP_STRIDE = DECODE_FPS // CLIP_FPS
"""Decoded frames per clip frame."""
CLIP_SPAN = (CLIP_FRAMES - 1) * CLIP_STRIDE
"""Decoded frames from a clip's first frame to its last: 48, i.e. 2.0 s."""
MIN_SEGMENT_SECONDS = CLIP_SPAN / DECODE_FPS
"""The shortest segment that gives a clip: 2.0 s. Its clip's last frame (t = 2.0 s) would be the
next shot's first, so a segment of 2.0 s to 2.042 s ends its clip on its own last frame, 1/24 s
early, rather than being dropped."""
CUT_THRESHOLD = 27.0
"""PySceneDetect's default content threshold: a change of colour and edges this large is a cut
wherever it happens."""
ADAPTIVE_THRESHOLD = 2.5
"""A frame whose content score is this many times the mean of its neighbours'
(`ADAPTIVE_WINDOW` distinct frames each side) starts a new segment. This finds the cuts the
content threshold misses, between two shots on one background that differ only in where the
character stands, what it does or the framing: their content scores (5 to 27) are those of
motion inside a shot, but they stand out from the frames around them. On the example videos
(`animegamer.create.example`) such cuts score 2.9 to 120 and motion inside a shot at most 1.3;
a cut into a shot of fast motion scores lowest. PySceneDetect's default, 3.0, misses some."""
ADAPTIVE_WINDOW = 2
MIN_CONTENT = 6.0
"""The adaptive detector's floor: a spike below this content score is motion, not a cut
(PySceneDetect's default, 15, misses cuts between shots on one background; a small square
turning back scores 5.5 in `tests/test_data_shots.py`)."""
MIN_SEGMENT_FRAMES = DECODE_FPS // 2
"""A cut closer than this to the previous one is ignored (flashes, flicker)."""
DETECT_WIDTH = 256
"""Frames are shrunk to at most this width for detection (PySceneDetect's own default does
the same for speed)."""


@dataclass(frozen=True)
class CutOptions:
    content_threshold: float = CUT_THRESHOLD
    adaptive_threshold: float = ADAPTIVE_THRESHOLD


@dataclass(frozen=True)
class Cut:
    """A detected cut: the decoded frame it starts and its scores (the content score, and how
    many times its neighbours' mean that is)."""

    frame: int
    content: float
    ratio: float

    def record(self) -> dict[str, float]:
        """The cut as the build report lists it (seconds, scores)."""
        return {"start": round(self.frame / DECODE_FPS, 6), "content": round(self.content, 3),
                "adaptive_ratio": round(self.ratio, 3)}


def detection_size(height: int, width: int) -> tuple[int, int]:
    """The (height, width) frames are read at for detection: the clip's shape, at most
    `DETECT_WIDTH` wide."""
    if width <= DETECT_WIDTH:
        return height, width
    return max(16, round(height * DETECT_WIDTH / width)), DETECT_WIDTH


@dataclass
class CutDetector:
    """PySceneDetect's `ContentDetector` and `AdaptiveDetector`, combined as its `SceneManager`
    combines detectors (a cut either finds is a cut), fed frame by frame at `DECODE_FPS`.

    Each distinct picture is fed once: ffmpeg repeats the frames of a video slower than 24 fps
    (a 10 fps video repeats each 2 or 3 times), and the zero score of a repeat would make every
    change look like a spike to the adaptive detector. `cuts` grows as frames come, so a video
    that breaks off keeps the cuts found before. A `StatsManager` holds the scores."""

    options: CutOptions = field(default_factory=CutOptions)
    cuts: list[Cut] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stats = StatsManager()
        self._detectors = [
            ContentDetector(threshold=self.options.content_threshold,
                            min_scene_len=MIN_SEGMENT_FRAMES,
                            filter_mode=FlashFilter.Mode.SUPPRESS),
            AdaptiveDetector(adaptive_threshold=self.options.adaptive_threshold,
                             min_scene_len=MIN_SEGMENT_FRAMES, window_width=ADAPTIVE_WINDOW,
                             min_content_val=MIN_CONTENT),
        ]
        for detector in self._detectors:
            detector.stats_manager = self._stats
        self._keys = [ContentDetector.FRAME_SCORE_KEY, self._detectors[1].get_metrics()[-1]]
        self._previous: np.ndarray | None = None
        self._last_index = 0
        self._found: list[FrameTimecode] = []

    def feed(self, frames: Iterable[np.ndarray]) -> list[Cut]:
        """Feed every frame (RGB, in order); returns the cuts, in order."""
        import cv2

        for index, frame in enumerate(frames):
            self._last_index = index
            if self._previous is not None and np.array_equal(frame, self._previous):
                continue
            self._previous = frame
            timecode = FrameTimecode(index, fps=float(DECODE_FPS))
            bgr = cv2.cvtColor(frame, cv2.COLOR_RGB2BGR)
            for detector in self._detectors:
                self._add(detector.process_frame(timecode, bgr))
        end = FrameTimecode(self._last_index, fps=float(DECODE_FPS))
        for detector in self._detectors:
            self._add(detector.post_process(end))
        return self.cuts

    def _add(self, found: Sequence[FrameTimecode]) -> None:
        for timecode in found:
            frame = timecode.frame_num
            if all(abs(frame - other.frame_num) >= MIN_SEGMENT_FRAMES for other in self._found):
                self._found = sorted([*self._found, timecode], key=lambda t: t.frame_num)
        self.cuts = [self._cut(timecode) for timecode in self._found]

    def _cut(self, timecode: FrameTimecode) -> Cut:
        content, ratio = self._stats.get_metrics(timecode, self._keys)
        return Cut(timecode.frame_num, float(content or 0.0), float(ratio or 0.0))


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


@dataclass
class _Segment:
    """The clip being gathered: its start, its frames so far, and the last frame seen."""

    clip_start: int
    buffer: list[np.ndarray] = field(default_factory=list)
    clips: int = 0
    last: np.ndarray | None = None
    last_index: int = -1

    def end_clip(self) -> Clip | None:
        """At the segment's end: the clip whose 17th frame falls just past it, when the
        segment covers the clip's 2.0 s (`MIN_SEGMENT_SECONDS`)."""
        last = self.last
        if last is None or len(self.buffer) != CLIP_FRAMES - 1:
            return None
        if self.last_index - self.clip_start == CLIP_SPAN - 1:
            self.clips += 1
            return Clip(self.clip_start, np.stack([*self.buffer, last]))
        return None


def cut_clips(
    frames: Iterable[np.ndarray], cuts: Sequence[int], stats: CutStats
) -> Iterator[Clip]:
    """The clips of a stream of frames at `DECODE_FPS` whose segments start at the frames
    `cuts` (from `CutDetector`), in order; `stats` counts as it goes.

    Holds at most one clip's frames.
    """
    starts = set(cuts)
    segment: _Segment | None = None
    for index, frame in enumerate(frames):
        stats.frames = index + 1
        if segment is None or index in starts:
            if segment is not None:
                last_clip = segment.end_clip()
                if last_clip is not None:
                    yield last_clip
                stats.too_short += int(segment.clips == 0)
            stats.segments += 1
            segment = _Segment(index)
        offset = index - segment.clip_start
        if offset >= 0 and offset % CLIP_STRIDE == 0:
            segment.buffer.append(frame)
        segment.last, segment.last_index = frame, index
        if len(segment.buffer) == CLIP_FRAMES:
            yield Clip(segment.clip_start, np.stack(segment.buffer))
            segment.clips += 1
            segment.buffer, segment.clip_start = [], index + CLIP_STRIDE
    if segment is not None:
        last_clip = segment.end_clip()
        if last_clip is not None:
            yield last_clip
        stats.too_short += int(segment.clips == 0)
