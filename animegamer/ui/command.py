"""The command line: what a player types, read into an instruction.

A command is `[adverb] motion[, [time] [place]]`, e.g. `quickly fly on broomstick, day sky`, or
the model's own form `Character: Qiqi; Motion: quickly fly; Background: day sky.` Whatever is
left out comes from the game: a motion without an adverb gets the character's default adverb,
and a missing time or place stays where the last turn was (the character's default before the
first turn). `format_command` writes an instruction back in the short form, so the player sees
exactly what was played.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from animegamer.game import (
    MAX_INSTRUCTION_CHARS,
    Instruction,
    InstructionError,
    make_instruction,
    normalise_field,
)

BACKGROUND_SEPARATORS = (",", "·", ";")
TIME_WORDS = frozenset({
    "day", "night", "morning", "noon", "afternoon", "evening", "dusk", "dawn", "sunrise",
    "sunset", "midnight", "twilight", "daytime", "nighttime",
})
"""Words read as the time at the start of a background, besides the vocabulary's times."""
LABELS = ("character", "motion", "background")


class CommandError(InstructionError):
    """A command that cannot be read; the message says what to type."""


@dataclass(frozen=True)
class CommandContext:
    """What fills the gaps of a command: the game's character and where it stands.

    `fallback` is the instruction whose adverb, time and place a command may leave out;
    `adverbs` and `times` are the words recognised as such at the start of a part (besides
    words ending in -ly, and `TIME_WORDS`); a background that does not start with a time is all
    place.
    """

    fallback: Instruction
    adverbs: Sequence[str] = ()
    times: Sequence[str] = ()

    def is_adverb(self, word: str) -> bool:
        lowered = word.lower()
        return lowered in {a.lower() for a in self.adverbs} or (
            lowered.endswith("ly") and len(lowered) > 3
        )

    def is_time(self, word: str) -> bool:
        known = {t.lower() for t in (*self.times, self.fallback.time)} | TIME_WORDS
        return word.lower() in known


def format_command(instruction: Instruction) -> str:
    """`quickly fly on broomstick, day sky`: the short form of `instruction`."""
    return (
        f"{instruction.adverb} {instruction.motion}, {instruction.time} {instruction.place}"
    )


def _split_first(text: str, separators: Sequence[str]) -> tuple[str, str | None]:
    """`text` cut at the first of `separators`, or whole (None) when it has none."""
    positions = [text.find(s) for s in separators if s in text]
    if not positions:
        return text, None
    cut = min(positions)
    return text[:cut], text[cut + 1 :]


def _labelled(text: str) -> dict[str, str] | None:
    """The parts of `Character: …; Motion: …; Background: ….`, or None for a short command."""
    if "motion:" not in text.lower():
        return None
    parts: dict[str, str] = {}
    body = text.strip().removesuffix(".")
    for piece in body.split(";"):
        name, colon, value = piece.partition(":")
        label = name.strip().lower()
        if not colon or label not in LABELS or label in parts:
            raise CommandError(
                "Could not read the instruction. Type e.g. 'quickly fly on broomstick, day sky' "
                "or 'Character: Qiqi; Motion: quickly fly on broomstick; Background: day sky.'"
            )
        parts[label] = value
    return parts


def _motion_parts(text: str, context: CommandContext) -> tuple[str, str]:
    words = normalise_field(text).split(" ")
    if len(words) > 1 and context.is_adverb(words[0]):
        return words[0], " ".join(words[1:])
    return context.fallback.adverb, " ".join(words)


def _background_parts(text: str | None, context: CommandContext) -> tuple[str, str]:
    fallback = context.fallback
    words = normalise_field(text or "").split(" ") if text and text.strip() else []
    if not words:
        return fallback.time, fallback.place
    if context.is_time(words[0]):
        return words[0], " ".join(words[1:]) or fallback.place
    return fallback.time, " ".join(words)


def read_command(text: str | None, context: CommandContext) -> Instruction:
    """The instruction a command asks for, or `InstructionError` saying what is wrong."""
    text = text or ""
    if len(text) > MAX_INSTRUCTION_CHARS:
        raise CommandError(
            f"The instruction is too long ({len(text)} characters; at most "
            f"{MAX_INSTRUCTION_CHARS})."
        )
    if not text.strip():
        raise CommandError(
            "Type what your character should do (e.g. 'quickly fly on broomstick, day sky'), "
            "or tap the suggestions under the line."
        )
    labelled = _labelled(text)
    if labelled is None:
        motion_text, background_text = _split_first(text, BACKGROUND_SEPARATORS)
        character = context.fallback.character
    else:
        motion_text, background_text = labelled.get("motion", ""), labelled.get("background")
        character = labelled.get("character", "") or context.fallback.character
    if not normalise_field(motion_text):
        raise CommandError("Motion is empty: say what your character should do, e.g. 'run'.")
    adverb, motion = _motion_parts(motion_text, context)
    time, place = _background_parts(background_text, context)
    fields: Mapping[str, str] = {
        "character": character, "adverb": adverb, "motion": motion, "time": time, "place": place,
    }
    return make_instruction(fields)


def with_word(text: str | None, field: str, word: str, context: CommandContext) -> str:
    """The command with one part (`adverb`, `motion`, `time` or `place`) replaced by `word`:
    what a suggestion chip does. A command that cannot be read starts over from the fallback."""
    try:
        current = read_command(text, context) if text and text.strip() else context.fallback
    except InstructionError:
        current = context.fallback
    values = current.fields()
    values[field] = word
    return format_command(make_instruction(values))
