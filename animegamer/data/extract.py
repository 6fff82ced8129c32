"""The CPU stage for one video: decode → cuts → clips → motion → clip files, with a record each.

It runs in worker processes (`--num-proc`), so it takes and returns plain values and writes its
own records: one line per shot in `work/clips.jsonl` once its clip file is complete, then one line
for the video in `work/videos.jsonl`. Shots already recorded are passed over, so a rerun continues
an interrupted video without writing any shot twice.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from animegamer.data import layout
from animegamer.data.decode import FrameStream, VideoInfo, probe
from animegamer.data.errors import VideoError
from animegamer.data.flow import motion_stats
from animegamer.data.shots import (
    CLIP_FPS,
    Clip,
    CutDetector,
    CutOptions,
    CutStats,
    cut_clips,
    detection_size,
)
from animegamer.data.store import append_record, write_atomic
from animegamer.video.mp4check import truncation
from animegamer.video.writer import write_mp4

MIN_MOVING = 0.002
"""A clip with a smaller fraction of moving pixels is static and skipped."""


@dataclass(frozen=True)
class ExtractOptions:
    height: int = 480
    width: int = 720
    cuts: CutOptions = field(default_factory=CutOptions)
    min_moving: float = MIN_MOVING
    flow_method: str = "farneback"


@dataclass(frozen=True)
class VideoJob:
    """One video to extract. `done` maps the shots already recorded to whether they were kept;
    `cap` is the most kept shots wanted from this video (None: all)."""

    path: Path
    name: str
    out: Path
    cap: int | None = None
    done: dict[str, bool] = field(default_factory=dict)

    @property
    def video_id(self) -> str:
        return layout.video_id(self.name)


def orientation_problem(info: VideoInfo, height: int, width: int) -> str | None:
    """Why a video does not fit the clips' orientation (a portrait video for landscape clips),
    or None. Center-cropping it would keep only a thin band of each frame."""
    if info.width == info.height or (info.width > info.height) == (width > height):
        return None
    kept = min(info.width / info.height * height / width, info.height / info.width * width / height)
    side = "portrait" if info.height > info.width else "landscape"
    return (
        f"{side} video ({info.width}×{info.height}) for {width}×{height} clips: a center crop "
        f"would keep {kept:.0%} of each frame"
    )


def extract_video(job: VideoJob, options: ExtractOptions) -> dict[str, Any]:
    """Extract one video's shots; returns (and records) the video's record.

    An unreadable or unfit video gives a record with status "failed" and the reason; a write
    that fails (a full disk) raises `DataError`, since nothing after it could be written either.
    """
    record: dict[str, Any] = {"video": job.name, "video_id": job.video_id, "cap": job.cap}
    try:
        info = probe(job.path)
    except VideoError as error:
        return _finish(job, record, status="failed", reason=str(error))
    problem = orientation_problem(info, options.height, options.width)
    if problem:
        return _finish(job, record, status="failed", reason=f"{job.path}: {problem}")
    truncated = truncation(job.path)
    detector = CutDetector(options.cuts)
    stream = FrameStream(job.path, info, options.height, options.width)
    stats = CutStats()
    kept = static = 0
    complete = True
    # A video that breaks off keeps the cuts found so far; the clip pass meets the same error
    # and records it.
    with contextlib.suppress(VideoError):
        detector.feed(FrameStream(job.path, info, *detection_size(options.height, options.width)))
    try:
        for clip in cut_clips(stream, [cut.frame for cut in detector.cuts], stats):
            if job.cap is not None and kept >= job.cap:
                complete = False
                break
            is_kept = _shot(job, options, clip)
            kept += is_kept
            static += not is_kept
    except VideoError as error:
        if not stats.frames:
            return _finish(job, record, status="failed", reason=str(error))
        record["warning"] = str(error)
    if truncated:
        record["partial"] = f"{job.path}: {truncated}; the shots before the missing part are kept"
    record.update(
        segments=stats.segments, too_short=stats.too_short, frames=stats.frames, kept=kept,
        static=static, complete=complete, variable_frame_rate=stream.variable_frame_rate,
        width=info.width, height=info.height, fps=info.fps,
        cuts=[cut.record() for cut in detector.cuts],
        motion_spikes=[spike.record() for spike in detector.spikes],
    )
    return _finish(job, record, status="done")


def _shot(job: VideoJob, options: ExtractOptions, clip: Clip) -> bool:
    """Record one shot (writing its clip unless it is static); whether it is kept."""
    shot = layout.shot_id(job.video_id, clip.start_frame)
    if shot in job.done:
        return job.done[shot]
    stats = motion_stats(clip.frames, options.flow_method)
    record = {
        "shot_id": shot, "video": job.name, "start": round(clip.start, 6),
        "scope": round(stats.scope, 6), "moving": round(stats.moving, 6),
    }
    if stats.moving < options.min_moving:
        append_record(job.out / layout.CLIP_LOG, {**record, "status": "static"})
        return False
    path = layout.clip_path(job.video_id, shot)
    write_atomic(job.out / path, lambda partial: write_mp4(clip.frames, partial, fps=CLIP_FPS))
    append_record(job.out / layout.CLIP_LOG, {**record, "status": "kept", "clip": path})
    return True


def _finish(job: VideoJob, record: dict[str, Any], **fields: Any) -> dict[str, Any]:
    record.update(fields)
    append_record(job.out / layout.VIDEO_LOG, record)
    return record


def run_job(task: tuple[VideoJob, ExtractOptions]) -> dict[str, Any]:
    """`extract_video` for a process pool (which imports only this module's dependencies)."""
    return extract_video(*task)
