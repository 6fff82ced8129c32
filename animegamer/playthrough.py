"""A whole playthrough as one video: the turns' clips concatenated, in order.

Frames are streamed through ffmpeg (imageio-ffmpeg) one at a time, so an arbitrarily long game
never has to fit in memory. Clips of another size (a saved game made with other models, then
continued) are scaled to the size of the first clip.

Each clip is checked by `animegamer.mp4check` before ffmpeg opens it, and ffmpeg is told to read
it as mp4 from a local file only (`FFMPEG_INPUT`), so a clip that is really a playlist or a
manifest can never make it read another file or a URL.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import imageio_ffmpeg

from animegamer.mp4check import check_mp4
from animegamer.video import DEFAULT_FPS, h264_writer

FFMPEG_INPUT = ["-f", "mp4", "-protocol_whitelist", "file"]
"""ffmpeg input options: the mp4 demuxer only (never guessed from the content), local files only."""


class PlaythroughError(ValueError):
    """There is nothing to concatenate, or a clip cannot be read."""


def _check_clips(clips: list[Path]) -> None:
    for clip in clips:
        try:
            check_mp4(clip)
        except ValueError as error:
            raise PlaythroughError(
                f"Could not put the clips together (clip {clip.name}: {error})."
            ) from None


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

    The output keeps the first clip's frame size and frame rate. Raises `PlaythroughError` when
    `paths` is empty or a clip is missing, not an H.264 mp4 clip (see `check_mp4`) or unreadable;
    `out` is then not created.
    """
    clips = [Path(p) for p in paths]
    if not clips:
        raise PlaythroughError("There are no clips to put together yet; play a turn first.")
    missing = [p.name for p in clips if not p.is_file()]
    if missing:
        raise PlaythroughError(f"Missing clips: {', '.join(missing)}.")
    _check_clips(clips)
    out = Path(out)
    partial = out.with_name(out.name + ".partial.mp4")
    try:
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
        partial.replace(out)
    except (OSError, RuntimeError, StopIteration) as error:
        partial.unlink(missing_ok=True)
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise PlaythroughError(f"Could not put the clips together ({reason}).") from error
    return out
