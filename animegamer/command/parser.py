"""How a player's text becomes an `Instruction`: the one parser of the game, the UI's command
line, the CLI and the API (`/parse`, `/play`).

A text is the short form `[Name] [adverb] motion[, [time] [place]]` (`quickly fly on broomstick,
day sky`, `run`, `Qiqi eats a cake`) or the model's labelled form `Character: Qiqi; Motion:
quickly fly; Background: day sky.`, whose parts other than Motion may be left out. What a text
leaves out comes from the game (`InstructionContext.fallback`): a motion without an adverb gets
the character's default adverb, and a missing time or place stays where the last turn was (the
character's default before the first turn). A short form led by the character's name is a
sentence: the name is the character, never part of the motion, and the first verb goes back to
its base form (`Qiqi flies` plays `fly`, the form the models were trained on).

The text is cleaned once before it is split (`game.clean_text`: NFKC, invisible characters
removed). `check_instruction` then holds the instruction to the game: the character must be the
game's own (another playable character, any other name and look-alike spellings are refused),
and on a world with a closed vocabulary (`ClosedVocabulary`, which `TurnEngine.vocabulary` is on
Nano and None where the models read free text) every word must be one the world knows. On such a
world a text is read as a sentence in any word order (`free_text`): "Qiqi wants to go for a walk
in the town" plays the chips `walk` and `town`; a refusal names only chips.
"""

from __future__ import annotations

import dataclasses
import difflib
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from animegamer.characters.registry import Character, Registry
from animegamer.command.free_text import base_form, phrase_table, read_words
from animegamer.game.rules import (
    ACTION_FIELDS,
    FIELD_LABELS,
    INSTRUCTION_FIELDS,
    MAX_INSTRUCTION_CHARS,
    Instruction,
    InstructionError,
    clean_text,
    make_instruction,
    normalise_field,
)

BACKGROUND_SEPARATORS = (",", "·", ";")
TIME_WORDS = frozenset({
    "day", "night", "morning", "noon", "afternoon", "evening", "dusk", "dawn", "sunrise",
    "sunset", "midnight", "twilight", "daytime", "nighttime",
})
"""Words read as the time at the start of a background, besides the game's own times."""
READING_ORDER = ("adverb", "time", "motion", "place")
"""The order in which a closed world reads the fields of a sentence (`phrase_tables`)."""
LABELS = ("character", "motion", "background")
"""The labels of the labelled form."""
EXAMPLE = (
    "Type e.g. 'quickly fly on broomstick, day sky' or 'Character: Qiqi; Motion: quickly fly on "
    "broomstick; Background: day sky.'"
)


class OtherCharacterError(InstructionError):
    """An instruction naming another playable character than the game's (their models differ)."""

    def __init__(self, named: str, playing: str) -> None:
        super().__init__(f"This game plays {playing}; the instruction names {named}.")
        self.named = named
        self.playing = playing


class UnknownCharacterError(InstructionError):
    """An instruction naming someone who is not the game's character, nor any playable one."""


class UnknownWordsError(InstructionError):
    """Words outside a closed vocabulary; the message names them and the closest known ones."""


@dataclass(frozen=True)
class KnownPhrases:
    """The phrases a closed world reads for one field: each entry its chip (the canonical name,
    what the UI offers) first, then the other phrases meaning the same, which its models were
    trained on. `synonyms` maps a chip to more phrases a sentence may use for it: they are read
    from free text and played as the chip (the models never see them)."""

    entries: tuple[tuple[str, ...], ...]
    synonyms: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def chips(self) -> tuple[str, ...]:
        return tuple(entry[0] for entry in self.entries)

    @property
    def phrases(self) -> tuple[str, ...]:
        return tuple(phrase for entry in self.entries for phrase in entry)

    def listed(self) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """Each chip with every other phrase read as it (trained phrases, then synonyms): what
        the player is shown as the words the world knows."""
        return tuple(
            (entry[0], (*entry[1:], *self.synonyms.get(entry[0], ()))) for entry in self.entries
        )

    def unknown_words(self, text: str) -> list[str]:
        """The words of `text` that no phrase of the field has, in order, each once."""
        known = {word for phrase in self.phrases for word in phrase.casefold().split()}
        return list(dict.fromkeys(w for w in text.split() if w.casefold() not in known))

    def closeness(self, text: str) -> tuple[float, str]:
        """(how alike, the chip): the chip of the phrase, or word of a phrase, most like `text`
        (difflib's ratio, 0..1)."""
        lowered = text.casefold()
        return max(
            (
                (difflib.SequenceMatcher(None, lowered, candidate.casefold()).ratio(), chip)
                for chip, phrases in self.listed()
                for phrase in (chip, *phrases)
                for candidate in (phrase, *phrase.split())
            ),
            default=(0.0, ""),
        )

    def within(self, text: str) -> str:
        """`text` when the field knows it, else the first chip it contains (the registry's
        `day/night` is `day` in a world that knows `day`), else `text` unchanged."""
        if text.casefold() in {phrase.casefold() for phrase in self.phrases}:
            return text
        return next((chip for chip in self.chips if chip.casefold() in text.casefold()), text)


@dataclass(frozen=True)
class ClosedVocabulary:
    """The words of a world whose game-state tokenizer knows a fixed set (Nano): an instruction
    with any other word is refused before a model runs. `fields` maps `character`, `adverb`,
    `motion`, `time` and `place` to their phrases; `only` maps a chip to the characters who may
    use it (Qiqi's broom), where not everyone may."""

    world: str
    fields: Mapping[str, KnownPhrases]
    only: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def for_character(self, name: str) -> ClosedVocabulary:
        """The vocabulary without the entries kept for other characters."""
        fields = {}
        for key, phrases in self.fields.items():
            entries = tuple(
                entry for entry in phrases.entries if name in self.only.get(entry[0], (name,))
            )
            kept = {entry[0] for entry in entries}
            synonyms = {chip: more for chip, more in phrases.synonyms.items() if chip in kept}
            fields[key] = KnownPhrases(entries, synonyms)
        return dataclasses.replace(self, fields=fields, only={})

    def closest_chip(self, text: str) -> str:
        """`Motion 'jump'`: the chip most like `text` over the action fields, with its field."""
        _, chip, key = max((*self.fields[key].closeness(text), key) for key in ACTION_FIELDS)
        return f"{FIELD_LABELS[key]} '{chip}'"

    def phrase_tables(self) -> dict[str, dict[tuple[str, ...], str]]:
        """Per action field, every phrase it reads (filler words dropped) → its chip; the
        fields in the order a sentence is read (`free_text.read_words`): the one-word adverbs
        and times first, then the motion (`walk along the street` is one trained motion), then
        the place from the words left."""
        return {key: phrase_table(self.fields[key].listed()) for key in READING_ORDER}

    def within(self, instruction: Instruction) -> Instruction:
        """`instruction` with each field the world does not know replaced by a chip it
        contains, where it contains one (for the registry's defaults)."""
        values = instruction.fields()
        for key in ACTION_FIELDS:
            values[key] = self.fields[key].within(values[key])
        return make_instruction(values)

    def check(self, instruction: Instruction) -> None:
        """Raise `UnknownWordsError` naming each field's unknown words and the closest chip;
        return when every word is one the models know."""
        values = instruction.fields()
        problems = []
        for key in INSTRUCTION_FIELDS:
            unknown = self.fields[key].unknown_words(values[key])
            if unknown:
                _, chip = self.fields[key].closeness(values[key])
                problems.append(
                    f"{FIELD_LABELS[key]} '{values[key]}': {', '.join(unknown)} "
                    f"{'is' if len(unknown) == 1 else 'are'} not known (closest chip: {chip})."
                )
        if problems:
            raise UnknownWordsError(f"{self.knows_only()} " + " ".join(problems))

    def knows_only(self) -> str:
        return f"The {self.world} world knows only the words on the chips and their phrases."

    def refuse_unknown(self, words: Sequence[str]) -> UnknownWordsError:
        """The refusal of a sentence with `words` the world does not read: each word with the
        chip most like it."""
        named = "; ".join(f"'{w}' (closest chip: {self.closest_chip(base_form(w))})" for w in words)
        return UnknownWordsError(f"{self.knows_only()} Not known: {named}.")


@dataclass(frozen=True)
class InstructionContext:
    """What reading a text needs of the game.

    `fallback` fills the gaps of a command; `character` is the game's character (its registry
    name) and `names` every name an instruction may call them by; `others` maps each other
    playable character to their names; `adverbs` and `times` are the words recognised as such at
    the start of a part (besides words ending in -ly, and `TIME_WORDS`); `vocabulary` is the
    closed vocabulary of the world, None where the models read free text.
    """

    fallback: Instruction
    character: str
    names: tuple[str, ...]
    others: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    adverbs: Sequence[str] = ()
    times: Sequence[str] = ()
    vocabulary: ClosedVocabulary | None = None

    def is_adverb(self, word: str) -> bool:
        lowered = word.casefold()
        return lowered in {a.casefold() for a in self.adverbs} or (
            lowered.endswith("ly") and len(lowered) > 3
        )

    def is_time(self, word: str) -> bool:
        known = {t.casefold() for t in (*self.times, self.fallback.time)} | TIME_WORDS
        return word.casefold() in known

    def names_someone(self, word: str) -> bool:
        """Whether `word` is, or looks like, the name of a playable character."""
        names = (*self.names, *(name for names in self.others.values() for name in names))
        return any(
            word.casefold() == name.casefold() or look_alike_letters(word, name)
            for name in names
        )


def _unique(words: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(word for word in words if word))


def character_names(character: Character) -> tuple[str, ...]:
    """The names an instruction may call `character` by: its registry name and the name its
    instructions use."""
    return _unique((character.name, character.defaults.character))


def game_context(
    registry: Registry,
    character: str,
    last: Instruction | None = None,
    vocabulary: ClosedVocabulary | None = None,
) -> InstructionContext:
    """The context of a game of `character` whose last turn played `last` (None before the
    first), on a world whose closed vocabulary is `vocabulary` (None: free text)."""
    playing = registry.get(character)
    closed = vocabulary.for_character(playing.name) if vocabulary else None
    defaults = closed.within(playing.defaults) if closed else playing.defaults
    last = last or defaults
    known = (playing.defaults, *playing.examples)
    return InstructionContext(
        fallback=dataclasses.replace(
            defaults, motion=last.motion, time=last.time, place=last.place
        ),
        character=playing.name,
        names=character_names(playing),
        others={c.name: character_names(c) for c in registry.characters if c.name != playing.name},
        adverbs=closed.fields["adverb"].chips if closed else _unique(i.adverb for i in known),
        times=closed.fields["time"].chips if closed else _unique(i.time for i in known),
        vocabulary=closed,
    )


def look_alike_letters(word: str, name: str) -> list[str]:
    """The letters by which `word` differs from `name` when it looks like it: same length, and
    each differing letter from another script than Latin (Cyrillic `і` for `i`); else []."""
    if len(word) != len(name) or word.casefold() == name.casefold():
        return []
    differing = [
        typed for typed, meant in zip(word, name, strict=True)
        if typed.casefold() != meant.casefold()
    ]
    if all(char.isalpha() and not _is_latin(char) for char in differing):
        return differing
    return []


def _is_latin(char: str) -> bool:
    return char.isascii() or unicodedata.name(char, "").startswith("LATIN")


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
    """The parts of `Character: …; Motion: …; Background: ….`, or None for a short command.

    Plain splitting, linear in the length of the text (a backtracking pattern here once let one
    instruction of a few kilobytes hold the server for minutes)."""
    if "motion:" not in text.casefold():
        return None
    parts: dict[str, str] = {}
    for piece in text.strip().removesuffix(".").split(";"):
        name, colon, value = piece.partition(":")
        label = name.strip().casefold()
        if not colon or label not in LABELS or label in parts:
            raise InstructionError(f"Could not read the instruction. {EXAMPLE}")
        parts[label] = value
    return parts


def _leading_name(text: str, context: InstructionContext) -> tuple[str | None, str]:
    """A short command's leading name (`Qiqi eats a cake`, `Qiqi: run`) and the rest (empty
    for a name alone, which is no motion)."""
    first, _, rest = text.strip().partition(" ")
    word = first.rstrip(":,")
    if context.names_someone(word):
        return word, rest
    return None, text


def _motion_parts(text: str, context: InstructionContext, sentence: bool) -> tuple[str, str]:
    """(adverb, motion); in a `sentence` (led by a name) the verb goes back to its base form."""
    words = normalise_field(text).split(" ")
    adverb = context.fallback.adverb
    if len(words) > 1 and context.is_adverb(words[0]):
        adverb, words = words[0], words[1:]
    if sentence:
        words = [base_form(words[0]), *words[1:]]
    return adverb, " ".join(words)


def _background_parts(text: str | None, context: InstructionContext) -> tuple[str, str]:
    fallback = context.fallback
    words = normalise_field(text or "").split(" ") if text and text.strip() else []
    if not words:
        return fallback.time, fallback.place
    if context.is_time(words[0]):
        return words[0], " ".join(words[1:]) or fallback.place
    return fallback.time, " ".join(words)


def parse_instruction(text: str | None, context: InstructionContext) -> Instruction:
    """The instruction a text asks for, its gaps filled from `context`; `InstructionError`
    saying what is wrong. It is not yet held to the game (`check_instruction`)."""
    text = text or ""
    if len(text) > MAX_INSTRUCTION_CHARS:
        raise InstructionError(
            f"The instruction is too long ({len(text)} characters; at most "
            f"{MAX_INSTRUCTION_CHARS})."
        )
    text = clean_text(text)
    if not text.strip():
        raise InstructionError(
            "Type what your character should do (e.g. 'quickly fly on broomstick, day sky'), "
            "or tap the suggestions under the line."
        )
    labelled = _labelled(text)
    if context.vocabulary is not None:
        return _read_closed(text, labelled, context, context.vocabulary)
    if labelled is None:
        named, command = _leading_name(text, context)
        motion_text, background_text = _split_first(command, BACKGROUND_SEPARATORS)
    else:
        named = labelled.get("character", "").strip() or None
        motion_text, background_text = labelled.get("motion", ""), labelled.get("background")
    if not normalise_field(motion_text):
        raise InstructionError("Motion is empty: say what your character should do, e.g. 'run'.")
    sentence = labelled is None and named is not None
    adverb, motion = _motion_parts(motion_text, context, sentence)
    time, place = _background_parts(background_text, context)
    return make_instruction({
        "character": named or context.fallback.character, "adverb": adverb, "motion": motion,
        "time": time, "place": place,
    })


def _read_closed(
    text: str,
    labelled: dict[str, str] | None,
    context: InstructionContext,
    vocabulary: ClosedVocabulary,
) -> Instruction:
    """A closed world's reading of free text (`free_text`): the chips the text names, in any
    order, around filler words; the gaps from `context`. Unknown words, two chips for one field
    or no motion are refused, naming chips only."""
    named = None
    if labelled is not None:
        named = labelled.get("character", "").strip() or None
        text = f"{labelled.get('motion', '')} {labelled.get('background') or ''}"
    reading = read_words(text, vocabulary.phrase_tables(), context.names_someone, "motion")
    if reading.unknown:
        raise vocabulary.refuse_unknown(reading.unknown)
    names = {name.casefold(): name for name in (named, *reading.names) if name}.values()
    if len(names) > 1:
        raise InstructionError(
            f"The instruction names {' and '.join(names)}; this game plays one character, "
            f"{context.character}."
        )
    for key, chips in reading.found.items():
        if len(chips) > 1:
            raise InstructionError(
                f"One {FIELD_LABELS[key].lower()} a turn: the instruction names "
                f"{' and '.join(repr(chip) for chip in chips)}; keep one of these chips."
            )
    if not reading.found["motion"]:
        motions = ", ".join(f"'{chip}'" for chip in vocabulary.fields["motion"].chips[:3])
        raise InstructionError(
            f"No motion: say what {context.character} should do with a Motion chip "
            f"(e.g. {motions})."
        )
    values = context.fallback.fields()
    values.update({key: chips[0] for key, chips in reading.found.items() if chips})
    values["character"] = named or (reading.names[0] if reading.names else values["character"])
    return make_instruction(values)


def check_character(name: str, context: InstructionContext) -> str:
    """The game's character's name as the game spells it, when `name` is it (without case, after
    NFKC: `qiqi` and fullwidth `Ｑｉｑｉ` are Qiqi); another playable character raises
    `OtherCharacterError`, a look-alike spelling or any other name `UnknownCharacterError`."""
    named = name.casefold()
    own = next((n for n in context.names if n.casefold() == named), None)
    if own is not None:
        return own
    for other, names in context.others.items():
        if named in {n.casefold() for n in names}:
            raise OtherCharacterError(other, context.character)
    for meant in (*context.names, *(n for names in context.others.values() for n in names)):
        letters = look_alike_letters(name, meant)
        if letters:
            described = ", ".join(
                f"{char} is {unicodedata.name(char, 'unnamed').lower()}" for char in letters
            )
            raise UnknownCharacterError(
                f"'{name}' is not {meant}: it has letters that only look like Latin ones "
                f"({described}). Type the name in plain letters, or leave it out."
            )
    raise UnknownCharacterError(
        f"This game plays {context.character}; the instruction names '{name}', who is not "
        f"in it. Leave the name out, or write {context.names[0]}."
    )


def check_instruction(instruction: Instruction, context: InstructionContext) -> Instruction:
    """`instruction` as the game plays it (the character spelled as the game spells them) when
    its character is the game's and, on a closed world, every word is known; else
    `InstructionError` saying why."""
    character = check_character(instruction.character, context)
    instruction = dataclasses.replace(instruction, character=character)
    if context.vocabulary is not None:
        context.vocabulary.check(instruction)
    return instruction


def read_instruction(text: str | None, context: InstructionContext) -> Instruction:
    """Parse and check: what the command line, the CLI and the API play."""
    return check_instruction(parse_instruction(text, context), context)


def with_word(text: str | None, part: str, word: str, context: InstructionContext) -> str:
    """The command with one part (`adverb`, `motion`, `time` or `place`) replaced by `word`:
    what a suggestion chip does. A command that cannot be read starts over from the fallback."""
    try:
        current = parse_instruction(text, context) if text and text.strip() else context.fallback
    except InstructionError:
        current = context.fallback
    values = current.fields()
    values[part] = word
    return format_command(make_instruction(values))


def reads_back(instruction: Instruction) -> bool:
    """Whether `instruction.text`, the trained sentence, reads back into the same fields when
    its own adverb and time are known words: false when a field breaks the labelled form (a `;`
    in a field, a time of two words)."""
    context = InstructionContext(
        fallback=instruction,
        character=instruction.character,
        names=(instruction.character,),
        adverbs=(instruction.adverb,),
        times=(instruction.time,),
    )
    try:
        return parse_instruction(instruction.text, context) == instruction
    except InstructionError:
        return False
