"""Saved games: one zip holding the session as JSON (`game.json`, the schema `GameJson`), the
window's representations as safetensors, and the clips, one per turn; `save_game` writes one.
Reading one back, as a hostile file, is `animegamer.game.save_reading`.
"""

from __future__ import annotations

import dataclasses
import json
import re
import zipfile
from pathlib import Path
from typing import Annotated, Any

import torch
from pydantic import BaseModel, ConfigDict, Field
from safetensors.torch import save as save_safetensors

from animegamer.game.rules import (
    GAUGE_MAX,
    GAUGE_MIN,
    MAX_FIELD_CHARS,
    MAX_GAME_TURNS,
    MAX_WINDOW,
    MOTION_LEVELS,
    STATE_DELTA_RANGE,
    Session,
    Turn,
)

SAVE_FORMAT = "animegamer-save"
SAVE_VERSION = 1
GAME_MEMBER = "game.json"
REPRESENTATIONS_MEMBER = "representations.safetensors"
CLIP_MEMBER = re.compile(r"^clips/turn_(\d{1,6})\.mp4$")
MAX_SEED = 2**63 - 1
MAX_NAME_CHARS = 64
"""A character name of the registry is at most 64 characters."""


class _Schema(BaseModel):
    """Strict (no coercion: a bool is not an integer, "3" is not a number), closed (no unknown
    fields) and immutable."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


Delta = Annotated[int, Field(ge=STATE_DELTA_RANGE[0], le=STATE_DELTA_RANGE[1])]
GaugeValue = Annotated[int, Field(ge=GAUGE_MIN, le=GAUGE_MAX)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
FieldText = Annotated[str, Field(max_length=4 * MAX_FIELD_CHARS)]
"""`make_instruction` holds each field to the rules a typed one has; this bounds the raw text."""


class InstructionJson(_Schema):
    character: FieldText
    adverb: FieldText
    motion: FieldText
    time: FieldText
    place: FieldText


class StatesJson(_Schema):
    ml: Delta
    sc: Delta
    et: Delta
    st: Delta


class GaugesJson(_Schema):
    stamina: GaugeValue
    social: GaugeValue
    entertainment: GaugeValue


class TimingsJson(_Schema):
    predict_s: Seconds
    decode_s: Seconds
    total_s: Seconds


class TurnJson(_Schema):
    index: Annotated[int, Field(ge=1, le=MAX_GAME_TURNS)]
    instruction: InstructionJson
    states: StatesJson
    motion_level: Annotated[int, Field(ge=min(MOTION_LEVELS), le=max(MOTION_LEVELS))]
    motion_scope: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    gauges: GaugesJson
    seed: Annotated[int, Field(ge=0, le=MAX_SEED)]
    timings: TimingsJson


class GameJson(_Schema):
    """game.json. `format` and `version` are checked first, with their own messages."""

    format: str
    version: int
    character: Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]
    window: Annotated[int, Field(ge=1, le=MAX_WINDOW)]
    turns: Annotated[list[TurnJson], Field(max_length=MAX_GAME_TURNS)]


def clip_member(index: int) -> str:
    return f"clips/turn_{index:04d}.mp4"


def _turn_to_json(turn: Turn) -> dict[str, Any]:
    return {
        "index": turn.index,
        "instruction": turn.instruction.fields(),
        "states": {name: getattr(turn.states, name) for name in StatesJson.model_fields},
        "motion_level": turn.motion_level,
        "motion_scope": turn.motion_scope,
        "gauges": turn.gauges.as_dict(),
        "seed": turn.seed,
        "timings": dataclasses.asdict(turn.timings),
    }


def save_game(session: Session, path: str | Path) -> Path:
    """Write `session` (with its clips) to one zip file at `path`.

    The zip is written beside `path` and renamed into place, so a failure (a full disk) leaves
    neither a partial file nor a changed `path`; the error propagates as it was raised.
    """
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
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(GAME_MEMBER, json.dumps(payload, indent=1, ensure_ascii=False))
            archive.writestr(REPRESENTATIONS_MEMBER, save_safetensors(tensors))
            for turn in session.turns:
                if turn.clip_path and Path(turn.clip_path).is_file():
                    archive.write(turn.clip_path, clip_member(turn.index), zipfile.ZIP_STORED)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
