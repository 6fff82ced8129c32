"""Clip checks (`animegamer.video.mp4check`) and the playthrough's guarded use of ffmpeg."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path

import imageio_ffmpeg
import numpy as np
import pytest

from animegamer.video import playthrough
from animegamer.video.mp4check import MAX_CLIP_FRAMES, ClipFacts, check_mp4
from animegamer.video.playthrough import FFMPEG_INPUT, PlaythroughError, concat_mp4
from animegamer.video.writer import write_mp4


def _write(path: Path, frames: int, height: int, width: int) -> Path:
    pixels = np.random.default_rng(frames).integers(0, 255, (frames, height, width, 3), np.uint8)
    return write_mp4(pixels, path)


def _ffmpeg_clip(path: Path, codec: str, frames: int = 3, output_params=()) -> Path:
    writer = imageio_ffmpeg.write_frames(
        str(path), (16, 16), fps=8, codec=codec, output_params=list(output_params)
    )
    writer.send(None)
    for _ in range(frames):
        writer.send(np.zeros((16, 16, 3), np.uint8))
    writer.close()
    return path


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> bytes:
    return _write(tmp_path_factory.mktemp("good") / "g.mp4", 17, 34, 48).read_bytes()


# The walker -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("frames", "height", "width", "size"),
    [
        (1, 16, 16, (16, 16)),
        (17, 34, 48, (48, 34)),
        (5, 33, 97, (98, 34)),
        (3, 480, 720, (720, 480)),
    ],
)
def test_clips_written_by_write_mp4_pass(tmp_path, frames, height, width, size):
    facts = check_mp4(_write(tmp_path / "c.mp4", frames, height, width))
    assert facts == ClipFacts(codec="avc1", frames=frames, width=size[0], height=size[1])


def test_a_clip_with_its_index_at_the_end_passes_and_bytes_read_the_same(tmp_path):
    """Without +faststart the moov box comes after the media."""
    path = _ffmpeg_clip(tmp_path / "plain.mp4", "libx264", frames=4)
    assert check_mp4(path) == check_mp4(path.read_bytes()) == ClipFacts("avc1", 4, 16, 16)


def _top_boxes(data: bytes) -> dict[bytes, tuple[int, int]]:
    boxes, at = {}, 0
    while at < len(data):
        size, kind = struct.unpack(">I4s", data[at : at + 8])
        boxes[kind] = (at, at + size)
        at += size
    return boxes


def _with_second_track(data: bytes) -> bytes:
    start, end = _top_boxes(data)[b"moov"]
    trak_at = data.index(b"trak", start) - 4
    trak = data[trak_at : trak_at + struct.unpack(">I", data[trak_at : trak_at + 4])[0]]
    moov = struct.pack(">I", end - start + len(trak)) + data[start + 4 : end] + trak
    return data[:start] + moov + data[end:]


def _replace(old: bytes, new: bytes) -> Callable[[bytes], bytes]:
    def edit(data: bytes) -> bytes:
        assert data.count(old) == 1
        return data.replace(old, new)
    return edit


BAD = {
    "DASH manifest": (
        lambda good, tmp: b'<?xml version="1.0"?><MPD xmlns="urn:mpeg:dash:schema:mpd:2011">'
                          b"<BaseURL>file:///etc/passwd</BaseURL></MPD>",
        "not an mp4 file",
    ),
    "HLS playlist": (
        lambda good, tmp: b"#EXTM3U\n#EXTINF:1,\nfile:///etc/passwd\n#EXT-X-ENDLIST\n",
        "not an mp4 file",
    ),
    "random bytes": (
        lambda good, tmp: np.random.default_rng(1).bytes(5000), "not an mp4 file"
    ),
    "random bytes after ftyp": (
        lambda good, tmp: good[:32] + np.random.default_rng(2).bytes(5000), "truncated|invalid"
    ),
    "empty": (lambda good, tmp: b"", "not an mp4 file"),
    "MPEG-4 part 2": (
        lambda good, tmp: _ffmpeg_clip(tmp / "m.mp4", "mpeg4").read_bytes(),
        "codec 'mp4v' is not H.264",
    ),
    "truncated in the media": (lambda good, tmp: good[:-100], "truncated"),
    "truncated in the index": (lambda good, tmp: good[:300], "truncated"),
    "only the ftyp box": (lambda good, tmp: good[:32], "no moov box"),
    "fragmented": (
        lambda good, tmp: _ffmpeg_clip(
            tmp / "f.mp4", "libx264", output_params=["-movflags", "frag_keyframe+empty_moov"]
        ).read_bytes(),
        "fragmented mp4",
    ),
    "two tracks": (lambda good, tmp: _with_second_track(good), "2 tracks; a clip has exactly one"),
    "sound track": (
        lambda good, tmp: _replace(b"vide\x00", b"soun\x00")(good), "the track is not video"
    ),
    "media in another file": (
        lambda good, tmp: _replace(b"url \x00\x00\x00\x01", b"url \x00\x00\x00\x00")(good),
        "refers to media outside the file",
    ),
    "too many frames": (
        lambda good, tmp: _write(tmp / "long.mp4", MAX_CLIP_FRAMES + 1, 16, 16).read_bytes(),
        f"{MAX_CLIP_FRAMES + 1} frames; a clip has 1..{MAX_CLIP_FRAMES}",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_what_is_not_one_of_our_clips_is_refused(tmp_path, good, case):
    make, message = BAD[case]
    data = make(good, tmp_path)
    with pytest.raises(ValueError, match=message):
        check_mp4(data)
    (tmp_path / "bad.mp4").write_bytes(data)
    with pytest.raises(ValueError, match=message):
        check_mp4(tmp_path / "bad.mp4")


# The playthrough --------------------------------------------------------------------------------


def test_concat_checks_every_clip_before_ffmpeg_runs(tmp_path, good, monkeypatch):
    first = tmp_path / "a.mp4"
    first.write_bytes(good)
    manifest = tmp_path / "b.mp4"
    manifest.write_bytes(BAD["DASH manifest"][0](good, tmp_path))

    def no_ffmpeg(*args, **kwargs):
        raise AssertionError("ffmpeg was started")

    monkeypatch.setattr(imageio_ffmpeg, "read_frames", no_ffmpeg)
    with pytest.raises(PlaythroughError, match=r"clip b\.mp4: not an mp4 file"):
        concat_mp4([first, manifest], tmp_path / "out.mp4")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.mp4", "b.mp4"]


def test_same_size_clips_are_joined_by_stream_copy_from_local_files_only(tmp_path, monkeypatch):
    """One ffmpeg run at the lowest CPU priority (other players' turns keep the cores), the
    concat list read as such from local files only, streams copied (no frame through Python);
    the result is one of our clips with every frame."""
    clips = [_write(tmp_path / f"{i}'s.mp4", 3 + i, 16, 16) for i in range(3)]
    commands: list[list[str]] = []
    niceness: list[int] = []
    real_popen = subprocess.Popen

    def spy(cmd, *args, **kwargs):
        commands.append(list(cmd))
        process = real_popen(cmd, *args, **kwargs)
        # Read while ffmpeg still runs: stop it until then, so it cannot end first.
        os.kill(process.pid, signal.SIGSTOP)
        original_communicate = process.communicate

        def communicate(*c_args, **c_kwargs):
            niceness.append(os.getpriority(os.PRIO_PROCESS, process.pid))
            os.kill(process.pid, signal.SIGCONT)
            return original_communicate(*c_args, **c_kwargs)

        process.communicate = communicate
        return process

    def no_frames(*args, **kwargs):
        raise AssertionError("frames were decoded")

    monkeypatch.setattr(subprocess, "Popen", spy)
    monkeypatch.setattr(imageio_ffmpeg, "read_frames", no_frames)
    out = concat_mp4(clips, tmp_path / "out.mp4")
    (command,) = commands
    assert niceness == [19]
    at = command.index("-i")
    assert command[at - len(playthrough.CONCAT_INPUT) : at] == playthrough.CONCAT_INPUT
    assert command[command.index("-c") + 1] == "copy"
    assert check_mp4(out) == ClipFacts("avc1", 3 + 4 + 5, 16, 16)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".concat-")] == []


def test_clips_of_another_size_are_read_as_mp4_from_local_files_only(tmp_path, monkeypatch):
    """The forced demuxer and protocol whitelist go before `-i`, and ffmpeg accepts them."""
    clips = [_write(tmp_path / f"{i}.mp4", 3 + i, 16 * (i + 1), 16) for i in range(2)]
    commands: list[list[str]] = []
    real_popen = subprocess.Popen

    def spy(cmd, *args, **kwargs):
        commands.append(list(cmd))
        return real_popen(cmd, *args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", spy)
    out = concat_mp4(clips, tmp_path / "out.mp4")
    reads = [cmd for cmd in commands if "image2pipe" in cmd]
    assert len(reads) == 3  # the first clip's header, then each clip
    for cmd in reads:
        at = cmd.index("-i")
        assert cmd[at - len(FFMPEG_INPUT) : at] == FFMPEG_INPUT
        assert cmd[at + 1] in {str(c) for c in clips}
    assert check_mp4(out).frames == 3 + 4
    assert playthrough.FFMPEG_INPUT == ["-f", "mp4", "-protocol_whitelist", "file"]
