"""Reading videos and cutting them into shots: cuts at known times, VFR, bad videos.

Also the procedural test videos the other `test_data_*` files import (`make_video`): segments of
distinct colour and texture with a moving square, hard cuts at known frames, written with
imageio-ffmpeg.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import imageio_ffmpeg
import numpy as np
import pytest

from animegamer.data.decode import DECODE_FPS, FrameStream, VideoInfo, probe
from animegamer.data.errors import VideoError
from animegamer.data.extract import orientation_problem
from animegamer.data.shots import CLIP_FRAMES, CutDetector, CutStats, cut_clips

SOURCE_SIZE = (96, 144)
CLIP_SIZE = (64, 96)
PALETTE = np.array(
    [(230, 40, 40), (20, 20, 20), (40, 200, 60), (150, 30, 200), (240, 220, 40), (30, 60, 220)]
)
"""Segment colours in order; each differs from the next by a content score above 30."""


def segment_frames(index: int, length: int, speed: float, size: tuple[int, int]) -> Iterator:
    """Frames of segment `index`: its own colour and soft stripes, a square moving `speed` px/frame
    to and fro (a square that wrapped around would jump, and a jump is a cut)."""
    height, width = size
    base = np.empty((height, width, 3), np.uint8)
    base[:] = PALETTE[index % len(PALETTE)]
    base[:, :: 8 + 4 * (index % 3)] = base[:, :: 8 + 4 * (index % 3)] * 3 // 4
    for frame in range(length):
        image = base.copy()
        travel = width - 32
        x = 8 + int(travel - abs((frame * speed) % (2 * travel) - travel))
        image[height // 3 : height // 3 + 20, x : x + 20] = 255 - PALETTE[index % len(PALETTE)]
        yield image


def make_video(
    path: Path,
    segments: Sequence[int],
    speeds: Sequence[float] | None = None,
    size: tuple[int, int] = SOURCE_SIZE,
    vfr_after: int | None = None,
) -> Path:
    """An H.264 video at 24 fps of `segments` (frame counts), hard cuts between them.

    `vfr_after=N`: frames after the N-th last twice as long (a variable-frame-rate file).
    """
    speeds = speeds or [2.0] * len(segments)
    params = []
    if vfr_after is not None:
        params = ["-vf", f"setpts='if(lt(N,{vfr_after}),N,2*N-{vfr_after})/{DECODE_FPS}/TB'",
                  "-fps_mode", "vfr"]
    height, width = size
    writer = imageio_ffmpeg.write_frames(
        str(path), (width, height), fps=DECODE_FPS, macro_block_size=2, output_params=params
    )
    writer.send(None)
    for index, (length, speed) in enumerate(zip(segments, speeds, strict=True)):
        for frame in segment_frames(index, length, speed, size):
            writer.send(frame)
    writer.close()
    return path


def cuts_of(path: Path) -> list[int]:
    """The frames the detector finds cuts at."""
    return [cut.frame for cut in CutDetector().feed(FrameStream(path, probe(path), *CLIP_SIZE))]


def clips_of(path: Path) -> tuple[list[int], CutStats, FrameStream]:
    stream = FrameStream(path, probe(path), *CLIP_SIZE)
    stats = CutStats()
    starts = [clip.start_frame for clip in cut_clips(stream, cuts_of(path), stats)]
    return starts, stats, stream


def test_shots_start_at_the_cuts(tmp_path):
    video = make_video(tmp_path / "cuts.mp4", [60, 50, 90, 60])
    starts, stats, stream = clips_of(video)
    assert starts == [0, 60, 110, 200]
    assert (stats.segments, stats.too_short, stats.frames) == (4, 0, 260)
    assert not stream.variable_frame_rate


def test_clips_are_17_frames_at_8_fps_of_the_clip_size(tmp_path):
    video = make_video(tmp_path / "one.mp4", [60], speeds=[1.0])
    stream = FrameStream(video, probe(video), *CLIP_SIZE)
    (clip,) = cut_clips(stream, [], CutStats())
    assert clip.frames.shape == (CLIP_FRAMES, *CLIP_SIZE, 3) and clip.frames.dtype == np.uint8
    # The square moves 1 px per source frame: 3 source frames (1/8 s) per clip frame, and
    # 144 → 96 px scales that to 2 px.
    row = CLIP_SIZE[0] // 2  # through the square; its green is 215, the background's 40
    columns = [np.flatnonzero(frame[row, :, 1] > 150) for frame in clip.frames[:4]]
    assert np.diff([c[0] for c in columns]).tolist() == [2, 2, 2]


def test_long_segment_gives_consecutive_clips_and_short_ones_none(tmp_path):
    starts, stats, _ = clips_of(make_video(tmp_path / "v.mp4", [130, 30, 60]))
    assert starts == [0, 51, 160]
    assert (stats.segments, stats.too_short) == (3, 1)


def test_a_segment_of_exactly_2_seconds_gives_a_clip(tmp_path):
    # 48 frames at 24 fps: the clip's 17th frame (t = 2.0 s) is the next segment's first, so
    # the segment's own last frame (t = 1.958 s) stands in; 47 frames (1.958 s) are too short.
    starts, stats, stream = clips_of(make_video(tmp_path / "v.mp4", [48, 47, 60]))
    assert starts == [0, 95]
    assert (stats.segments, stats.too_short) == (3, 1)
    first = next(iter(cut_clips(FrameStream(stream.path, stream.info, *CLIP_SIZE), [48, 95],
                                CutStats())))
    assert first.frames.shape[0] == CLIP_FRAMES


def test_a_video_without_cuts_is_one_segment(tmp_path):
    starts, stats, _ = clips_of(make_video(tmp_path / "calm.mp4", [110]))
    assert (starts, stats.segments) == ([0, 51], 1)


def test_variable_frame_rate_is_read_by_time(tmp_path):
    # Segment 2 starts at frame 72: 3.0 s at a constant 24 fps, but frames after the 48th last
    # 2/24 s, so it really starts at 2 + 24 · 2/24 = 4.0 s.
    video = make_video(tmp_path / "vfr.mp4", [72, 60], vfr_after=48)
    starts, stats, stream = clips_of(video)
    assert stream.variable_frame_rate
    assert starts == [0, 4 * DECODE_FPS, 4 * DECODE_FPS + 51]
    assert stats.segments == 2


@pytest.mark.parametrize("content", [b"", b"not a video at all" * 100])
def test_unreadable_video_names_the_file(tmp_path, content):
    path = tmp_path / "broken.mp4"
    path.write_bytes(content)
    with pytest.raises(VideoError, match=r"broken\.mp4"):
        probe(path)


def test_missing_video_names_the_file(tmp_path):
    with pytest.raises(VideoError, match=r"gone\.mp4: no such file"):
        probe(tmp_path / "gone.mp4")


def test_portrait_video_does_not_fit_landscape_clips():
    portrait = VideoInfo(width=1080, height=1920, fps=24.0, duration=10.0)
    message = orientation_problem(portrait, 480, 720)
    assert message and "portrait video (1080×1920)" in message and "keep 38%" in message
    assert orientation_problem(portrait, 720, 480) is None
    assert orientation_problem(VideoInfo(500, 500, 24.0, 1.0), 480, 720) is None
