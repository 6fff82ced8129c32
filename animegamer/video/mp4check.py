"""Check that a file is one of our clips before ffmpeg ever sees it.

ffmpeg opens whatever it is given: a DASH manifest or an HLS playlist named `.mp4` makes it read
other files (or URLs), and an mp4 may reference media in other files through its `dref` box. So a
clip from outside (a saved game) is walked here first, in pure Python, and accepted only when it
is what `animegamer.video.writer.write_mp4` writes: an ISO-BMFF file starting with `ftyp`, not
fragmented, holding exactly one self-contained H.264 (`avc1`) video track of
1..`MAX_CLIP_FRAMES` frames. Only box headers and the `moov` box are read, never the media data.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

MAX_CLIP_FRAMES = 256
"""A turn's clip has 17 frames (the decoder's length); 256 leaves room for other decoders."""
MAX_CLIP_SIDE = 4096
MAX_MOOV_BYTES = 4 << 20
"""The index of a 256-frame clip is a few kB; a larger one is not ours."""
MAX_BOXES = 64
"""Boxes per level: our clips have 4 at the top and fewer than 12 in any container."""
FRAGMENT_BOXES = {b"moof", b"mvex", b"mfra", b"sidx"}
AVC_CODEC = "avc1"
_VISUAL_ENTRY_BYTES = 78
"""The fixed fields of a VisualSampleEntry before its child boxes (ISO 14496-12 §12.1.3)."""


@dataclass(frozen=True)
class ClipFacts:
    """What the walker read from a clip's index."""

    codec: str
    frames: int
    width: int
    height: int

    @property
    def size(self) -> tuple[int, int]:
        return self.width, self.height


def check_mp4(source: str | Path | bytes) -> ClipFacts:
    """The facts of the clip at `source` (a path or the file's bytes), or `ValueError` saying in a
    few words why it is not an acceptable clip."""
    if isinstance(source, bytes | bytearray | memoryview):
        return _check_stream(io.BytesIO(source), len(source))
    with open(source, "rb") as stream:
        return _check_stream(stream, stream.seek(0, io.SEEK_END))


def truncation(path: Path) -> str | None:
    """Why the ISO-BMFF file (mp4, mov, m4v) at `path` is cut short, or None (complete, or not
    ISO-BMFF). ffmpeg plays a truncated file without complaint when its index comes first (a
    "fast-start" mp4) and just stops early; here the top-level boxes are walked, and one that
    ends past the file's end says so."""
    with open(path, "rb") as stream:
        size = stream.seek(0, io.SEEK_END)
        stream.seek(0)
        if stream.read(8)[4:8] != b"ftyp":
            return None
        position = 0
        while position < size:
            stream.seek(position)
            chunk = stream.read(16)
            if len(chunk) < 8:
                return f"truncated: {size} bytes, cut inside a box header at byte {position}"
            length, kind = struct.unpack(">I4s", chunk[:8])
            if length == 1 and len(chunk) == 16:
                length = struct.unpack(">Q", chunk[8:16])[0]
            if length == 0:  # the last box, "to the end of the file"
                return None
            if length < 8:
                return f"damaged: its {_name(kind)} box at byte {position} has an invalid size"
            if position + length > size:
                return (f"truncated: {size} bytes, but its {_name(kind)} box needs "
                        f"{position + length}")
            position += length
    return None


def _check_stream(stream: BinaryIO, size: int) -> ClipFacts:
    stream.seek(0)
    if stream.read(8)[4:8] != b"ftyp":
        raise ValueError("not an mp4 file (it does not start with an ftyp box)")
    return _track_facts(_moov_payload(stream, size))


def _name(kind: bytes) -> str:
    return repr(kind.decode("latin-1"))


def _header(chunk: bytes, at: int, limit: int) -> tuple[bytes, int, int]:
    """(kind, payload start, end) of the box whose first bytes are `chunk`, at offset `at` of a
    container ending at `limit`."""
    if len(chunk) < 8 or limit - at < 8:
        raise ValueError("the file is truncated")
    size, kind = struct.unpack(">I4s", chunk[:8])
    header = 8
    if size == 1:
        if len(chunk) < 16:
            raise ValueError("the file is truncated")
        size, header = struct.unpack(">Q", chunk[8:16])[0], 16
    if size < header:  # 0 ("to the end of the file") is only written by unfinished streams
        raise ValueError(f"box {_name(kind)} has an invalid size")
    if at + size > limit:
        raise ValueError("the file is truncated")
    return kind, at + header, at + size


def _moov_payload(stream: BinaryIO, size: int) -> bytes:
    """The `moov` box's payload, after checking the top level: complete boxes, no fragments."""
    moov: bytes | None = None
    position = count = 0
    while position < size:
        count += 1
        if count > MAX_BOXES:
            raise ValueError("too many boxes")
        stream.seek(position)
        kind, start, end = _header(stream.read(16), position, size)
        if kind in FRAGMENT_BOXES:
            raise ValueError("fragmented mp4 is not accepted")
        if kind == b"moov":
            if moov is not None:
                raise ValueError("more than one moov box")
            if end - start > MAX_MOOV_BYTES:
                raise ValueError("the moov box is too large")
            stream.seek(start)
            moov = stream.read(end - start)
        position = end
    if moov is None:
        raise ValueError("no moov box")
    return moov


def _boxes(payload: bytes) -> list[tuple[bytes, bytes]]:
    """The (kind, payload) of each box in a container's payload, in order."""
    found: list[tuple[bytes, bytes]] = []
    position = 0
    while position < len(payload):
        if len(found) == MAX_BOXES:
            raise ValueError("too many boxes")
        kind, start, end = _header(payload[position : position + 16], position, len(payload))
        found.append((kind, payload[start:end]))
        position = end
    return found


def _one(payload: bytes, kind: bytes) -> bytes:
    """The payload of the single child box `kind` of a container."""
    matches = [body for child, body in _boxes(payload) if child == kind]
    if len(matches) != 1:
        count = "no" if not matches else "more than one"
        raise ValueError(f"{count} {_name(kind)} box")
    return matches[0]


def _full_box_entries(payload: bytes, kind: bytes) -> list[tuple[bytes, bytes]]:
    """The entries of a full box that holds an entry count and then boxes (`stsd`, `dref`)."""
    if len(payload) < 8:
        raise ValueError(f"the {_name(kind)} box is truncated")
    (count,) = struct.unpack(">I", payload[4:8])
    entries = _boxes(payload[8:])
    if count != 1 or len(entries) != 1:
        raise ValueError(f"the {_name(kind)} box must have exactly one entry")
    return entries


def _track_facts(moov: bytes) -> ClipFacts:
    kinds = [kind for kind, _ in _boxes(moov)]
    if b"mvex" in kinds:
        raise ValueError("fragmented mp4 is not accepted")
    if kinds.count(b"trak") != 1:
        raise ValueError(f"{kinds.count(b'trak')} tracks; a clip has exactly one")
    mdia = _one(_one(moov, b"trak"), b"mdia")
    if _one(mdia, b"hdlr")[8:12] != b"vide":
        raise ValueError("the track is not video")
    minf = _one(mdia, b"minf")
    _check_self_contained(_one(_one(minf, b"dinf"), b"dref"))
    stbl = _one(minf, b"stbl")
    codec, width, height = _sample_entry(_one(stbl, b"stsd"))
    return ClipFacts(codec=codec, frames=_sample_count(_one(stbl, b"stsz")), width=width,
                     height=height)


def _check_self_contained(dref: bytes) -> None:
    """The media must be in this file: one `url ` entry with the self-contained flag."""
    [(kind, entry)] = _full_box_entries(dref, b"dref")
    if kind != b"url " or len(entry) < 4 or not entry[3] & 1:
        raise ValueError("the clip refers to media outside the file")


def _sample_entry(stsd: bytes) -> tuple[str, int, int]:
    [(kind, entry)] = _full_box_entries(stsd, b"stsd")
    if kind != AVC_CODEC.encode():
        raise ValueError(f"codec {_name(kind)} is not H.264 ({AVC_CODEC})")
    if len(entry) < _VISUAL_ENTRY_BYTES:
        raise ValueError("the video sample entry is truncated")
    width, height = struct.unpack(">HH", entry[24:28])
    if not (1 <= width <= MAX_CLIP_SIDE and 1 <= height <= MAX_CLIP_SIDE):
        raise ValueError(f"frame size {width}x{height} is out of range")
    _one(entry[_VISUAL_ENTRY_BYTES:], b"avcC")
    return AVC_CODEC, width, height


def _sample_count(stsz: bytes) -> int:
    if len(stsz) < 12:
        raise ValueError("the stsz box is truncated")
    (count,) = struct.unpack(">I", stsz[8:12])
    if not 1 <= count <= MAX_CLIP_FRAMES:
        raise ValueError(f"{count} frames; a clip has 1..{MAX_CLIP_FRAMES}")
    return count
