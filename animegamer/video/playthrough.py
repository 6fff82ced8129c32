"""A whole playthrough as one video: the turns' clips concatenated, in order.

Clips of one size (every game played by one set of models) are joined without re-encoding:
ffmpeg's concat demuxer copies their H.264 streams into one mp4, in a subprocess at the lowest
CPU priority, so a 1000-turn game takes seconds and other players' turns neither wait on it nor
share their cores with it. Clips of another size (a saved game made with other models, then
continued) are decoded and re-encoded at the size of the first clip, frames streamed one at a
time.

Each clip is checked by `animegamer.video.mp4check` before ffmpeg opens it, and ffmpeg is told to
read it as mp4 from a local file only (`FFMPEG_INPUT`), so a clip that is really a playlist or a
manifest can never make it read another file or a URL.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import imageio_ffmpeg

from animegamer.video.mp4check import ClipFacts, check_mp4
from animegamer.video.writer import DEFAULT_FPS, h264_writer

FFMPEG_INPUT = ["-f", "mp4", "-protocol_whitelist", "file"]
"""ffmpeg input options: the mp4 demuxer only (never guessed from the content), local files only."""
CONCAT_INPUT = ["-f", "concat", "-safe", "0", "-protocol_whitelist", "file"]
"""ffmpeg input options of the list of clips: absolute paths of local files only (each clip is
checked by `check_mp4` first)."""


LOWEST_PRIORITY = 19
"""The niceness of the ffmpeg that joins a playthrough."""


class PlaythroughError(ValueError):
    """There is nothing to concatenate, or a clip cannot be read."""


def _check_clips(clips: list[Path]) -> list[ClipFacts]:
    facts = []
    for clip in clips:
        try:
            facts.append(check_mp4(clip))
        except ValueError as error:
            raise PlaythroughError(
                f"Could not put the clips together (clip {clip.name}: {error})."
            ) from None
    return facts


def _concat_list(clips: list[Path]) -> str:
    """The concat demuxer's list: one `file '<absolute path>'` line per clip."""
    lines = []
    for clip in clips:
        if "\n" in str(clip) or "\r" in str(clip):
            raise PlaythroughError(f"Could not put the clips together (clip {clip.name!r}).")
        quoted = str(clip.resolve()).replace("'", "'\\''")
        lines.append(f"file '{quoted}'\n")
    return "".join(lines)


def _copy_streams(clips: list[Path], partial: Path) -> None:
    """Join same-size clips into `partial` with stream copy (no decoding, no encoding)."""
    with tempfile.NamedTemporaryFile(
        "w", suffix=".txt", prefix=".concat-", dir=partial.parent, encoding="utf-8"
    ) as listing:
        listing.write(_concat_list(clips))
        listing.flush()
        command = [
            imageio_ffmpeg.get_ffmpeg_exe(), "-nostdin", "-loglevel", "error", "-y",
            *CONCAT_INPUT, "-i", listing.name,
            "-map", "0:v:0", "-c", "copy", "-movflags", "+faststart", "-f", "mp4", str(partial),
        ]
        with subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        ) as process:
            _lowest_priority(process.pid)
            _, errors = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(errors.strip() or f"ffmpeg exited with {process.returncode}")


def _lowest_priority(pid: int) -> None:
    """Give a download's ffmpeg the CPU only when players' turns leave it idle, so that a long
    playthrough being built does not slow anyone's turn (POSIX; a no-op elsewhere, or if the
    process has already ended)."""
    if hasattr(os, "setpriority"):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, pid, LOWEST_PRIORITY)


def _reencode(clips: list[Path], partial: Path) -> None:
    """Join clips of several sizes into `partial`, each scaled to the first clip's size."""
    (width, height), fps = _clip_info(clips[0])
    writer = h264_writer(partial, width, height, fps)
    try:
        for clip in clips:
            frames = imageio_ffmpeg.read_frames(
                str(clip),
                input_params=FFMPEG_INPUT,
                output_params=["-vf", f"scale={width}:{height}"],
            )
            next(frames)
            for frame in frames:
                writer.send(frame)
    finally:
        writer.close()


def _clip_info(path: Path) -> tuple[tuple[int, int], float]:
    reader = imageio_ffmpeg.read_frames(str(path), input_params=FFMPEG_INPUT)
    try:
        meta = next(reader)
    finally:
        reader.close()
    width, height = meta["size"]
    return (int(width), int(height)), float(meta.get("fps") or DEFAULT_FPS)


def concat_mp4(paths: Sequence[str | Path], out: str | Path) -> Path:
    """Write the clips at `paths`, one after the other, to the H.264 mp4 `out`.

    Clips of one size are joined by stream copy; otherwise the output keeps the first clip's
    frame size and frame rate. Raises `PlaythroughError` when
    `paths` is empty or a clip is missing, not an H.264 mp4 clip (see `check_mp4`) or unreadable;
    `out` is then not created.
    """
    clips = [Path(p) for p in paths]
    if not clips:
        raise PlaythroughError("There are no clips to put together yet; play a turn first.")
    missing = [p.name for p in clips if not p.is_file()]
    if missing:
        raise PlaythroughError(f"Missing clips: {', '.join(missing)}.")
    facts = _check_clips(clips)
    out = Path(out)
    partial = out.with_name(out.name + ".partial.mp4")
    try:
        if len({fact.size for fact in facts}) == 1:
            _copy_streams(clips, partial)
        else:
            _reencode(clips, partial)
        partial.replace(out)
    except (OSError, RuntimeError, StopIteration) as error:
        partial.unlink(missing_ok=True)
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise PlaythroughError(f"Could not put the clips together ({reason}).") from error
    return out
