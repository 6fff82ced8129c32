"""Free text read against a closed world's phrases: "Qiqi wants to go for a walk in the town" is
the motion `walk` in the place `town`.

A closed world (Nano) knows a fixed set of phrases per field (its chips, the phrases it was
trained on, and synonyms that mean a chip). A player's sentence is read word by word, in any
order: the filler words of English (articles, prepositions, pronouns, "wants to go for") are
dropped from the sentence and from every phrase, each remaining word is compared in its plain form
(`walks`, `walking` and `walk` are one word), and every field looks for its longest phrases
independently. What is neither found nor filler is an unknown word. Pure functions on plain data;
the parser (`ClosedVocabulary.read`) turns a `Reading` into an instruction or a refusal.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

FILLER_WORDS = frozenset({
    "a", "an", "the", "some", "this", "that", "these", "those", "her", "his", "their", "its",
    "my", "our", "your", "she", "he", "they", "it", "i", "we", "you", "me", "us", "them",
    "herself", "himself", "themselves", "to", "in", "on", "at", "into", "onto", "over", "under",
    "through", "along", "across", "around", "about", "by", "near", "from", "toward", "towards",
    "with", "for", "of", "up", "down", "off", "out", "and", "then", "now", "again", "there",
    "here", "please", "let", "lets", "wants", "want", "would", "like", "likes", "should", "can",
    "could", "will", "shall", "must", "may", "might", "is", "be", "are", "go", "goes", "going",
    "get", "gets", "take", "takes", "have", "has", "do", "does", "just", "very", "really", "so",
    "too", "little", "bit", "while", "time", "today", "friend", "friends", "way", "all", "own",
    "as", "also", "try", "tries", "feel", "feels", "okay", "ok", "more", "first",
})
"""Words a sentence may hold around the phrases of a closed world without changing its meaning.
A world's phrases may contain them too ("sit on railing"): they are dropped from both sides."""

_WORD = re.compile(r"[\w']+")
_IRREGULAR_BASE = MappingProxyType({"is": "be", "has": "have", "does": "do", "goes": "go"})
_ES_PLURAL = ("sses", "xes", "zzes", "ches", "shes", "oes")


@dataclass(frozen=True)
class Reading:
    """What a sentence says in a closed world's terms.

    `found` maps each field to the chips its phrases name, in order, each once; `names` are the
    words that name someone (`is_name`), in order; `unknown` the words that are neither filler,
    nor a name, nor part of a known phrase, each once, as typed."""

    found: Mapping[str, tuple[str, ...]]
    names: tuple[str, ...]
    unknown: tuple[str, ...]


def base_form(verb: str) -> str:
    """`flies` → `fly`, `watches` → `watch`, `runs` → `run`: the verb after a name, in the form
    the models were trained on (the inverse of the story's third person)."""
    lowered = verb.casefold()
    if lowered in _IRREGULAR_BASE:
        return _IRREGULAR_BASE[lowered]
    if len(lowered) < 3 or not lowered.endswith("s") or lowered.endswith("ss"):
        return verb
    if lowered.endswith("ies") and len(lowered) > 4:
        return verb[:-3] + "y"
    if lowered.endswith(_ES_PLURAL):
        return verb[:-2]
    return verb[:-1]


def words_of(text: str) -> list[str]:
    """The words of `text`, without punctuation and possessives (`Qiqi's` is `Qiqi`)."""
    words = (word.strip("'") for word in _WORD.findall(text))
    return [word.removesuffix("'s") for word in words if word.strip("_")]


def plain_forms(word: str) -> frozenset[str]:
    """`word` and the plain forms it may stand for: `walks` → walk, `walking` → walk, `running`
    → run, `dancing` → dance, `lying` → lie (casefolded)."""
    lowered = word.casefold()
    forms = {lowered, base_form(lowered)}
    if lowered.endswith("ying") and len(lowered) == 5:
        forms.add(lowered[:-4] + "ie")
    if lowered.endswith("ing") and len(lowered) > 5:
        stem = lowered[:-3]
        forms.update({stem, stem + "e"})
        if len(stem) > 2 and stem[-1] == stem[-2]:
            forms.add(stem[:-1])
    return frozenset(forms)


def reduced(phrase: str) -> tuple[str, ...]:
    """A phrase's words without the filler ones, casefolded: how phrases are compared."""
    return tuple(
        word.casefold() for word in words_of(phrase) if word.casefold() not in FILLER_WORDS
    )


def _matches(phrase: tuple[str, ...], forms: list[frozenset[str]], start: int) -> bool:
    if start + len(phrase) > len(forms):
        return False
    return all(word in forms[start + i] for i, word in enumerate(phrase))


def _find(
    phrases: Mapping[tuple[str, ...], str], forms: list[frozenset[str]], covered: set[int]
) -> list[str]:
    """The chips of `phrases` (reduced phrase → chip) found in `forms`, longest phrase first at
    each position; the positions they cover are added to `covered`."""
    longest_first = sorted(phrases, key=len, reverse=True)
    chips: list[str] = []
    position = 0
    while position < len(forms):
        phrase = next((p for p in longest_first if _matches(p, forms, position)), None)
        if phrase is None:
            position += 1
            continue
        chips.append(phrases[phrase])
        covered.update(range(position, position + len(phrase)))
        position += len(phrase)
    return list(dict.fromkeys(chips))


def read_words(
    text: str,
    fields: Mapping[str, Mapping[tuple[str, ...], str]],
    is_name: Callable[[str], bool],
    lender: str | None = None,
) -> Reading:
    """The chips `text` names per field (`fields`: field → reduced phrase → chip, read in that
    order, each field among the words the fields before it left: `sits gently on the railing`
    is the adverb `gently`, then `sit on railing`), the names in it and its unknown words. A
    field that finds nothing there also reads the words the `lender` field took (`walk in the
    street` is one motion, and its place is `street` unless another place is named)."""
    words = [word for word in words_of(text) if word.casefold() not in FILLER_WORDS]
    names = tuple(word for word in words if is_name(word))
    rest = [word for word in words if not is_name(word)]
    forms = [plain_forms(word) for word in rest]
    covered: dict[int, str] = {}
    found: dict[str, tuple[str, ...]] = {}
    for field, phrases in fields.items():
        for lent in ((), (lender,)):
            left = [i for i in range(len(forms)) if i not in covered or covered[i] in lent]
            taken: set[int] = set()
            found[field] = tuple(_find(phrases, [forms[i] for i in left], taken))
            if found[field]:
                covered.update((left[i], covered.get(left[i], field)) for i in taken)
                break
    unknown = tuple(dict.fromkeys(w for i, w in enumerate(rest) if i not in covered))
    return Reading(found=found, names=names, unknown=unknown)


def phrase_table(entries: Iterable[tuple[str, Iterable[str]]]) -> dict[tuple[str, ...], str]:
    """Reduced phrase → chip, from (chip, the phrases meaning it) pairs; the chip itself is one
    of its phrases. A phrase that reduces to nothing (all filler) is left out."""
    table: dict[tuple[str, ...], str] = {}
    for chip, phrases in entries:
        for phrase in (chip, *phrases):
            key = reduced(phrase)
            if key:
                table.setdefault(key, chip)
    return table
