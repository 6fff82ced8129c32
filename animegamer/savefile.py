"""Saved games: one zip holding the session as JSON, the window's representations as
safetensors, and the clips.

Loading treats the file as hostile: nothing in it is executed (no pickle), every member name,
size, field, type and range is checked, and the gauges are recomputed from the states so a file
cannot claim a game that was never played.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import zipfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from animegamer.game import (
    MAX_WINDOW,
    REPRESENTATION_TOKENS,
    STATE_DELTA_RANGE,
    GameStates,
    Gauges,
    InstructionError,
    Session,
    Timings,
    Turn,
    apply_states,
    effective_motion_level,
    make_instruction,
)

SAVE_FORMAT = "animegamer-save"
SAVE_VERSION = 1
GAME_MEMBER = "game.json"
REPRESENTATIONS_MEMBER = "representations.safetensors"
CLIP_MEMBER = re.compile(r"^clips/turn_(\d{1,6})\.mp4$")
MAX_FILE_BYTES = 1 << 30
MAX_MEMBER_BYTES = 64 << 20
MAX_JSON_BYTES = 16 << 20
MAX_COMPRESSION_RATIO = 200


class SaveFileError(ValueError):
    """A saved game that cannot be loaded; the message says what is wrong with it."""


def clip_member(index: int) -> str:
    return f"clips/turn_{index:04d}.mp4"


def _turn_to_json(turn: Turn) -> dict[str, Any]:
    return {
        "index": turn.index,
        "instruction": turn.instruction.fields(),
        "states": dataclasses.asdict(turn.states),
        "motion_level": turn.motion_level,
        "motion_scope": turn.motion_scope,
        "gauges": turn.gauges.as_dict(),
        "seed": turn.seed,
        "timings": dataclasses.asdict(turn.timings),
    }


def save_game(session: Session, path: str | Path) -> Path:
    """Write `session` (with its clips) to one zip file at `path`."""
    path = Path(path)
    payload = {
        "format": SAVE_FORMAT,
        "version": SAVE_VERSION,
        "character": session.character,
        "window": session.window,
        "turns": [_turn_to_json(turn) for turn in session.turns],
    }
    tensors = {
        f"representation_{i}": rep.detach().to("cpu", torch.float32).contiguous()
        for i, rep in enumerate(session.representations)
    }
    tmp = path.with_name(path.name + ".partial")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(GAME_MEMBER, json.dumps(payload, indent=1, ensure_ascii=False))
        archive.writestr(REPRESENTATIONS_MEMBER, save_safetensors(tensors))
        for turn in session.turns:
            if turn.clip_path and Path(turn.clip_path).is_file():
                archive.write(turn.clip_path, clip_member(turn.index), zipfile.ZIP_STORED)
    tmp.replace(path)
    return path


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise SaveFileError(message)


def _int_in(value: Any, low: int, high: int, what: str) -> int:
    _require(
        isinstance(value, int) and not isinstance(value, bool) and low <= value <= high,
        f"{what} must be an integer in {low}..{high}, got {value!r}.",
    )
    return value


def _number(value: Any, what: str, *, positive: bool = False) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    _require(ok and (value > 0 if positive else value >= 0), f"{what} is not a valid number.")
    return float(value)


def _object(value: Any, keys: set[str], what: str) -> dict[str, Any]:
    _require(isinstance(value, dict), f"{what} must be an object.")
    _require(set(value) == keys, f"{what} must have exactly the fields {sorted(keys)}.")
    return value


def _parse_turn(raw: Any, position: int, previous: Gauges, clip_dir: Path) -> Turn:
    what = f"turn {position}"
    raw = _object(
        raw,
        {"index", "instruction", "states", "motion_level", "motion_scope", "gauges", "seed",
         "timings"},
        what,
    )
    _require(raw["index"] == position, f"{what} is numbered {raw['index']!r}.")
    fields = _object(
        raw["instruction"], {"character", "adverb", "motion", "time", "place"},
        f"{what} instruction",
    )
    try:
        instruction = make_instruction(fields)
    except InstructionError as error:
        raise SaveFileError(f"{what} instruction: {error}") from None
    states_raw = _object(raw["states"], {"ml", "sc", "et", "st"}, f"{what} states")
    low, high = STATE_DELTA_RANGE
    states = GameStates(
        ml=_int_in(states_raw["ml"], low, high, f"{what} motion level"),
        sc=_int_in(states_raw["sc"], low, high, f"{what} social delta"),
        et=_int_in(states_raw["et"], low, high, f"{what} entertainment delta"),
        st=_int_in(states_raw["st"], low, high, f"{what} stamina delta"),
    )
    motion_level = _int_in(raw["motion_level"], 1, 5, f"{what} motion_level")
    _require(
        motion_level == effective_motion_level(states.ml),
        f"{what} motion_level does not match its states.",
    )
    gauges_raw = _object(raw["gauges"], {"stamina", "social", "entertainment"}, f"{what} gauges")
    gauges = Gauges(**{k: _int_in(v, 0, 100, f"{what} {k}") for k, v in gauges_raw.items()})
    _require(
        gauges == apply_states(previous, states),
        f"{what} gauges do not follow from the previous turn and its states.",
    )
    timings_raw = _object(raw["timings"], {"predict_s", "decode_s", "total_s"}, f"{what} timings")
    return Turn(
        index=position,
        instruction=instruction,
        states=states,
        motion_level=motion_level,
        motion_scope=_number(raw["motion_scope"], f"{what} motion_scope", positive=True),
        gauges=gauges,
        seed=_int_in(raw["seed"], 0, 2**63 - 1, f"{what} seed"),
        clip_path=str(clip_dir / f"turn_{position:04d}.mp4"),
        timings=Timings(**{k: _number(v, f"{what} {k}") for k, v in timings_raw.items()}),
    )


def _check_members(archive: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    members: dict[str, zipfile.ZipInfo] = {}
    total = 0
    for info in archive.infolist():
        name = info.filename
        allowed = name in {GAME_MEMBER, REPRESENTATIONS_MEMBER} or CLIP_MEMBER.match(name)
        _require(bool(allowed), f"unexpected entry {name!r} in the saved game.")
        _require(name not in members, f"entry {name!r} appears twice.")
        _require(info.file_size <= MAX_MEMBER_BYTES, f"entry {name!r} is too large.")
        ratio = info.file_size / max(info.compress_size, 1)
        _require(ratio <= MAX_COMPRESSION_RATIO, f"entry {name!r} is suspiciously compressed.")
        total += info.file_size
        members[name] = info
    _require(total <= MAX_FILE_BYTES, "the saved game is too large once unpacked.")
    for name in (GAME_MEMBER, REPRESENTATIONS_MEMBER):
        _require(name in members, f"the saved game has no {name}.")
    return members


def _read_representations(data: bytes, window: int, turn_count: int) -> tuple[torch.Tensor, ...]:
    try:
        tensors = load_safetensors(data)
    except Exception as error:  # safetensors raises several types for corrupt input
        raise SaveFileError(f"{REPRESENTATIONS_MEMBER} is corrupt ({error}).") from None
    count = len(tensors)
    _require(
        count == min(window, turn_count),
        f"{REPRESENTATIONS_MEMBER} holds {count} representations; expected "
        f"{min(window, turn_count)}.",
    )
    expected = {f"representation_{i}" for i in range(count)}
    _require(set(tensors) == expected, f"{REPRESENTATIONS_MEMBER} has unexpected names.")
    reps = tuple(tensors[f"representation_{i}"] for i in range(count))
    widths = {rep.shape[-1] for rep in reps}
    for rep in reps:
        _require(
            rep.dtype == torch.float32 and rep.ndim == 2 and rep.shape[0] == REPRESENTATION_TOKENS,
            f"a representation has shape {tuple(rep.shape)} / {rep.dtype}; expected "
            f"[{REPRESENTATION_TOKENS}, D] float32.",
        )
        _require(bool(torch.isfinite(rep).all()), "a representation holds non-finite values.")
    _require(len(widths) <= 1, "the representations have different widths.")
    return reps


def load_game(
    path: str | Path,
    clip_dir: str | Path,
    character_names: set[str],
    representation_dim: int | None = None,
) -> Session:
    """Read a saved game, validating everything, and unpack its clips into `clip_dir`.

    `representation_dim`, when given, is the width the playing models use: a game saved with
    other models (the preview engine's 64 against the real 1920) could not continue.
    The loaded session gets a new `session_id`: it is a new game that continues the saved one.
    """
    path, clip_dir = Path(path), Path(clip_dir)
    _require(path.is_file(), f"{path.name} is not a file.")
    _require(path.stat().st_size <= MAX_FILE_BYTES, "the saved game is too large.")
    try:
        with zipfile.ZipFile(path) as archive:
            members = _check_members(archive)
            game_info = members[GAME_MEMBER]
            _require(game_info.file_size <= MAX_JSON_BYTES, f"{GAME_MEMBER} is too large.")
            try:
                payload = json.loads(archive.read(GAME_MEMBER).decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as error:
                raise SaveFileError(f"{GAME_MEMBER} is not valid JSON ({error}).") from None
            payload = _object(
                payload, {"format", "version", "character", "window", "turns"}, GAME_MEMBER
            )
            _require(payload["format"] == SAVE_FORMAT, "this is not an AnimeGamer saved game.")
            _require(
                payload["version"] == SAVE_VERSION,
                f"saved-game version {payload['version']!r} is not supported "
                f"(this app reads version {SAVE_VERSION}).",
            )
            character = payload["character"]
            _require(
                isinstance(character, str) and character in character_names,
                f"the saved game's character {character!r} is not playable here.",
            )
            window = _int_in(payload["window"], 1, MAX_WINDOW, "window")
            raw_turns = payload["turns"]
            _require(isinstance(raw_turns, list), "turns must be a list.")
            turns: list[Turn] = []
            gauges = Gauges()
            for position, raw in enumerate(raw_turns, start=1):
                turn = _parse_turn(raw, position, gauges, clip_dir)
                turns.append(turn)
                gauges = turn.gauges
            clip_names = {clip_member(turn.index) for turn in turns}
            stray = sorted(n for n in members if CLIP_MEMBER.match(n) and n not in clip_names)
            _require(not stray, f"clips without a turn: {stray}.")
            missing = sorted(clip_names - set(members))
            _require(not missing, f"missing clips: {missing}.")
            reps = _read_representations(
                archive.read(REPRESENTATIONS_MEMBER), window, len(turns)
            )
            saved_width = reps[0].shape[-1] if reps else representation_dim
            _require(
                saved_width == representation_dim or representation_dim is None,
                f"this game was saved with other models (representations {saved_width} wide, "
                f"these models use {representation_dim}); it cannot continue here.",
            )
            clip_dir.mkdir(parents=True, exist_ok=True)
            for turn in turns:
                Path(turn.clip_path).write_bytes(archive.read(clip_member(turn.index)))
    except zipfile.BadZipFile:
        raise SaveFileError(f"{path.name} is not a saved game (not a zip file).") from None
    except (zipfile.LargeZipFile, NotImplementedError, EOFError, OSError) as error:
        raise SaveFileError(f"{path.name} could not be read ({error}).") from None
    return Session(
        character=character, window=window, turns=tuple(turns), representations=reps
    )

