"""Reading a saved game back (the zip `animegamer.game.savefile` writes).

Loading treats the file as hostile: nothing in it is executed (no pickle), every member name and
size is checked, game.json must match the strict pydantic schema `GameJson` (no unknown fields,
no coercion, every number bounded), the gauges are recomputed from the states so a file
cannot claim a game that was never played, and every clip is checked to be an H.264 mp4 of the
game's frame count and size (`animegamer.video.mp4check`) before it is unpacked. A refusal is one
short `SaveFileError` message that quotes at most `MAX_SHOWN_CHARS` of any value from the file,
and leaves nothing behind in the clip folder.

Work limits, checked before the work they bound:

- at most `MAX_GAME_TURNS` (1000) turns, so at most 2 + 1000 zip entries (game.json,
  representations, one clip per turn). The entry count and the size of the zip's central
  directory are read from its end record before `zipfile.ZipFile` parses the directory (which it
  does whole: 3 million tiny entries took 27 s and 1.5 GB), and the turn list's length is checked
  before any turn is parsed;
- the file at most 1 GiB, an entry 64 MiB, a compression ratio of 200, and game.json 4 MiB,
  which bounds its parsing to well under a second (a game of 1000 turns with the longest
  instructions is 1.8 MB).
"""

from __future__ import annotations

import errno
import gc
import json
import struct
import zipfile
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from pydantic import ValidationError
from safetensors.torch import load as load_safetensors

from animegamer.game.representation import REPRESENTATION_TOKENS
from animegamer.game.rules import (
    MAX_GAME_TURNS,
    GameStates,
    Gauges,
    Instruction,
    InstructionError,
    Session,
    Timings,
    Turn,
    apply_states,
    effective_motion_level,
    make_instruction,
)
from animegamer.game.savefile import (
    CLIP_MEMBER,
    GAME_MEMBER,
    REPRESENTATIONS_MEMBER,
    SAVE_FORMAT,
    SAVE_VERSION,
    GameJson,
    TurnJson,
    clip_member,
)
from animegamer.video.mp4check import ClipFacts, check_mp4

MAX_FILE_BYTES = 1 << 30
MAX_MEMBER_BYTES = 64 << 20
MAX_JSON_BYTES = 4 << 20
MAX_COMPRESSION_RATIO = 200
MAX_MEMBERS = 2 + MAX_GAME_TURNS
MAX_DIRECTORY_ENTRY_BYTES = 46 + 256
"""A central-directory entry: 46 fixed bytes, then name, extra field and comment (ours: < 40)."""
MAX_SAFETENSORS_HEADER = 64 << 10
"""The JSON header of `MAX_WINDOW` representations is a few hundred bytes."""
MAX_SHOWN_CHARS = 60
MAX_SHOWN_ITEMS = 3
ALLOWED_COMPRESSION = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED}
DISK_FULL = "The server's disk is full, so the saved game could not be unpacked; try again later."
_END_RECORD = b"PK\x05\x06"
_END_RECORD_BYTES = 22
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_LOCATOR_BYTES = 20
_MAX_ZIP_COMMENT = 0xFFFF


class SaveFileError(ValueError):
    """A saved game that cannot be loaded; the message says what is wrong with it."""


TurnCheck = Callable[[str, Instruction], object]
"""Holds a turn's instruction to the game of the character named first, as a typed command is
held (the game's character, words that character can play); raises `InstructionError`."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise SaveFileError(message)


def _short(value: Any, depth: int = 0) -> str:
    """`value` as Python writes it, cut to about `MAX_SHOWN_CHARS`: a message never echoes a
    long value whole (a 15 MB name), and a container shows its first few items only, one level
    deep (a full repr is slow, and a deep one recurses)."""
    if isinstance(value, dict | list | tuple):
        text = _short_container(value, depth)
    elif isinstance(value, int) and value.bit_length() > 3 * MAX_SHOWN_CHARS:
        return "a very long integer"
    else:
        text = repr(value[: MAX_SHOWN_CHARS + 1] if isinstance(value, str | bytes) else value)
    return text if len(text) <= MAX_SHOWN_CHARS else text[: MAX_SHOWN_CHARS - 3] + "..."


def _short_container(value: dict[Any, Any] | list[Any] | tuple[Any, ...], depth: int) -> str:
    """`[1, 'a', ...]` or `{'key': ...}`: at most `MAX_SHOWN_ITEMS` items, nested ones elided."""
    opening, closing = ("{", "}") if isinstance(value, dict) else ("[", "]")
    if depth > 0:
        return f"{opening}...{closing}" if value else f"{opening}{closing}"
    items = list(value.items() if isinstance(value, dict) else value)[:MAX_SHOWN_ITEMS]
    shown = [
        f"{_short(key, 1)}: {_short(item, 1)}" if isinstance(value, dict) else _short(item, 1)
        for key, item in (items if isinstance(value, dict) else enumerate(items))
    ]
    more = ", ..." if len(value) > MAX_SHOWN_ITEMS else ""
    return f"{opening}{', '.join(shown)}{more}{closing}"


def _reason(error: BaseException) -> str:
    """The first line of an error's message, shortened, for 'could not be read (…)'."""
    if isinstance(error, OSError) and error.strerror:  # str() would name the server's path
        return error.strerror
    lines = str(error).strip().splitlines()
    text = lines[0] if lines else type(error).__name__
    return text if len(text) <= MAX_SHOWN_CHARS else text[: MAX_SHOWN_CHARS - 3] + "..."


def _end_record_at(tail: bytes) -> int:
    """Where the end-of-central-directory record starts in the file's `tail`, found the way
    `zipfile` finds it (the last 22 bytes, else the last signature), or -1."""
    last = len(tail) - _END_RECORD_BYTES
    if last >= 0 and tail[last : last + 4] == _END_RECORD and tail[-2:] == b"\x00\x00":
        return last
    at = tail.rfind(_END_RECORD)
    return at if 0 <= at <= last else -1


def _check_directory(path: Path) -> None:
    """Refuse, from the zip's end record alone, an archive whose central directory would be too
    costly to read: too many entries, or a directory too large for its entry count."""
    size = path.stat().st_size
    with path.open("rb") as stream:
        stream.seek(max(0, size - _END_RECORD_BYTES - _MAX_ZIP_COMMENT))
        tail = stream.read()
    at = _end_record_at(tail)
    _require(at >= 0, f"{path.name} is not a saved game (not a zip file).")
    disk, directory_disk, here, entries, directory_bytes = struct.unpack(
        "<4H I", tail[at + 4 : at + 16]
    )
    locator = tail[max(0, at - _ZIP64_LOCATOR_BYTES) : at]
    _require(
        not locator.startswith(_ZIP64_LOCATOR) and disk == directory_disk == 0 and here == entries,
        "the saved game is a ZIP64 or multi-disk archive, which a saved game never is.",
    )
    _require(
        entries <= MAX_MEMBERS,
        f"the saved game has {entries} entries; at most {MAX_MEMBERS} ({MAX_GAME_TURNS} turns, "
        "one clip each).",
    )
    _require(
        directory_bytes <= max(entries, 1) * MAX_DIRECTORY_ENTRY_BYTES,
        "the saved game's zip directory is implausibly large.",
    )


def _open_zip(path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise SaveFileError(f"{path.name} is not a saved game (not a zip file).") from None


def _check_members(archive: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    members: dict[str, zipfile.ZipInfo] = {}
    total = 0
    infos = archive.infolist()
    _require(len(infos) <= MAX_MEMBERS, f"the saved game has more than {MAX_MEMBERS} entries.")
    for info in infos:
        name = info.filename
        allowed = name in {GAME_MEMBER, REPRESENTATIONS_MEMBER} or CLIP_MEMBER.match(name)
        _require(bool(allowed), f"unexpected entry {_short(name)} in the saved game.")
        _require(name not in members, f"entry {_short(name)} appears twice.")
        _require(
            info.compress_type in ALLOWED_COMPRESSION and not info.flag_bits & 1,
            f"entry {_short(name)} is encrypted or uses an unsupported compression.",
        )
        _require(info.file_size <= MAX_MEMBER_BYTES, f"entry {_short(name)} is too large.")
        ratio = info.file_size / max(info.compress_size, 1)
        _require(
            ratio <= MAX_COMPRESSION_RATIO, f"entry {_short(name)} is suspiciously compressed."
        )
        total += info.file_size
        members[name] = info
    _require(total <= MAX_FILE_BYTES, "the saved game is too large once unpacked.")
    for name in (GAME_MEMBER, REPRESENTATIONS_MEMBER):
        _require(name in members, f"the saved game has no {name}.")
    return members


def _json_constant(name: str) -> float:
    raise SaveFileError(f"{GAME_MEMBER} holds {name}, which is not a number.")


def _parse_json(data: bytes) -> Any:
    """The JSON value of game.json. A number too large for a float reads as inf and is refused
    by the field that holds it; one of over 4300 digits is refused here."""
    gc_was_enabled = gc.isenabled()
    gc.disable()  # parsing creates only acyclic objects, and GC passes made it up to 10x slower
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_json_constant)
    except UnicodeDecodeError:
        raise SaveFileError(f"{GAME_MEMBER} is not UTF-8 text.") from None
    except json.JSONDecodeError as error:
        raise SaveFileError(f"{GAME_MEMBER} is not valid JSON ({error}).") from None
    except RecursionError:
        raise SaveFileError(f"{GAME_MEMBER} is nested too deeply.") from None
    except SaveFileError:
        raise
    except ValueError:  # int(): "Exceeds the limit (4300 digits) for integer string conversion"
        raise SaveFileError(f"{GAME_MEMBER} holds a number of thousands of digits.") from None
    finally:
        if gc_was_enabled:
            gc.enable()


def _where(location: tuple[int | str, ...]) -> str:
    """'turn 3 states.sc' for ('turns', 2, 'states', 'sc'); names from the file are cut short."""
    parts = [str(part)[:MAX_SHOWN_CHARS] for part in location]
    if len(location) >= 2 and location[0] == "turns" and isinstance(location[1], int):
        return " ".join([f"turn {location[1] + 1}", ".".join(parts[2:])]).strip()
    return ".".join(parts) or GAME_MEMBER


def _schema_message(error: ValidationError) -> str:
    """One short message for the first problem pydantic found, naming the field."""
    first = error.errors(include_url=False)[0]
    where = _where(first["loc"])
    if first["type"] == "extra_forbidden":
        return f"{GAME_MEMBER}: {where} is not a known field."
    if first["type"] == "missing":
        return f"{GAME_MEMBER}: {where} is missing."
    problem = first["msg"][:1].lower() + first["msg"][1:]
    if first["type"] in {"too_long", "too_short"}:  # the message says how long it is
        return f"{GAME_MEMBER}: {where}: {problem}."
    return f"{GAME_MEMBER}: {where}: {problem}, got {_short(first['input'])}."


def _validate_game(payload: Any) -> GameJson:
    _require(isinstance(payload, dict), f"{GAME_MEMBER} must be an object.")
    _require(payload.get("format") == SAVE_FORMAT, "this is not an AnimeGamer saved game.")
    _require(
        payload.get("version") == SAVE_VERSION,
        f"saved-game version {_short(payload.get('version'))} is not supported "
        f"(this app reads version {SAVE_VERSION}).",
    )
    try:
        return GameJson.model_validate(payload)
    except ValidationError as error:
        raise SaveFileError(_schema_message(error)) from None


def _make_turn(
    raw: TurnJson, position: int, previous: Gauges, clip_dir: Path, game: tuple[str, TurnCheck]
) -> Turn:
    """The turn, once what the schema cannot see holds: its number, an instruction a player
    could have typed in this game (`game`: its character and the check of a typed command), and
    a motion level and gauges that follow from its states."""
    what = f"turn {position}"
    _require(raw.index == position, f"{what} is numbered {raw.index}.")
    character, check_turn = game
    try:
        instruction = make_instruction(raw.instruction.model_dump())
    except InstructionError as error:
        raise SaveFileError(f"{what} instruction: {error}") from None
    try:
        check_turn(character, instruction)
    except InstructionError as error:
        raise SaveFileError(f"{what} cannot be played in a game of {character}: {error}") from None
    states = GameStates(**raw.states.model_dump())
    _require(
        raw.motion_level == effective_motion_level(states.ml),
        f"{what} motion_level does not match its states.",
    )
    gauges = Gauges(**raw.gauges.model_dump())
    _require(
        gauges == apply_states(previous, states),
        f"{what} gauges do not follow from the previous turn and its states.",
    )
    return Turn(
        index=position,
        instruction=instruction,
        states=states,
        motion_level=raw.motion_level,
        motion_scope=raw.motion_scope,
        gauges=gauges,
        seed=raw.seed,
        clip_path=str(clip_dir / f"turn_{position:04d}.mp4"),
        timings=Timings(**raw.timings.model_dump()),
    )


def _make_turns(
    raw_turns: list[TurnJson], clip_dir: Path, game: tuple[str, TurnCheck]
) -> tuple[Turn, ...]:
    turns: list[Turn] = []
    gauges = Gauges()
    for position, raw in enumerate(raw_turns, start=1):
        turn = _make_turn(raw, position, gauges, clip_dir, game)
        turns.append(turn)
        gauges = turn.gauges
    return tuple(turns)


def _read_representations(data: bytes, window: int, turn_count: int) -> tuple[torch.Tensor, ...]:
    """The representations of the last turns: any count up to `min(window, turn_count)`, since
    an undo drops one without bringing back an older one."""
    _require(
        len(data) >= 8 and int.from_bytes(data[:8], "little") <= MAX_SAFETENSORS_HEADER,
        f"{REPRESENTATIONS_MEMBER} is corrupt (its header is missing or too large).",
    )
    try:
        tensors = load_safetensors(data)
    except Exception as error:  # safetensors raises several types for corrupt input
        raise SaveFileError(f"{REPRESENTATIONS_MEMBER} is corrupt ({_reason(error)}).") from None
    count, most = len(tensors), min(window, turn_count)
    _require(
        count <= most,
        f"{REPRESENTATIONS_MEMBER} holds {count} representations; a game of {turn_count} turns "
        f"with window {window} keeps at most {most}.",
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


def _check_clip_members(members: dict[str, zipfile.ZipInfo], turns: Sequence[Turn]) -> None:
    clip_names = {clip_member(turn.index) for turn in turns}
    stray = sorted(n for n in members if CLIP_MEMBER.match(n) and n not in clip_names)
    _require(not stray, f"clips without a turn: {', '.join(stray[:MAX_SHOWN_ITEMS])}.")
    missing = sorted(clip_names - set(members))
    _require(not missing, f"missing clips: {', '.join(missing[:MAX_SHOWN_ITEMS])}.")


def _check_clip(data: bytes, turn: Turn, first: ClipFacts | None) -> ClipFacts:
    """The clip's facts, if it is an H.264 mp4 like the game's first clip (the same models
    made every clip of a game, so all have the same frame count and size)."""
    try:
        facts = check_mp4(data)
    except ValueError as error:
        raise SaveFileError(
            f"the clip of turn {turn.index} is not a valid clip ({error})."
        ) from None
    if first is not None:
        _require(
            (facts.frames, facts.size) == (first.frames, first.size),
            f"the clip of turn {turn.index} has {facts.frames} frames of "
            f"{facts.width}x{facts.height}; the first has {first.frames} of "
            f"{first.width}x{first.height}.",
        )
    return facts


def _unpack_clips(archive: zipfile.ZipFile, turns: Sequence[Turn], clip_dir: Path) -> None:
    """Check and write each turn's clip into `clip_dir`; on any failure remove what was written
    (and `clip_dir`, when it was made here)."""
    created = not clip_dir.exists()
    written: list[Path] = []
    try:
        clip_dir.mkdir(parents=True, exist_ok=True)
        first: ClipFacts | None = None
        for turn in turns:
            data = archive.read(clip_member(turn.index))
            facts = _check_clip(data, turn, first)
            first = first or facts
            written.append(Path(turn.clip_path))
            written[-1].write_bytes(data)
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        if created and clip_dir.is_dir() and not any(clip_dir.iterdir()):
            clip_dir.rmdir()
        raise


def _read_game(
    archive: zipfile.ZipFile,
    clip_dir: Path,
    character_names: set[str],
    representation_dim: int | None,
    check_turn: TurnCheck,
) -> Session:
    members = _check_members(archive)
    _require(members[GAME_MEMBER].file_size <= MAX_JSON_BYTES, f"{GAME_MEMBER} is too large.")
    game = _validate_game(_parse_json(archive.read(GAME_MEMBER)))
    _require(
        game.character in character_names,
        f"the saved game's character {_short(game.character)} is not playable here.",
    )
    turns = _make_turns(game.turns, clip_dir, (game.character, check_turn))
    _check_clip_members(members, turns)
    reps = _read_representations(archive.read(REPRESENTATIONS_MEMBER), game.window, len(turns))
    saved_width = reps[0].shape[-1] if reps else representation_dim
    _require(
        saved_width == representation_dim or representation_dim is None,
        f"this game was saved with other models (representations {saved_width} wide, "
        f"these models use {representation_dim}); it cannot continue here.",
    )
    _unpack_clips(archive, turns, clip_dir)
    return Session(
        character=game.character, window=game.window, turns=turns, representations=reps
    )


def _any_turn(character: str, instruction: Instruction) -> None:
    """The check of a caller that holds turns to no game (a typed instruction is still read)."""


def load_game(
    path: str | Path,
    clip_dir: str | Path,
    character_names: set[str],
    representation_dim: int | None = None,
    check_turn: TurnCheck | None = None,
) -> Session:
    """Read a saved game, validating everything, and unpack its clips into `clip_dir` (a new
    folder: a refusal removes what this call wrote there).

    `check_turn` holds every turn's instruction to the game's character (the first refused
    turn is named); without it, any instruction a player could type is accepted.

    `representation_dim`, when given, is the width the playing models use: a game saved with
    other models (the preview engine's 64 against the real 1920) could not continue.
    The loaded session gets a new `session_id`: it is a new game that continues the saved one.
    Every refusal is a `SaveFileError`; a full disk is one saying so (`DISK_FULL`).
    """
    path, clip_dir = Path(path), Path(clip_dir)
    _require(path.is_file(), f"{path.name} is not a file.")
    _require(path.stat().st_size <= MAX_FILE_BYTES, "the saved game is too large.")
    try:
        _check_directory(path)
        with _open_zip(path) as archive:
            return _read_game(
                archive, clip_dir, character_names, representation_dim,
                check_turn or _any_turn,
            )
    except zipfile.BadZipFile as error:  # a bad CRC or header, found while reading an entry
        raise SaveFileError(f"{path.name} is damaged ({_reason(error)}).") from None
    except OSError as error:
        if error.errno == errno.ENOSPC:
            raise SaveFileError(DISK_FULL) from None
        raise SaveFileError(f"{path.name} could not be read ({_reason(error)}).") from None
    except (zipfile.LargeZipFile, NotImplementedError, EOFError, RuntimeError, zlib.error) as error:
        raise SaveFileError(f"{path.name} could not be read ({_reason(error)}).") from None
