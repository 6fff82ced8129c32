"""Reading videos with ffmpeg (the binary imageio-ffmpeg ships): probe, and stream frames.

A source video is read once, as a stream of RGB frames resampled **by timestamp** to a constant
`DECODE_FPS` (ffmpeg's `fps` filter), so a variable-frame-rate video gives frames at the right
times; each frame is scaled to cover the clip size and center-cropped. Only one frame is held at
a time. ffmpeg reads local files only (`-protocol_whitelist file`).
"""

from __future__ import annotations

import math
import re
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import imageio_ffmpeg
import numpy as np

from animegamer.data.errors import DataError, VideoError

DECODE_FPS = 24
"""Frames per second the sources are resampled to (cut detection runs at this rate)."""
LOCAL_ONLY = ["-protocol_whitelist", "file"]
_VFR = re.compile(r"VFR:([-\d.naif]+) \((\d+)/(\d+)\)")


@dataclass(frozen=True)
class VideoInfo:
    """What ffmpeg says about a video: its displayed size (after rotation), rate and length."""

    width: int
    height: int
    fps: float
    duration: float


def _reason(error: BaseException) -> str:
    """The informative line of an imageio-ffmpeg error: ffmpeg's last words, not the banner."""
    lines = [line for line in str(error).splitlines() if line.strip() and "===" not in line]
    return lines[-1].strip() if lines else type(error).__name__


def probe(path: Path) -> VideoInfo:
    """The video's displayed size, frame rate and duration; `DataError` naming the file if ffmpeg
    cannot read it as a video."""
    if not path.is_file():
        raise VideoError(f"{path}: no such file")
    reader = imageio_ffmpeg.read_frames(str(path), input_params=LOCAL_ONLY)
    try:
        meta = next(reader)
    except (OSError, RuntimeError, IndexError, ValueError, StopIteration) as error:
        raise VideoError(f"{path}: not a readable video ({_reason(error)})") from None
    finally:
        reader.close()
    width, height = meta["size"]
    return VideoInfo(int(width), int(height), float(meta["fps"]), float(meta["duration"]))


def cover_filter(info: VideoInfo, height: int, width: int) -> str:
    """ffmpeg filter: scale to cover `height`×`width` keeping the aspect, then center-crop."""
    scale = max(width / info.width, height / info.height)
    scaled_w = max(width, math.ceil(info.width * scale - 1e-6))
    scaled_h = max(height, math.ceil(info.height * scale - 1e-6))
    return f"scale={scaled_w}:{scaled_h}:flags=bicubic,crop={width}:{height},setsar=1"


class FrameStream:
    """The frames of one video at `DECODE_FPS`, `height`×`width`, as uint8 [H, W, 3] arrays.

    Iterate it once. Afterwards `variable_frame_rate` says whether the source's frame intervals
    varied (ffmpeg's `vfrdet`); a video ffmpeg fails on raises `DataError` naming the file.
    """

    def __init__(self, path: Path, info: VideoInfo, height: int, width: int) -> None:
        self.path = path
        self.info = info
        self.size = (height, width)
        self.variable_frame_rate = False

    def __iter__(self) -> Iterator[np.ndarray]:
        height, width = self.size
        filters = f"vfrdet,fps={DECODE_FPS},{cover_filter(self.info, height, width)}"
        command = [
            imageio_ffmpeg.get_ffmpeg_exe(), "-hide_banner", "-nostdin", "-nostats",
            *LOCAL_ONLY, "-i", str(self.path), "-map", "0:v:0", "-an", "-sn", "-vf", filters,
            "-pix_fmt", "rgb24", "-f", "rawvideo", "-",
        ]
        frame_bytes = height * width * 3
        with tempfile.TemporaryFile() as log:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log
            )
            assert process.stdout is not None
            try:
                while chunk := process.stdout.read(frame_bytes):
                    if len(chunk) < frame_bytes:
                        break
                    yield np.frombuffer(chunk, np.uint8).reshape(height, width, 3)
            finally:
                process.stdout.close()
                if process.poll() is None:
                    process.kill()
                returncode = process.wait()
            log.seek(0)
            text = log.read().decode("utf-8", "replace")
        if returncode:
            reason = (text.strip().splitlines() or [f"ffmpeg exit status {returncode}"])[-1]
            raise VideoError(f"{self.path}: ffmpeg could not decode it ({reason})")
        self.variable_frame_rate = _variable(text)


def _variable(log: str) -> bool:
    """Whether ffmpeg's `vfrdet` saw frame intervals change (its last report counts)."""
    reports = _VFR.findall(log)
    return bool(reports) and int(reports[-1][1]) > 0


def read_clip(path: Path) -> np.ndarray:
    """All frames of a clip this pipeline wrote, uint8 [F, H, W, 3]."""
    reader = imageio_ffmpeg.read_frames(str(path), input_params=["-f", "mp4", *LOCAL_ONLY])
    try:
        meta = next(reader)
        width, height = meta["size"]
        frames = [np.frombuffer(frame, np.uint8).reshape(height, width, 3) for frame in reader]
    except (OSError, RuntimeError, StopIteration) as error:
        raise DataError(f"{path}: cannot read the clip ({_reason(error)})") from None
    finally:
        reader.close()
    return np.stack(frames)
