"""Cut detection (PySceneDetect's content, adaptive, hash and histogram detectors, combined; what
the last three find is checked against the foreground's discontinuity) and cutting a frame
stream into clips.

Words: a *segment* is the footage between two detected cuts; a *shot* (the paper's animation
shot, one row of the dataset) is one clip of `CLIP_FRAMES` frames at `CLIP_FPS` taken from a
segment. Clips never cross a cut; a segment shorter than `MIN_SEGMENT_SECONDS` gives none
(counted as too short); a longer one gives consecutive clips.

A video is read twice: once small to find the cuts (`CutDetector`), once at the clip size to cut
the clips (`cut_clips`), so no frame waits in memory for a decision that comes later.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from scenedetect import (
    AdaptiveDetector,
    ContentDetector,
    FrameTimecode,
    HashDetector,
    HistogramDetector,
    StatsManager,
)
from scenedetect.detector import FlashFilter, SceneDetector

from animegamer.data.continuity import Continuity
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
(`ADAPTIVE_WINDOW` distinct frames each side) is a spike: a cut between two shots on one
background that differ only in where the character stands, what it does or the framing (content
scores 4.9 to 27, those of motion inside a shot), or a fast motion; `DISCONTINUITY_THRESHOLD`
tells which. PySceneDetect's default, 3.0, misses some cuts into a shot of fast motion."""
ADAPTIVE_WINDOW = 2
MIN_CONTENT = 3.0
"""The adaptive detector's floor: a spike below this content score is noise (a near-still
frame's compression changes give ratios in the hundreds at scores under 1; a figure's stance
change scores 2)."""
DISCONTINUITY_THRESHOLD = 0.3
"""A spike is a cut when no frame of the second after it comes closer to a frame of the second
before than this share of the change across it (`continuity`): inside a shot a fast attack
returns to its stance (0.0 in `tests/test_data_figure_cuts.py`), across a cut the figure's
place or pose stays changed (0.6 to 1.0 there)."""
MIN_SEGMENT_FRAMES = DECODE_FPS // 2
"""A cut closer than this to the previous one is ignored (flashes, flicker)."""
DETECT_WIDTH = 256
"""Frames are shrunk to at most this width for detection (PySceneDetect's own default does
the same for speed)."""


@dataclass(frozen=True)
class CutOptions:
    content_threshold: float = CUT_THRESHOLD
    adaptive_threshold: float = ADAPTIVE_THRESHOLD
    discontinuity_threshold: float = DISCONTINUITY_THRESHOLD


@dataclass(frozen=True)
class Cut:
    """A detected cut (or, with `cut` False, a spike judged as motion): the decoded frame it
    starts, the detectors that found it, and every score there."""

    frame: int
    found_by: tuple[str, ...]
    scores: dict[str, float]

    def record(self) -> dict[str, object]:
        """The cut as the build report lists it (seconds, detectors, scores)."""
        return {"start": round(self.frame / DECODE_FPS, 6), "found_by": list(self.found_by),
                **{name: round(value, 3) for name, value in self.scores.items()}}


def detection_size(height: int, width: int) -> tuple[int, int]:
    """The (height, width) frames are read at for detection: the clip's shape, at most
    `DETECT_WIDTH` wide."""
    if width <= DETECT_WIDTH:
        return height, width
    return max(16, round(height * DETECT_WIDTH / width)), DETECT_WIDTH


def _detectors(options: CutOptions) -> dict[str, SceneDetector]:
    """PySceneDetect's four detectors by name, at their defaults but for the thresholds named
    in `options`, the adaptive detector's floor and the minimum segment length. Only the
    content detector, whose finds are cuts, keeps that length itself (its flash filter uses
    it); the others report every frame, since one of theirs may be judged as motion and must
    not hide a cut that follows it (`CutDetector._settle` keeps cuts apart)."""
    return {
        "content": ContentDetector(threshold=options.content_threshold,
                                   min_scene_len=MIN_SEGMENT_FRAMES,
                                   filter_mode=FlashFilter.Mode.SUPPRESS),
        "adaptive": AdaptiveDetector(adaptive_threshold=options.adaptive_threshold,
                                     min_scene_len=1, window_width=ADAPTIVE_WINDOW,
                                     min_content_val=MIN_CONTENT),
        "hash": HashDetector(min_scene_len=1),
        "histogram": HistogramDetector(min_scene_len=1),
    }


SCORES = {"content": "content_val", "adaptive_ratio": "adaptive_ratio",
          "hash_distance": "hash_dist", "histogram_correlation": "hist_diff"}
"""The scores a cut records, by the start of the metric's name in PySceneDetect's stats."""


@dataclass
class CutDetector:
    """PySceneDetect's content, adaptive, hash and histogram detectors, combined as its
    `SceneManager` combines detectors (a cut any finds is a cut), except that what the adaptive,
    hash or histogram detector finds without the content detector is a cut only when the
    foreground is discontinuous there (`continuity`): on one background with one camera they
    also fire at fast motion. Fed frame by frame at `DECODE_FPS`.

    Each distinct picture is fed once: ffmpeg repeats the frames of a video slower than 24 fps
    (a 10 fps video repeats each 2 or 3 times), and the zero score of a repeat would make every
    change look like a spike to the adaptive detector. `cuts` grows as frames come, so a video
    that breaks off keeps the cuts found before; `spikes` lists the findings judged as motion.
    A `StatsManager` holds the scores."""

    options: CutOptions = field(default_factory=CutOptions)
    cuts: list[Cut] = field(default_factory=list)
    spikes: list[Cut] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stats = StatsManager()
        self._detectors = _detectors(self.options)
        for detector in self._detectors.values():
            detector.stats_manager = self._stats
        self._keys = {
            name: next(key for d in self._detectors.values() for key in d.get_metrics()
                       if key.startswith(prefix))
            for name, prefix in SCORES.items()
        }
        self._continuity = Continuity()
        self._found: dict[int, set[str]] = {}
        """Frames some detector found, not decided yet: a decision waits for the second after."""

    def feed(self, frames: Iterable[np.ndarray]) -> list[Cut]:
        """Feed every frame (RGB, in order); returns the cuts, in order."""
        import cv2

        previous: np.ndarray | None = None
        index = 0
        try:
            for index, frame in enumerate(frames):
                if previous is not None and np.array_equal(frame, previous):
                    continue
                previous = frame
                self._continuity.add(index, frame, min([*self._found, index]))
                timecode = FrameTimecode(index, fps=float(DECODE_FPS))
                bgr = cv2.cvtColor(frame, cv2.COLOR_RGB2BGR)
                for name, detector in self._detectors.items():
                    self._add(name, detector.process_frame(timecode, bgr))
                self._settle(index)
        finally:  # a stream that breaks off still decides what it found
            end = FrameTimecode(index, fps=float(DECODE_FPS))
            for name, detector in self._detectors.items():
                self._add(name, detector.post_process(end))
            self._settle(None)
        return self.cuts

    def _add(self, name: str, found: Sequence[FrameTimecode]) -> None:
        for timecode in found:
            self._found.setdefault(timecode.frame_num, set()).add(name)

    def _settle(self, last: int | None) -> None:
        """Decide, in order, the found frames whose second after has come (all of them at the
        end, `last` None). The content detector's frames are cuts; the others' (a spike of the
        adaptive detector, a hash or histogram change) when their content score is at least
        `MIN_CONTENT` and the foreground is discontinuous there. A cut within
        `MIN_SEGMENT_FRAMES` of the previous one is dropped."""
        while self._found:
            frame = min(self._found)
            if last is not None and not self._continuity.ready(frame, last):
                return
            names = self._found.pop(frame)
            since = self.cuts[-1].frame if self.cuts else 0
            scores = self._scores(frame)
            scores["discontinuity"] = self._continuity.discontinuity(frame, since)
            confirmed = "content" in names or (
                scores["content"] >= MIN_CONTENT
                and scores["discontinuity"] >= self.options.discontinuity_threshold
            )
            if not confirmed:
                self.spikes.append(Cut(frame, tuple(sorted(names)), scores))
            elif not self.cuts or frame - since >= MIN_SEGMENT_FRAMES:
                self.cuts.append(Cut(frame, tuple(sorted(names)), scores))

    def _scores(self, frame: int) -> dict[str, float]:
        timecode = FrameTimecode(frame, fps=float(DECODE_FPS))
        values = self._stats.get_metrics(timecode, list(self._keys.values()))
        return {name: float(value or 0.0) for name, value in zip(self._keys, values, strict=True)}


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
