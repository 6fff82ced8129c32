"""Saved games: round trip, and hostile or corrupt files rejected with a clear error."""

from __future__ import annotations

import dataclasses
import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import save as save_safetensors

from animegamer.game import GameStates, Session, Timings, make_instruction, new_session, record_turn
from animegamer.savefile import SaveFileError, load_game, save_game

CHARACTERS = {"Qiqi", "Sosuke"}


def _played(tmp_path: Path, turns: int = 3, window: int = 2) -> Session:
    session = new_session("Qiqi", window=window)
    for index in range(turns):
        clip = tmp_path / "clips" / f"clip{index}.mp4"
        clip.parent.mkdir(exist_ok=True)
        clip.write_bytes(f"fake mp4 {index}".encode())
        session = record_turn(
            session,
            instruction=make_instruction(
                {"character": "Qiqi", "adverb": "slowly", "motion": f"walk {index}",
                 "time": "night", "place": "forest 🌲"}
            ),
            states=GameStates(ml=index % 6, sc=1, et=-2, st=0),
            motion_scope_value=5.0,
            representation=torch.randn(226, 16),
            seed=1000 + index,
            clip_path=str(clip),
            timings=Timings(0.5, 1.5, 2.0),
        )
    return session


def test_round_trip_is_equal(tmp_path):
    session = _played(tmp_path)
    path = save_game(session, tmp_path / "game.zip")
    loaded = load_game(path, tmp_path / "loaded", CHARACTERS)
    expected_turns = tuple(
        dataclasses.replace(turn, clip_path=str(tmp_path / "loaded" / f"turn_{turn.index:04d}.mp4"))
        for turn in session.turns
    )
    assert loaded == dataclasses.replace(session, turns=expected_turns)
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
        "social delta must be an integer in -5..5",
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
        "missing clips",
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
        "exactly the fields",
    ),
    "boolean seed": (
        lambda p: _rewrite(p, _edit_json(_set(("turns", 0, "seed"), True))),
        "seed must be an integer",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_save_files_are_rejected(tmp_path, case):
    corrupt, message = MALFORMED[case]
    path = save_game(_played(tmp_path), tmp_path / "game.zip")
    corrupt(path)
    target = tmp_path / "loaded"
    with pytest.raises(SaveFileError, match=message):
        load_game(path, target, CHARACTERS)
    assert not target.exists() or not any(target.iterdir())


def test_zip_bomb_is_refused(tmp_path):
    path = save_game(_played(tmp_path), tmp_path / "game.zip")
    _rewrite(path, lambda m: None)
    with zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("clips/turn_0009.mp4", b"\x00" * (8 << 20))
    with pytest.raises(SaveFileError, match="suspiciously compressed"):
        load_game(path, tmp_path / "loaded", CHARACTERS)


def test_a_game_saved_with_other_models_is_refused(tmp_path):
    path = save_game(_played(tmp_path), tmp_path / "game.zip")
    with pytest.raises(SaveFileError, match="16 wide, these models use 1920"):
        load_game(path, tmp_path / "loaded", CHARACTERS, representation_dim=1920)
    assert len(load_game(path, tmp_path / "ok", CHARACTERS, representation_dim=16).turns) == 3
