"""Saved games: round trip, and hostile or corrupt files rejected with a clear error."""

from __future__ import annotations

import dataclasses
import errno
import json
import random
import shutil
import struct
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import imageio_ffmpeg
import numpy as np
import pytest
import torch
from safetensors.torch import save as save_safetensors

from animegamer.game import save_reading
from animegamer.game.rules import (
    MAX_GAME_TURNS,
    MAX_WINDOW,
    GameStates,
    InstructionError,
    Session,
    Timings,
    make_instruction,
    new_session,
    record_turn,
    restart,
    undo,
)
from animegamer.game.save_reading import DISK_FULL, SaveFileError, load_game
from animegamer.game.savefile import save_game
from animegamer.video.writer import write_mp4

CHARACTERS = {"Qiqi", "Sosuke"}


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    """One real tiny clip (3 frames of 16x16); every fake turn gets a copy of it."""
    frames = np.random.default_rng(0).integers(0, 255, (3, 16, 16, 3), dtype=np.uint8)
    return write_mp4(frames, tmp_path_factory.mktemp("clip") / "tiny.mp4")


def _instruction(index: int):
    return make_instruction(
        {"character": "Qiqi", "adverb": "slowly", "motion": f"walk {index}",
         "time": "night", "place": "forest 🌲"}
    )


def _played(tmp_path: Path, clip: Path, turns: int = 3, window: int = 2) -> Session:
    session = new_session("Qiqi", window=window)
    for index in range(turns):
        copy = tmp_path / "clips" / f"clip{index}.mp4"
        copy.parent.mkdir(exist_ok=True)
        shutil.copyfile(clip, copy)
        session = record_turn(
            session,
            instruction=_instruction(index),
            states=GameStates(ml=index % 6, sc=1, et=-2, st=0),
            motion_scope_value=5.0,
            representation=torch.randn(226, 16),
            seed=1000 + index,
            clip_path=str(copy),
            timings=Timings(0.5, 1.5, 2.0),
        )
    return session


def _relocated(session: Session, clip_dir: Path) -> Session:
    """`session` with its clips where `load_game(..., clip_dir, ...)` unpacks them."""
    turns = tuple(
        dataclasses.replace(turn, clip_path=str(clip_dir / f"turn_{turn.index:04d}.mp4"))
        for turn in session.turns
    )
    return dataclasses.replace(session, turns=turns)


def test_round_trip_is_equal(tmp_path, clip):
    session = _played(tmp_path, clip)
    path = save_game(session, tmp_path / "game.zip")
    loaded = load_game(path, tmp_path / "loaded", CHARACTERS)
    assert loaded == _relocated(session, tmp_path / "loaded")
    assert loaded.session_id != session.session_id
    for original, restored in zip(session.turns, loaded.turns, strict=True):
        assert Path(restored.clip_path).read_bytes() == Path(original.clip_path).read_bytes()


def test_empty_game_round_trips(tmp_path):
    session = new_session("Sosuke")
    loaded = load_game(save_game(session, tmp_path / "g.zip"), tmp_path / "c", CHARACTERS)
    assert loaded == session


def _rewrite(path: Path, edit: Callable[[dict[str, bytes]], None]) -> None:
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    edit(members)
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def _edit_json(edit: Callable[[dict], None]) -> Callable[[dict[str, bytes]], None]:
    def apply(members: dict[str, bytes]) -> None:
        payload = json.loads(members["game.json"])
        edit(payload)
        members["game.json"] = json.dumps(payload).encode()
    return apply


def _set(path: tuple, value) -> Callable[[dict], None]:
    def apply(payload: dict) -> None:
        target = payload
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return apply


MALFORMED = {
    "not a zip": (lambda p: p.write_bytes(b"definitely not a zip"), "not a zip file"),
    "truncated": (lambda p: p.write_bytes(p.read_bytes()[:200]), "not a zip file"),
    "pickle smuggled in": (
        lambda p: _rewrite(p, lambda m: m.__setitem__("data.pkl", b"cos\nsystem\n")),
        "unexpected entry 'data.pkl'",
    ),
    "path traversal": (
        lambda p: _rewrite(p, lambda m: m.__setitem__("../../evil.mp4", b"x")),
        "unexpected entry",
    ),
    "json garbage": (
        lambda p: _rewrite(p, lambda m: m.__setitem__("game.json", b"{not json")),
        "not valid JSON",
    ),
    "wrong version": (lambda p: _rewrite(p, _edit_json(_set(("version",), 99))), "version 99"),
    "unknown character": (
        lambda p: _rewrite(p, _edit_json(_set(("character",), "Totoro"))),
        "'Totoro' is not playable",
    ),
    "state out of range": (
        lambda p: _rewrite(p, _edit_json(_set(("turns", 0, "states", "sc"), 9))),
        r"game.json: turn 1 states.sc: input should be less than or equal to 5, got 9\.",
    ),
    "forged gauges": (
        lambda p: _rewrite(p, _edit_json(_set(("turns", 1, "gauges", "stamina"), 100))),
        "turn 2 gauges do not follow",
    ),
    "instruction with control characters": (
        lambda p: _rewrite(p, _edit_json(_set(("turns", 0, "instruction", "place"), "a\x07b"))),
        "control",
    ),
    "missing clip": (
        lambda p: _rewrite(p, lambda m: m.pop("clips/turn_0002.mp4")),
        r"missing clips: clips/turn_0002\.mp4\.$",
    ),
    "clips without a turn": (
        lambda p: _rewrite(p, lambda m: m.update({f"clips/turn_{i:04d}.mp4": b"" for i in (7, 9)})),
        r"clips without a turn: clips/turn_0007\.mp4, clips/turn_0009\.mp4\.$",
    ),
    "version as a list": (
        lambda p: _rewrite(p, _edit_json(_set(("version",), [2, "x", [3]]))),
        r"saved-game version \[2, 'x', \[\.\.\.\]\] is not supported",
    ),
    "version as an object": (
        lambda p: _rewrite(p, _edit_json(_set(("version",), {"major": 2}))),
        r"saved-game version \{'major': 2\} is not supported",
    ),
    "corrupt representations": (
        lambda p: _rewrite(
            p, lambda m: m.__setitem__("representations.safetensors", b"\x00" * 40)
        ),
        "representations.safetensors is corrupt",
    ),
    "representation of the wrong shape": (
        lambda p: _rewrite(
            p,
            lambda m: m.__setitem__(
                "representations.safetensors",
                save_safetensors({"representation_0": torch.zeros(3, 16),
                                  "representation_1": torch.zeros(3, 16)}),
            ),
        ),
        "shape",
    ),
    "extra field": (
        lambda p: _rewrite(p, _edit_json(_set(("turns", 0, "admin"), True))),
        "game.json: turn 1 admin is not a known field",
    ),
    "turns out of order": (
        lambda p: _rewrite(p, _edit_json(_set(("turns", 0, "index"), 2))),
        "turn 1 is numbered 2",
    ),
    "motion level not from the states": (
        lambda p: _rewrite(p, _edit_json(_set(("turns", 1, "motion_level"), 5))),
        "turn 2 motion_level does not match its states",
    ),
    "boolean seed": (
        lambda p: _rewrite(p, _edit_json(_set(("turns", 0, "seed"), True))),
        "game.json: turn 1 seed: input should be a valid integer, got True",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_save_files_are_rejected(tmp_path, clip, case):
    corrupt, message = MALFORMED[case]
    path = save_game(_played(tmp_path, clip), tmp_path / "game.zip")
    corrupt(path)
    target = tmp_path / "loaded"
    with pytest.raises(SaveFileError, match=message):
        load_game(path, target, CHARACTERS)
    assert not target.exists() or not any(target.iterdir())


def test_zip_bomb_is_refused(tmp_path, clip):
    path = save_game(_played(tmp_path, clip), tmp_path / "game.zip")
    _rewrite(path, lambda m: None)
    with zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("clips/turn_0009.mp4", b"\x00" * (8 << 20))
    with pytest.raises(SaveFileError, match="suspiciously compressed"):
        load_game(path, tmp_path / "loaded", CHARACTERS)


def test_a_game_saved_with_other_models_is_refused(tmp_path, clip):
    path = save_game(_played(tmp_path, clip), tmp_path / "game.zip")
    with pytest.raises(SaveFileError, match="16 wide, these models use 1920"):
        load_game(path, tmp_path / "loaded", CHARACTERS, representation_dim=1920)
    assert len(load_game(path, tmp_path / "ok", CHARACTERS, representation_dim=16).turns) == 3


# Round trips of every reachable session ---------------------------------------------------------


def test_a_game_undone_below_its_window_loads_back(tmp_path, clip):
    """Play, play, undo with window 1 leaves one turn and no representation; it must load."""
    session = undo(_played(tmp_path, clip, turns=2, window=1))
    assert len(session.turns) == 1 and not session.representations
    loaded = load_game(save_game(session, tmp_path / "g.zip"), tmp_path / "loaded", CHARACTERS)
    assert loaded == _relocated(session, tmp_path / "loaded")


def _play(session: Session, rng: random.Random, clip: Path, folder: Path) -> Session:
    copy = folder / f"clip-{rng.getrandbits(64):016x}.mp4"
    shutil.copyfile(clip, copy)
    return record_turn(
        session,
        instruction=_instruction(len(session.turns)),
        states=GameStates(*(rng.randint(-5, 5) for _ in range(4))),
        motion_scope_value=rng.uniform(0.5, 10.0),
        representation=torch.randn(226, 8),
        seed=rng.getrandbits(63),
        clip_path=str(copy),
        timings=Timings(rng.random(), rng.random(), rng.random()),
    )


def _save_and_load(session: Session, folder: Path, history: list[str]) -> Session:
    folder.mkdir()
    path = save_game(session, folder / "game.zip")
    loaded = load_game(path, folder / "clips", CHARACTERS)
    assert loaded == _relocated(session, folder / "clips"), f"after {history}"
    return loaded


def test_every_reachable_session_saves_and_loads_back(tmp_path, clip):
    """A property over random play/undo/restart/save+load sequences: each save loads back equal
    to the session saved, and play continues on the loaded session."""
    rng = random.Random(20250610)
    (tmp_path / "played").mkdir()
    actions, weights = ["play", "undo", "restart", "save"], [8, 5, 1, 3]
    for case in range(60):
        session = new_session("Sosuke", window=rng.randint(1, MAX_WINDOW))
        history = [f"window {session.window}"]
        for step in range(rng.randint(1, 20)):
            [action] = rng.choices(actions, weights)
            history.append(action)
            if action == "play":
                session = _play(session, rng, clip, tmp_path / "played")
            elif action == "undo" and session.turns:
                session = undo(session)
            elif action == "restart":
                session = restart(session)
            elif action == "save":
                session = _save_and_load(session, tmp_path / f"{case}-{step}", history)
        _save_and_load(session, tmp_path / f"{case}-end", history)


# Work limits -------------------------------------------------------------------------------------


def _turn_json(index: int) -> dict:
    return {
        "index": index,
        "instruction": _instruction(index).fields(),
        "states": {"ml": 3, "sc": 1, "et": 1, "st": 1},
        "motion_level": 3,
        "motion_scope": 5.0,
        "gauges": {"stamina": min(100, 50 + 5 * index), "social": min(100, 50 + 5 * index),
                   "entertainment": min(100, 50 + 5 * index)},
        "seed": index,
        "timings": {"predict_s": 1.0, "decode_s": 1.0, "total_s": 2.0},
    }


def _game_json(turns: list) -> bytes:
    return json.dumps({"format": "animegamer-save", "version": 1, "character": "Qiqi",
                       "window": 1, "turns": turns}).encode()


def _no_zipfile(monkeypatch) -> None:
    """Make constructing a ZipFile fail the test: the refusal must come before it."""
    def refuse(*args, **kwargs):
        raise AssertionError("zipfile.ZipFile was constructed")
    monkeypatch.setattr(save_reading.zipfile, "ZipFile", refuse)


def _refusal_seconds(path: Path, target: Path, match: str) -> float:
    start = time.perf_counter()
    with pytest.raises(SaveFileError, match=match):
        load_game(path, target, CHARACTERS)
    return time.perf_counter() - start


def test_a_save_of_20000_turns_is_refused_from_the_zip_directory(tmp_path, monkeypatch):
    path = tmp_path / "long.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("game.json", _game_json([_turn_json(i) for i in range(1, 20_001)]))
        archive.writestr("representations.safetensors", save_safetensors({}))
        for index in range(1, 20_001):
            archive.writestr(f"clips/turn_{index:04d}.mp4", b"")
    _no_zipfile(monkeypatch)
    seconds = _refusal_seconds(path, tmp_path / "loaded", "20002 entries; at most 1002")
    assert seconds < 0.5
    assert not (tmp_path / "loaded").exists()


def _zip_of_empty_entries(count: int, name_bytes: int = 8) -> bytes:
    """A valid zip of `count` empty stored entries, built directly (zipfile takes 3 s for 100k);
    over 65,535 entries it needs, as zipfile writes it, a ZIP64 end record."""
    local, central = [], []
    offset = 0
    for index in range(count):
        name = f"{index:0{name_bytes}d}".encode()
        header = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 0, 0, 0, 0, 0, 0, len(name), 0)
        local.append(header + name)
        central.append(
            struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 0, 0, 0, 0, 0, 0,
                        len(name), 0, 0, 0, 0, 0, offset) + name
        )
        offset += len(header) + len(name)
    directory = b"".join(central)
    zip64 = b""
    if count > 0xFFFF:
        zip64 = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count,
                            len(directory), offset)
        zip64 += struct.pack("<4sLQL", b"PK\x06\x07", 0, offset + len(directory), 1)
        count, size, start = 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF
    else:
        size, start = len(directory), offset
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, count, count, size, start, 0)
    return b"".join(local) + directory + zip64 + end


@pytest.mark.parametrize("count", [5, 70_000])
def test_the_empty_entries_builder_makes_a_real_zip(count):
    import io

    with zipfile.ZipFile(io.BytesIO(_zip_of_empty_entries(count))) as archive:
        names = archive.namelist()
        assert len(names) == count and names[-1] == f"{count - 1:08d}"
        assert archive.read(names[-1]) == b""


def test_a_zip_of_100000_empty_entries_is_refused_before_its_directory_is_read(
    tmp_path, monkeypatch
):
    """So many entries need ZIP64, which a saved game never is."""
    path = tmp_path / "many.zip"
    path.write_bytes(_zip_of_empty_entries(100_000))
    _no_zipfile(monkeypatch)
    assert _refusal_seconds(path, tmp_path / "loaded", "is a ZIP64 or multi-disk archive") < 0.5


def test_a_zip_of_65000_empty_entries_is_refused_before_its_directory_is_read(
    tmp_path, monkeypatch
):
    path = tmp_path / "many.zip"
    path.write_bytes(_zip_of_empty_entries(65_000))
    _no_zipfile(monkeypatch)
    assert _refusal_seconds(path, tmp_path / "loaded", "65000 entries; at most 1002") < 0.5


def test_a_zip_directory_too_large_for_its_entry_count_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "wide.zip"
    path.write_bytes(_zip_of_empty_entries(3, name_bytes=1000))
    _no_zipfile(monkeypatch)
    _refusal_seconds(path, tmp_path / "loaded", "zip directory is implausibly large")


@pytest.mark.parametrize(
    "edit",
    [
        lambda data: data[:-22] + b"PK\x06\x07" + bytes(16) + data[-22:],  # a ZIP64 locator
        lambda data: data[:-18] + struct.pack("<H", 1) + data[-16:],  # on disk 1
    ],
    ids=["zip64", "multi-disk"],
)
def test_zip64_and_multi_disk_archives_are_refused(tmp_path, clip, edit):
    path = save_game(_played(tmp_path, clip), tmp_path / "game.zip")
    path.write_bytes(edit(path.read_bytes()))
    with pytest.raises(SaveFileError, match="ZIP64 or multi-disk"):
        load_game(path, tmp_path / "loaded", CHARACTERS)


def test_a_turn_list_longer_than_a_game_is_refused_before_any_turn_is_parsed(tmp_path, clip):
    """The turns are not even objects: had one been parsed, the error would be about it."""
    path = save_game(new_session("Qiqi"), tmp_path / "game.zip")
    _rewrite(path, lambda m: m.__setitem__("game.json", _game_json([7] * (MAX_GAME_TURNS + 1))))
    message = f"turns: list should have at most {MAX_GAME_TURNS} items after validation, not "
    with pytest.raises(SaveFileError, match=message + f"{MAX_GAME_TURNS + 1}"):
        load_game(path, tmp_path / "loaded", CHARACTERS)


def test_other_compressions_and_encryption_are_refused(tmp_path, clip):
    path = save_game(_played(tmp_path, clip), tmp_path / "game.zip")
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("clips/turn_0009.mp4", b"x" * 100, zipfile.ZIP_BZIP2)
    with pytest.raises(SaveFileError, match=r"turn_0009\.mp4' is encrypted or uses an unsupported"):
        load_game(path, tmp_path / "loaded", CHARACTERS)


# Every refusal is a short, specific SaveFileError -----------------------------------------------


def _with_game_json(text: bytes) -> Callable[[dict[str, bytes]], None]:
    return lambda members: members.__setitem__("game.json", text)


def _replace_in_json(old: bytes, new: bytes) -> Callable[[dict[str, bytes]], None]:
    def apply(members: dict[str, bytes]) -> None:
        assert old in members["game.json"]
        members["game.json"] = members["game.json"].replace(old, new, 1)
    return apply


HOSTILE_JSON = {
    "10,000 nested lists": (_with_game_json(b"[" * 10_000 + b"]" * 10_000), "nested too deeply"),
    "10,000 nested objects": (
        _with_game_json(b'{"a":' * 10_000 + b"1" + b"}" * 10_000), "nested too deeply"
    ),
    "1e400 in a timing": (
        _replace_in_json(b'"predict_s": 0.5', b'"predict_s": 1e400'),
        "turn 1 timings.predict_s: input should be a finite number, got inf",
    ),
    "NaN in a timing": (
        _replace_in_json(b'"predict_s": 0.5', b'"predict_s": NaN'), "holds NaN, which is not"
    ),
    "5000-digit seed": (
        _replace_in_json(b'"seed": 1000', b'"seed": ' + b"9" * 5000),
        "game.json holds a number of thousands of digits",
    ),
    "5000-digit window": (
        _replace_in_json(b'"window": 2', b'"window": ' + b"1" * 5000), "thousands of digits"
    ),
    "not UTF-8": (_with_game_json(b'{"format": "\xff"}'), "not UTF-8"),
    "4000-digit seed": (
        _replace_in_json(b'"seed": 1000', b'"seed": ' + b"9" * 4000),
        "turn 1 seed: input should be less than or equal to 9223372036854775807, got a very long",
    ),
    "game.json over 4 MiB": (_with_game_json(b" " * (5 << 20)), "game.json is too large"),
    "seed beyond 63 bits": (
        _replace_in_json(b'"seed": 1000', b'"seed": 99999999999999999999'),
        r"turn 1 seed: input should be less than or equal to 9223372036854775807, got 9{20}\.",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_JSON))
def test_hostile_json_gets_a_short_specific_message(tmp_path, clip, case):
    edit, message = HOSTILE_JSON[case]
    path = save_game(_played(tmp_path, clip), tmp_path / "game.zip")
    _rewrite(path, edit)
    with pytest.raises(SaveFileError, match=message) as caught:
        load_game(path, tmp_path / "loaded", CHARACTERS)
    assert len(str(caught.value)) < 200
    assert not (tmp_path / "loaded").exists()


HUGE = "N" * (3 << 20)


HUGE_VALUES = {
    "character": (("character",), HUGE, r"character: string should have at most 64 characters, "
                  r"got 'N{50,}\.\.\.\.$"),
    "version": (("version",), HUGE, r"saved-game version 'N{50,}\.\.\. is not supported"),
    "index": (("turns", 0, "index"), HUGE, r"turn 1 index: input should be a valid integer, "
              r"got 'N{50,}\.\.\.\.$"),
    "instruction": (("turns", 0, "instruction", "place"), HUGE,
                    r"turn 1 instruction.place: string should have at most 320 characters"),
    "field name": (("turns", 0, "admin" + HUGE), True,
                   r"game.json: turn 1 adminN{50,} is not a known field\.$"),
}


@pytest.mark.parametrize("case", sorted(HUGE_VALUES))
def test_a_huge_value_is_not_echoed_whole(tmp_path, clip, case):
    field, value, message = HUGE_VALUES[case]
    path = save_game(_played(tmp_path, clip), tmp_path / "game.zip")
    _rewrite(path, _edit_json(_set(field, value)))
    with pytest.raises(SaveFileError, match=message) as caught:
        load_game(path, tmp_path / "loaded", CHARACTERS)
    assert len(str(caught.value)) < 150


def test_a_huge_entry_name_is_not_echoed_whole(tmp_path, clip):
    path = save_game(_played(tmp_path, clip), tmp_path / "game.zip")
    _rewrite(path, lambda m: m.__setitem__("x" * 250, b""))
    with pytest.raises(SaveFileError, match=r"unexpected entry 'x{50,}\.\.\. in") as caught:
        load_game(path, tmp_path / "loaded", CHARACTERS)
    assert len(str(caught.value)) < 150


def test_a_damaged_entry_is_a_save_file_error(tmp_path, clip):
    path = save_game(_played(tmp_path, clip), tmp_path / "game.zip")
    data = bytearray(path.read_bytes())
    at = data.index(b"clips/turn_0002.mp4") + len("clips/turn_0002.mp4") + 200
    data[at : at + 8] = b"\xff" * 8  # inside the stored clip: its CRC no longer matches
    path.write_bytes(bytes(data))
    with pytest.raises(SaveFileError, match=r"game.zip is damaged \(Bad CRC-32"):
        load_game(path, tmp_path / "loaded", CHARACTERS)
    assert not (tmp_path / "loaded").exists()


# Clips -------------------------------------------------------------------------------------------


def _mpeg4_clip(path: Path) -> bytes:
    writer = imageio_ffmpeg.write_frames(str(path), (16, 16), fps=8, codec="mpeg4")
    writer.send(None)
    for _ in range(3):
        writer.send(np.zeros((16, 16, 3), np.uint8))
    writer.close()
    return path.read_bytes()


def _frames(path: Path, count: int, size: int = 16) -> bytes:
    return write_mp4(np.zeros((count, size, size, 3), np.uint8), path).read_bytes()


BAD_CLIPS = {
    "DASH manifest": (
        lambda tmp: b'<?xml version="1.0"?><MPD xmlns="urn:mpeg:dash:schema:mpd:2011">'
                    b'<BaseURL>file:///etc/passwd</BaseURL></MPD>',
        "turn 2 is not a valid clip \\(not an mp4 file",
    ),
    "HLS playlist": (
        lambda tmp: b"#EXTM3U\n#EXTINF:1,\nfile:///etc/passwd\n#EXT-X-ENDLIST\n",
        "turn 2 is not a valid clip \\(not an mp4 file",
    ),
    "MPEG-4 part 2": (
        lambda tmp: _mpeg4_clip(tmp / "m4.mp4"), "codec 'mp4v' is not H.264",
    ),
    "other frame count": (
        lambda tmp: _frames(tmp / "f5.mp4", 5), "turn 2 has 5 frames of 16x16; the first has 3"
    ),
    "other frame size": (
        lambda tmp: _frames(tmp / "s32.mp4", 3, 32), "has 3 frames of 32x32; the first has 3 of"
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CLIPS))
def test_clips_are_checked_and_a_refusal_leaves_nothing(tmp_path, clip, case):
    make, message = BAD_CLIPS[case]
    data = make(tmp_path)
    path = save_game(_played(tmp_path, clip), tmp_path / "game.zip")
    _rewrite(path, lambda m: m.__setitem__("clips/turn_0002.mp4", data))
    with pytest.raises(SaveFileError, match=message):
        load_game(path, tmp_path / "loaded", CHARACTERS)
    assert not (tmp_path / "loaded").exists()  # turn 1's clip was written, then removed


# Full disks --------------------------------------------------------------------------------------


def test_a_full_disk_while_unpacking_says_so_and_leaves_nothing(tmp_path, clip, monkeypatch):
    path = save_game(_played(tmp_path, clip), tmp_path / "game.zip")
    real_write = Path.write_bytes

    def write_then_fill(self: Path, data: bytes) -> int:
        if self.name == "turn_0002.mp4":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(self, data)

    monkeypatch.setattr(Path, "write_bytes", write_then_fill)
    with pytest.raises(SaveFileError) as caught:
        load_game(path, tmp_path / "loaded", CHARACTERS)
    assert str(caught.value) == DISK_FULL and "disk is full" in DISK_FULL
    assert not (tmp_path / "loaded").exists()


def test_a_save_on_a_full_disk_leaves_nothing_and_raises_the_error(tmp_path, clip, monkeypatch):
    session = _played(tmp_path, clip)
    target = tmp_path / "saves" / "game.zip"
    target.parent.mkdir()
    target.write_bytes(b"the previous save")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(zipfile.ZipFile, "write", full)
    with pytest.raises(OSError) as caught:
        save_game(session, target)
    assert caught.value.errno == errno.ENOSPC
    assert [p.name for p in target.parent.iterdir()] == ["game.zip"]
    assert target.read_bytes() == b"the previous save"


class OnlyQiqi:
    """A turn check as the app's: each turn must be the game's character walking (records the
    turns it saw)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def __call__(self, character: str, instruction) -> None:
        self.seen.append((character, instruction.character))
        if instruction.character != character:
            raise InstructionError(f"This game plays {character}; the instruction names "
                                   f"{instruction.character}.")
        if not instruction.motion.startswith("walk"):
            raise InstructionError(f"{character} cannot {instruction.motion}.")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("character", "Sosuke",
      r"^turn 2 cannot be played in a game of Qiqi: This game plays Qiqi; the instruction "
      r"names Sosuke\.$"),
     ("motion", "fly on broomstick",
      r"^turn 2 cannot be played in a game of Qiqi: Qiqi cannot fly on broomstick\.$")],
)
def test_a_turn_the_game_could_not_play_is_refused_by_its_number(
    tmp_path, clip, field, value, message
):
    path = save_game(_played(tmp_path, clip), tmp_path / "game.zip")
    _rewrite(path, _edit_json(_set(("turns", 1, "instruction", field), value)))
    _rewrite(path, _edit_json(_set(("turns", 2, "instruction", field), value)))
    with pytest.raises(SaveFileError, match=message):
        load_game(path, tmp_path / "loaded", CHARACTERS, check_turn=OnlyQiqi())
    assert not (tmp_path / "loaded").exists()


def test_every_turn_of_a_loaded_game_is_checked(tmp_path, clip):
    path = save_game(_played(tmp_path, clip, turns=4), tmp_path / "game.zip")
    check = OnlyQiqi()
    load_game(path, tmp_path / "loaded", CHARACTERS, check_turn=check)
    assert check.seen == [("Qiqi", "Qiqi")] * 4


def test_a_refusal_to_read_names_no_server_path(tmp_path, clip, monkeypatch):
    path = save_game(_played(tmp_path, clip), tmp_path / "game.zip")

    def unreadable(self, name):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "secret"))

    monkeypatch.setattr(zipfile.ZipFile, "read", unreadable)
    with pytest.raises(SaveFileError) as refused:
        load_game(path, tmp_path / "loaded", CHARACTERS)
    assert str(refused.value) == "game.zip could not be read (Permission denied)."
