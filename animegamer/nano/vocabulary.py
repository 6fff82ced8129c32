"""The words the Nano world knows: motions, adverbs, times of day and places.

Each motion, time and place has one canonical name and the phrases an instruction may use for
it. Rows of the rendered dataset use these phrases (so the registry's and the example
playthroughs' wording is trained on), and the renderer maps a phrase to its canonical entry.

Phrase → canonical mapping (the registry's and `examples/` multi-word wording):

    fly on broomstick  ← fly
    walk               ← walk through the trees, walk along the street, walk in the street
    run                ← run along the road
    sit                ← sit on railing, sit down
    lie down           ← lie on the grass
    wave hand          ← wave to a friend
    turn head          ← look at the sea, look around
    talk               ← talk to a friend
    ride in the car    ← ride in the purple car
    sky                ← sky over the sea
    grass              ← grassy hill
    town               ← town balcony
    street             ← bakery doorway, city street
    cliff              ← cliff top
    forest road        ← mountain road

State labels (docs/design.md §10: social 0/1, entertainment 0/1, stamina ±1, never 0) are a
property of the motion: effort (fly, walk, run, jump, dance) costs stamina (−1) and everything else
rests (+1); waving and talking to someone are social (1); flight, jumping, dancing and the car ride
are play (entertainment 1).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from animegamer.command.parser import ClosedVocabulary, KnownPhrases

Posture = Literal["stand", "sit", "lie", "fly", "ride"]
Animation = Literal[
    "walk", "run", "jump", "sway", "breathe", "wave", "broom", "turn", "talk", "dance", "ride",
    "fly",
]


@dataclass(frozen=True)
class MotionSpec:
    """How a motion looks and what it does to the character.

    `travel`: horizontal speed in px/frame (at adverb speed 1); `cadence`: animation cycles per
    frame; `altitude`: height of the feet above the ground line in px; `characters`: who can do
    it (empty: everyone)."""

    name: str
    phrases: tuple[str, ...]
    posture: Posture
    animation: Animation
    travel: float
    cadence: float
    altitude: float
    sc: int
    et: int
    st: int
    characters: tuple[str, ...] = ()

    @property
    def words(self) -> tuple[str, ...]:
        return (self.name, *self.phrases)

    def allows(self, character: str) -> bool:
        return not self.characters or character in self.characters


@dataclass(frozen=True)
class AdverbSpec:
    """`speed` scales travel and cadence; `amplitude` scales limb swings and jump height."""

    name: str
    speed: float
    amplitude: float


@dataclass(frozen=True)
class TimeSpec:
    """Sky colours (top, horizon), the light the scene is multiplied by, and night details."""

    name: str
    sky_top: tuple[int, int, int]
    sky_horizon: tuple[int, int, int]
    light: tuple[float, float, float]
    stars: bool = False


@dataclass(frozen=True)
class PlaceSpec:
    name: str
    phrases: tuple[str, ...] = ()

    @property
    def words(self) -> tuple[str, ...]:
        return (self.name, *self.phrases)


MOTIONS: tuple[MotionSpec, ...] = (
    MotionSpec("fly on broomstick", ("fly",), "fly", "fly", 2.2, 0.12, 30.0, 0, 1, -1,
               ("Qiqi",)),
    MotionSpec("walk", ("walk through the trees", "walk along the street", "walk in the street"),
               "stand", "walk", 1.0, 0.12, 0.0, 0, 0, -1),
    MotionSpec("run", ("run along the road",), "stand", "run", 2.4, 0.2, 0.0, 0, 0, -1),
    MotionSpec("jump", (), "stand", "jump", 0.6, 0.12, 0.0, 0, 1, -1),
    MotionSpec("sit", ("sit on railing", "sit down"), "sit", "sway", 0.0, 0.08, 0.0, 0, 0, 1),
    MotionSpec("lie down", ("lie on the grass",), "lie", "breathe", 0.0, 0.06, 0.0, 0, 0, 1),
    MotionSpec("wave hand", ("wave to a friend",), "stand", "wave", 0.0, 0.15, 0.0, 1, 0, 1),
    MotionSpec("hold broom", (), "stand", "broom", 0.0, 0.06, 0.0, 0, 0, 1, ("Qiqi",)),
    MotionSpec("turn head", ("look at the sea", "look around"), "stand", "turn", 0.0, 0.06, 0.0,
               0, 0, 1),
    MotionSpec("talk", ("talk to a friend",), "stand", "talk", 0.0, 0.15, 0.0, 1, 0, 1),
    MotionSpec("dance", (), "stand", "dance", 0.3, 0.12, 0.0, 0, 1, -1),
    MotionSpec("ride in the car", ("ride in the purple car",), "ride", "ride", 3.0, 0.2, 0.0, 0,
               1, 1, ("Sosuke",)),
)

ADVERBS: tuple[AdverbSpec, ...] = (
    AdverbSpec("slowly", 0.5, 0.8),
    AdverbSpec("quickly", 1.9, 1.1),
    AdverbSpec("gently", 0.7, 0.6),
    AdverbSpec("happily", 1.3, 1.3),
    AdverbSpec("tiredly", 0.45, 0.5),
    AdverbSpec("carefully", 0.6, 0.7),
    AdverbSpec("smoothly", 1.0, 0.9),
    AdverbSpec("calmly", 0.6, 0.7),
    AdverbSpec("excitedly", 1.7, 1.4),
    AdverbSpec("quietly", 0.6, 0.6),
    AdverbSpec("cheerfully", 1.4, 1.2),
    AdverbSpec("curiously", 0.9, 1.0),
)

TIMES: tuple[TimeSpec, ...] = (
    TimeSpec("morning", (150, 190, 235), (250, 205, 180), (1.0, 0.93, 0.88)),
    TimeSpec("day", (90, 160, 235), (190, 225, 250), (1.0, 1.0, 1.0)),
    TimeSpec("afternoon", (110, 165, 225), (235, 225, 190), (1.0, 0.96, 0.86)),
    TimeSpec("evening", (95, 80, 150), (250, 140, 80), (0.85, 0.62, 0.52)),
    TimeSpec("night", (10, 14, 40), (35, 45, 90), (0.32, 0.36, 0.55), stars=True),
)

PLACES: tuple[PlaceSpec, ...] = (
    PlaceSpec("sky", ("sky over the sea",)),
    PlaceSpec("town", ("town balcony",)),
    PlaceSpec("countryside"),
    PlaceSpec("grass", ("grassy hill",)),
    PlaceSpec("street", ("bakery doorway", "city street")),
    PlaceSpec("forest"),
    PlaceSpec("seaside town"),
    PlaceSpec("cliff", ("cliff top",)),
    PlaceSpec("harbour"),
    PlaceSpec("forest road", ("mountain road",)),
)


SYNONYMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("fly on broomstick", ("fly on broom", "soar", "glide")),
    ("walk", ("stroll", "wander", "amble", "hike", "march", "promenade", "step")),
    ("run", ("jog", "sprint", "dash", "race", "hurry", "rush")),
    ("jump", ("hop", "leap", "bounce", "skip")),
    ("sit", ("seat", "perch", "sit on bench")),
    ("lie down", ("lay down", "nap", "sleep", "doze", "rest", "relax")),
    ("wave hand", ("greet", "hello", "hi", "say hello", "say hi", "goodbye", "say goodbye")),
    ("hold broom", ("hold", "carry broom", "grab broom")),
    ("turn head", ("look", "glance", "gaze", "watch", "peek", "turn")),
    ("talk", ("chat", "speak", "say", "tell", "chatter")),
    ("dance", ("twirl", "spin", "boogie")),
    ("ride in the car", ("ride", "drive", "car")),
    ("slowly", ("slow", "leisurely", "lazily", "unhurriedly")),
    ("quickly", ("quick", "fast", "rapidly", "swiftly", "speedily", "hastily", "briskly")),
    ("gently", ("gentle", "softly", "tenderly", "lightly")),
    ("happily", ("happy", "joyfully", "gladly", "merrily")),
    ("tiredly", ("tired", "sleepily", "sleepy", "wearily")),
    ("carefully", ("careful", "cautiously")),
    ("smoothly", ("smooth", "gracefully", "steadily")),
    ("calmly", ("calm", "peacefully", "serenely")),
    ("excitedly", ("excited", "eagerly", "energetically", "wildly")),
    ("quietly", ("quiet", "silently")),
    ("cheerfully", ("cheerful", "brightly", "playfully")),
    ("curiously", ("curious", "inquisitively")),
    ("morning", ("dawn", "sunrise", "daybreak", "early")),
    ("day", ("daytime", "noon", "midday", "daylight")),
    ("afternoon", ("teatime",)),
    ("evening", ("dusk", "sunset", "twilight")),
    ("night", ("nighttime", "midnight", "tonight", "dark")),
    ("sky", ("air", "clouds", "heavens")),
    ("town", ("city", "village", "rooftops", "square")),
    ("countryside", ("country", "fields", "farm", "farmland")),
    ("grass", ("meadow", "lawn", "hill", "park")),
    ("street", ("road", "lane", "alley", "bakery", "shop", "sidewalk", "avenue")),
    ("forest", ("woods", "wood", "trees", "woodland")),
    ("seaside town", ("seaside", "sea", "beach", "coast", "shore", "ocean")),
    ("cliff", ("cliffs", "clifftop", "rocks")),
    ("harbour", ("harbor", "port", "docks", "dock", "pier", "boats", "wharf")),
    ("forest road", ("path", "trail", "mountain", "mountains")),
)
"""Words and phrases a player's sentence may use for a chip, besides the phrases the world was
trained on: they are read from free text and played as the chip (the game-state model never
sees them, so its tokenizer's words stay `world_words`). The UI lists them under each chip."""


def _index(entries: Iterable[MotionSpec | PlaceSpec]) -> dict[str, str]:
    return {word.casefold(): entry.name for entry in entries for word in entry.words}


@dataclass(frozen=True)
class NanoVocabulary:
    """The canonical words (what the UI shows as chips) and the lookups from any known phrase."""

    motions: tuple[str, ...]
    adverbs: tuple[str, ...]
    times: tuple[str, ...]
    places: tuple[str, ...]

    def motion(self, text: str) -> MotionSpec | None:
        """The motion a phrase means: an exact known phrase, else the canonical motion whose
        first word the phrase starts with ("run to school" → run), else None."""
        key = " ".join(text.casefold().split())
        name = _index(MOTIONS).get(key)
        if name is None:
            verb = key.split(" ", 1)[0]
            name = next((m.name for m in MOTIONS if m.name.split(" ", 1)[0] == verb), None)
        return next((m for m in MOTIONS if m.name == name), None)

    def adverb(self, text: str) -> AdverbSpec | None:
        return next((a for a in ADVERBS if a.name == text.casefold().strip()), None)

    def time(self, text: str) -> TimeSpec | None:
        return next((t for t in TIMES if t.name == text.casefold().strip()), None)

    def place(self, text: str) -> PlaceSpec | None:
        name = _index(PLACES).get(" ".join(text.casefold().split()))
        return next((p for p in PLACES if p.name == name), None)


CHARACTERS = ("Qiqi", "Sosuke")
"""Who lives in the world (the registry's characters, drawn by `sprites`)."""
TEMPLATE_WORDS = ("Motion", "Background")
"""Words of the instruction template (`game.Instruction`) that follow a space."""


def world_words() -> tuple[str, ...]:
    """Every word of the world's phrases, characters and template, sorted: the whole-word
    tokens of the Nano game-state model's tokenizer (recipes/nano.yaml lists them)."""
    phrases = [*CHARACTERS, *TEMPLATE_WORDS, *(a.name for a in ADVERBS), *(t.name for t in TIMES),
               *(w for motion in MOTIONS for w in motion.words),
               *(w for place in PLACES for w in place.words)]
    return tuple(sorted({word for phrase in phrases for word in phrase.split()}))


NANO_VOCABULARY = NanoVocabulary(
    motions=tuple(m.name for m in MOTIONS),
    adverbs=tuple(a.name for a in ADVERBS),
    times=tuple(t.name for t in TIMES),
    places=tuple(p.name for p in PLACES),
)
"""What the Nano world renders; the UI shows these words as chips."""


def _known(entries: Iterable[tuple[str, ...]]) -> KnownPhrases:
    """A field's phrases (chip first) with the `SYNONYMS` of its chips."""
    kept = tuple(entries)
    chips = {entry[0] for entry in kept}
    return KnownPhrases(kept, {chip: more for chip, more in SYNONYMS if chip in chips})


def closed_vocabulary() -> ClosedVocabulary:
    """The world's words as the game holds instructions to them (`TurnEngine.vocabulary` on the
    Nano engine): a sentence is read into chips through the phrases and `SYNONYMS`, every word
    of a field given field by field must be a word of that field's phrases, and the motions kept
    for one character (`MotionSpec.characters`) are theirs only."""
    return ClosedVocabulary(
        world="Nano",
        fields={
            "character": KnownPhrases(tuple((name,) for name in CHARACTERS)),
            "adverb": _known((adverb.name,) for adverb in ADVERBS),
            "motion": _known(motion.words for motion in MOTIONS),
            "time": _known((time.name,) for time in TIMES),
            "place": _known(place.words for place in PLACES),
        },
        only={motion.name: motion.characters for motion in MOTIONS if motion.characters},
    )
