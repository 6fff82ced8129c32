"""Game rules and session data: pure Python, no models.

A session is an immutable value. Every action (play, undo, restart) returns a new session, so a
failed turn can never leave a half-updated game behind, and nothing is shared between players.
"""

from __future__ import annotations

import dataclasses
import re
import secrets
import unicodedata
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

GAUGE_START = 50
GAUGE_MIN = 0
GAUGE_MAX = 100
GAUGE_STEP = 5
IDLE_DECAY = 5
STATE_DELTA_RANGE = (-5, 5)
MOTION_LEVELS = (1, 2, 3, 4, 5)
DEFAULT_MOTION_LEVEL = 3
MAX_FIELD_CHARS = 80
MAX_WINDOW = 5
MAX_STEPS = 200
MAX_SEED = 2**63 - 1
"""Seeds are 0..2**63-1: what a torch generator takes and a save file stores."""
RANDOM_SEED_WORDS = frozenset({"", "random"})
_SEED_TEXT = re.compile(r"^\d{1,19}$")
MAX_GAME_TURNS = 1000
"""The most turns one game keeps (its whole history is saved and shown). At about 0.5-1 MB per
real clip a saved game of this length stays under the save file's 1 GiB limit, and at the
paper's 24 s a turn it is almost seven hours of play."""
MAX_INSTRUCTION_CHARS = 600
"""The longest instruction text read: five fields of `MAX_FIELD_CHARS` and the labels fit with
room to spare; anything longer is refused before it is parsed."""

_WHITESPACE = re.compile(r"\s+")
TAG_CHARACTERS = (0xE0000, 0xE007F)
"""The Unicode tag block (first, last code point): removed from every instruction text."""


class InstructionError(ValueError):
    """An instruction a player typed that cannot be played; the message is shown to them."""


class SeedError(InstructionError):
    """A seed that is not a whole number in 0..MAX_SEED."""


@dataclass(frozen=True)
class GameStates:
    """What the game-state model predicts for a turn.

    `ml` is the motion level as predicted (1..5 when the model behaves; any strength token
    -5..5 is kept as read, and 0 stands for output that could not be parsed); `sc`, `et` and
    `st` are the social, entertainment and stamina deltas in -5..5. `unreadable`: the model's
    state tokens could not be read, so all four are zeros (the turn's message says so); not
    part of a saved game, and not compared.
    """

    ml: int = 0
    sc: int = 0
    et: int = 0
    st: int = 0
    unreadable: bool = field(default=False, compare=False)


UNREADABLE_STATES = (
    "The game-state model's state tokens could not be read: this turn's states count as zero."
)


def turn_note(turn: Turn) -> str:
    """What a turn's message adds to "Turn N played": a warning, or nothing."""
    return UNREADABLE_STATES if turn.states.unreadable else ""


@dataclass(frozen=True)
class Instruction:
    """One player instruction, already validated and normalised (see `make_instruction`)."""

    character: str
    adverb: str
    motion: str
    time: str
    place: str

    @property
    def text(self) -> str:
        """The sentence the game-state model was trained on."""
        return (
            f"Character: {self.character}; Motion: {self.adverb} {self.motion}; "
            f"Background: {self.time} {self.place}."
        )

    def fields(self) -> dict[str, str]:
        return dataclasses.asdict(self)


INSTRUCTION_FIELDS = tuple(field.name for field in dataclasses.fields(Instruction))
"""The instruction's fields, in the order of its text: the one list of them (the API, the
annotator's answers, the parser and the chips read it)."""
ACTION_FIELDS = tuple(name for name in INSTRUCTION_FIELDS if name != "character")
"""The fields besides the character: what it does, how, when and where (a world's vocabulary,
a registry entry's defaults after its name, the chips)."""
FIELD_LABELS = {name: name.capitalize() for name in INSTRUCTION_FIELDS}
"""How an error message names each field."""


@dataclass(frozen=True)
class Gauges:
    stamina: int = GAUGE_START
    social: int = GAUGE_START
    entertainment: int = GAUGE_START

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Timings:
    """Seconds spent in each stage of a turn."""

    predict_s: float = 0.0
    decode_s: float = 0.0
    total_s: float = 0.0

    @classmethod
    def between(cls, started: float, predicted: float, finished: float) -> Timings:
        """From three clock readings: the turn's start, the end of prediction, its end."""
        return cls(
            predict_s=predicted - started, decode_s=finished - predicted, total_s=finished - started
        )


@dataclass(frozen=True)
class Turn:
    """The record of one played turn; it outlives the turn's representation."""

    index: int
    instruction: Instruction
    states: GameStates
    motion_level: int
    motion_scope: float
    gauges: Gauges
    seed: int
    clip_path: str
    timings: Timings = field(default_factory=Timings)


@dataclass(frozen=True, eq=False)
class Session:
    """One player's game.

    `representations` holds the predicted representations (CPU tensors [226, D]) of the last
    `window` turns only, aligned with the end of `turns`: the prompt needs the last `window - 1`,
    and one more lets `undo` restore the window exactly.
    """

    character: str
    window: int = 1
    turns: tuple[Turn, ...] = ()
    representations: tuple[torch.Tensor, ...] = ()
    session_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def gauges(self) -> Gauges:
        return self.turns[-1].gauges if self.turns else Gauges()

    @property
    def history_representations(self) -> tuple[torch.Tensor, ...]:
        """The representations the next prompt carries: those of the last `window - 1` turns."""
        keep = min(self.window - 1, len(self.representations))
        return self.representations[len(self.representations) - keep :] if keep else ()

    @property
    def history_turns(self) -> tuple[Turn, ...]:
        """The turns matching `history_representations`, oldest first."""
        count = len(self.history_representations)
        return self.turns[len(self.turns) - count :] if count else ()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Session):
            return NotImplemented
        return (
            (self.character, self.window, self.turns)
            == (other.character, other.window, other.turns)
            and len(self.representations) == len(other.representations)
            and all(
                torch.equal(a, b)
                for a, b in zip(self.representations, other.representations, strict=True)
            )
        )

    __hash__ = None  # type: ignore[assignment]


def new_session(character: str, window: int = 1) -> Session:
    if not 1 <= window <= MAX_WINDOW:
        raise ValueError(f"window must be in 1..{MAX_WINDOW}, got {window}")
    return Session(character=character, window=window)


def clamp_gauge(value: int) -> int:
    return max(GAUGE_MIN, min(GAUGE_MAX, value))


def _gauge_after(value: int, delta: int, idle_decay: int) -> int:
    """A delta of 0 means nothing happened to that need, which decays by `idle_decay`."""
    change = GAUGE_STEP * delta if delta else -idle_decay
    return clamp_gauge(value + change)


def apply_states(gauges: Gauges, states: GameStates) -> Gauges:
    """Gauges after a turn: `clamp(g + 5·Δ)`; social and entertainment decay by 5 when Δ = 0.

    Stamina has no idle decay: a turn that neither tires nor rests the character leaves it as is.
    """
    return Gauges(
        stamina=clamp_gauge(gauges.stamina + GAUGE_STEP * states.st),
        social=_gauge_after(gauges.social, states.sc, IDLE_DECAY),
        entertainment=_gauge_after(gauges.entertainment, states.et, IDLE_DECAY),
    )


def effective_motion_level(ml: int) -> int:
    """The level whose motion scope the decoder uses (its table is in the decoder's config):
    an unparsable prediction (0) plays as level 3."""
    return ml if ml in MOTION_LEVELS else DEFAULT_MOTION_LEVEL


def clean_text(text: str) -> str:
    """`text` as the game reads it: invisible characters removed, then NFKC-normalised.

    Removed: every format character (Unicode category Cf: the bidi controls U+202A-U+202E,
    U+2066-U+2069, U+200E/U+200F and U+061C, the zero-width U+200B-U+200D, U+2060 and U+FEFF)
    and the whole tag block U+E0000-U+E007F. They would otherwise reach the prompt and the
    history unseen, or reorder what the story shows. NFKC folds compatibility forms (fullwidth
    `Ｑｉｑｉ` is `Qiqi`); look-alike letters of other scripts stay what they are.
    """
    visible = "".join(char for char in text if not _is_invisible(char))
    return unicodedata.normalize("NFKC", visible)


def _is_invisible(char: str) -> bool:
    first, last = TAG_CHARACTERS
    return unicodedata.category(char) == "Cf" or first <= ord(char) <= last


def normalise_field(text: str) -> str:
    """Collapse whitespace and drop angle brackets (they would let a player type control tokens)."""
    return _WHITESPACE.sub(" ", text.replace("<", "").replace(">", "")).strip()


def _check_printable(name: str, text: str) -> None:
    for char in text:
        if char.isspace():
            continue
        category = unicodedata.category(char)
        if category in {"Cc", "Cs", "Co", "Cn"}:
            raise InstructionError(
                f"{FIELD_LABELS[name]} contains a control or unassigned character "
                f"(U+{ord(char):04X}); please use plain text."
            )


def make_instruction(fields: Mapping[str, str | None]) -> Instruction:
    """Validate and normalise the five instruction fields, or raise `InstructionError`.

    Every instruction passes here (typed, sent through the API, saved, in the registry), so each
    field is cleaned (`clean_text`) here; the parser cleans a whole text once more before it splits
    it, so that fullwidth labels and separators read as theirs (cleaning is idempotent)."""
    values: dict[str, str] = {}
    for name in INSTRUCTION_FIELDS:
        raw = fields.get(name)
        if raw is None:
            raw = ""
        if not isinstance(raw, str):
            raise InstructionError(f"{FIELD_LABELS[name]} must be text.")
        if len(raw) > 4 * MAX_FIELD_CHARS:
            raise InstructionError(
                f"{FIELD_LABELS[name]} is too long ({len(raw)} characters; "
                f"at most {MAX_FIELD_CHARS})."
            )
        cleaned = clean_text(raw)
        _check_printable(name, cleaned)
        value = normalise_field(cleaned)
        if not value and normalise_field(raw):
            raise InstructionError(
                f"{FIELD_LABELS[name]} has only invisible characters (zero-width, direction or "
                "tag characters); please type it in words."
            )
        if not value:
            raise InstructionError(f"{FIELD_LABELS[name]} is empty; every field is needed.")
        if len(value) > MAX_FIELD_CHARS:
            raise InstructionError(
                f"{FIELD_LABELS[name]} is too long ({len(value)} characters; "
                f"at most {MAX_FIELD_CHARS})."
            )
        values[name] = value
    return Instruction(**values)


def check_room_for_turn(session: Session) -> None:
    """Refuse a turn beyond `MAX_GAME_TURNS` (before any model runs)."""
    if len(session.turns) >= MAX_GAME_TURNS:
        raise InstructionError(
            f"This game has reached {MAX_GAME_TURNS} turns, the most one game keeps. Save it "
            "and download the playthrough, then start a new game."
        )


def new_seed() -> int:
    """A fresh random seed (31 bits: short enough to read out and type back)."""
    return secrets.randbits(31)


def check_seed(seed: object) -> int:
    """`seed` when it is an int in 0..MAX_SEED (what the engine takes from any caller)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise SeedError(f"The seed must be a whole number from 0 to {MAX_SEED}, got {seed!r}.")
    return seed


def parse_seed(text: str | float | None) -> int | None:
    """A seed typed by a player: `None` (a fresh random one) for "random" or nothing, else the
    number, or `SeedError`."""
    raw = "" if text is None else str(text)
    if len(raw) > 32:
        raise SeedError(f"The seed must be a whole number from 0 to {MAX_SEED}, or 'random'.")
    raw = raw.strip().lower()
    if raw in RANDOM_SEED_WORDS:
        return None
    if not _SEED_TEXT.match(raw) or int(raw) > MAX_SEED:
        raise SeedError(f"The seed must be a whole number from 0 to {MAX_SEED}, or 'random'.")
    return int(raw)


def record_turn(
    session: Session,
    *,
    instruction: Instruction,
    states: GameStates,
    motion_scope_value: float,
    representation: torch.Tensor,
    seed: int,
    clip_path: str,
    timings: Timings,
) -> Session:
    """The session after a played turn; keeps only the last `window` representations."""
    check_room_for_turn(session)
    turn = Turn(
        index=len(session.turns) + 1,
        instruction=instruction,
        states=states,
        motion_level=effective_motion_level(states.ml),
        motion_scope=motion_scope_value,
        gauges=apply_states(session.gauges, states),
        seed=seed,
        clip_path=clip_path,
        timings=timings,
    )
    kept = (*session.representations, representation.detach().to("cpu"))[-session.window :]
    return dataclasses.replace(session, turns=(*session.turns, turn), representations=kept)


def undo(session: Session) -> Session:
    """Back one turn. The window is exact after one undo; further undos replay with less history
    until new turns refill it, because older representations are not kept."""
    if not session.turns:
        raise InstructionError("There is no turn to undo.")
    return dataclasses.replace(
        session, turns=session.turns[:-1], representations=session.representations[:-1]
    )


def restart(session: Session) -> Session:
    """A fresh game for the same character and window, with fresh gauges and a new id."""
    return new_session(session.character, session.window)
