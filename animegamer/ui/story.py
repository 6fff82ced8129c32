"""The story's words: a sentence per turn, the motion level in words, nudges, the turn's ETA.

Pure functions of game data returning plain text; the views escape it where it meets HTML.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from animegamer.game.rules import GameStates, Gauges, Instruction
from animegamer.serving.batching import QueuePlace

MOTION_WORDS = {1: "still", 2: "calm", 3: "lively", 4: "energetic", 5: "wild"}
LOW_GAUGE = 20
HIGH_GAUGE = 90
ETA_TURNS = 5
"""The ETA is the median duration of this many recent turns."""
NUDGES_LOW = {
    "stamina": "{name} needs rest: try sitting or lying down.",
    "social": "{name} feels lonely: try talking or waving to someone.",
    "entertainment": "{name} is bored: try something fun.",
}
NUDGES_HIGH = {
    "stamina": "{name} is full of energy.",
    "social": "{name} is in great company.",
    "entertainment": "{name} is having a great time.",
}
_ES_ENDINGS = ("s", "x", "z", "ch", "sh", "o")
_IRREGULAR = {"be": "is", "have": "has"}


def third_person(verb: str) -> str:
    """`fly` → `flies`, `watch` → `watches`, `run` → `runs`: the form after a name."""
    lowered = verb.lower()
    if lowered in _IRREGULAR:
        return _IRREGULAR[lowered]
    if len(verb) > 1 and lowered.endswith("y") and lowered[-2] not in "aeiou":
        return verb[:-1] + "ies"
    if lowered.endswith(_ES_ENDINGS):
        return verb + "es"
    return verb + "s"


def motion_words(level: int) -> str:
    """`lively (3/5)`: the motion level as a word and as a number."""
    return f"{MOTION_WORDS.get(level, 'lively')} ({level}/5)"


def mood(states: GameStates) -> str | None:
    """What the turn did to the character, from the predicted states; None for a neutral turn."""
    if states.st < 0:
        return "getting tired"
    if states.et > 0:
        return "having fun"
    if states.sc > 0:
        return "enjoying the company"
    if states.st > 0:
        return "resting"
    return None


def turn_sentence(name: str, instruction: Instruction, states: GameStates) -> str:
    """`Qiqi quickly flies on broomstick (day, sky) — getting tired.`"""
    verb, _, rest = instruction.motion.partition(" ")
    action = " ".join(w for w in (instruction.adverb, third_person(verb), rest) if w)
    sentence = f"{name} {action} ({instruction.time}, {instruction.place})"
    feeling = mood(states)
    return f"{sentence} — {feeling}." if feeling else f"{sentence}."


def nudges(name: str, gauges: Gauges) -> list[str]:
    """A hint for each gauge at or below `LOW_GAUGE`, a cheer at or above `HIGH_GAUGE`."""
    found = []
    for gauge, value in gauges.as_dict().items():
        if value <= LOW_GAUGE:
            found.append(NUDGES_LOW[gauge].format(name=name))
        elif value >= HIGH_GAUGE:
            found.append(NUDGES_HIGH[gauge].format(name=name))
    return found


def eta_seconds(durations: Sequence[float]) -> float | None:
    """The expected length of the next turn: the median of the last `ETA_TURNS` turns."""
    recent = [d for d in durations[-ETA_TURNS:] if d > 0]
    return statistics.median(recent) if recent else None


STAGES = (
    ("Predicting", "Imagining the next moment…"),
    ("Denoising step", "Drawing the clip, step {rest}"),
    ("Decoding", "Developing the frames…"),
    ("Writing", "Saving the clip…"),
)
"""The engine's progress descriptions (by prefix) in the game's words; `{rest}` is what follows
the prefix (`3/8`)."""


def stage_text(description: str | None) -> str:
    """The engine's progress description in the game's words (unknown ones as they are)."""
    description = description or ""
    for prefix, words in STAGES:
        if description.startswith(prefix):
            return words.format(rest=description[len(prefix):].strip())
    return description


QUEUE_PREFIX = "Waiting for"


def queue_text(place: QueuePlace) -> str:
    """Where a waiting turn stands, in the game's words: `Waiting for 3 turns ahead of yours ·
    about 12 s`, the estimate from the batches timed so far."""
    turns = f"{place.ahead} turn{'' if place.ahead == 1 else 's'}"
    eta = "" if place.eta_s is None else f" · about {place.eta_s:.0f} s"
    return f"{QUEUE_PREFIX} {turns} ahead of yours{eta}"


def progress_text(description: str | None, fraction: float, eta_s: float | None) -> str:
    """The stage, and how long is left when a recent turn gives an estimate (a place in the
    queue says its own)."""
    stage = stage_text(description)
    if eta_s is None or stage.startswith(QUEUE_PREFIX):
        return stage
    left = max(0.0, eta_s * (1.0 - fraction))
    return f"{stage} · about {left:.0f} s left"
