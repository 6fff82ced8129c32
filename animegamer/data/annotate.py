"""Annotating shots: the answer format, its strict parser, and the two sources of answers.

An answer is one JSON object (docs/design.md §10): character present, the acting character's name,
adverb, motion phrase, time, place, social 0/1, entertainment 0/1, stamina ±1. `parse_answer`
accepts exactly that (a Markdown code fence around it is the only thing removed) and turns it into a
game `Instruction` held to the player's rules, or raises `AnswerError` with the reason the shot is
skipped. Nothing is guessed or repaired.

Answers come from an `AnswerFile` (JSONL written by hand or by another tool, keyed by source video
and shot start time) or from a `VisionLanguageModel` run through transformers on 4 frames of the
shot and the character's reference image, with the prompt in `prompts/annotate.txt`.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from PIL import Image

from animegamer.command.parser import reads_back
from animegamer.data.decode import read_clip
from animegamer.data.errors import DataError
from animegamer.game.rules import (
    INSTRUCTION_FIELDS,
    Instruction,
    InstructionError,
    make_instruction,
    normalise_field,
)

PROMPT_FILE = Path(__file__).with_name("prompts") / "annotate.txt"
ANSWER_FIELDS = (
    "character_present", *INSTRUCTION_FIELDS, "social", "entertainment", "stamina",
)
ANNOTATED_FRAMES = 4
MAX_ANSWER_TOKENS = 200
_FENCE = re.compile(r"\A```(?:json)?[ \t]*\n(.*)\n[ \t]*```\Z", re.DOTALL)
_FLAGS = {"social": (0, 1), "entertainment": (0, 1), "stamina": (-1, 1)}
_TIMECODE = re.compile(r"\A(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)\Z")
"""H:MM:SS.sss or M:SS.sss (a fraction of a second, not a frame number, after the last colon)."""


class AnswerError(ValueError):
    """An answer that cannot be used; `kind` groups the reasons in the report."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Annotation:
    """A parsed answer: the instruction and the state labels (sc, et, st of docs/design.md §10)."""

    instruction: Instruction
    social: int
    entertainment: int
    stamina: int


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise AnswerError("fields", f"the answer repeats {', '.join(repeated)}")
    return dict(pairs)


def _decode(text: str) -> dict[str, Any]:
    text = text.strip()
    fenced = _FENCE.match(text)
    try:
        value = json.loads(fenced[1] if fenced else text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as error:
        message = f"the answer is not JSON ({error.msg}): {text[:80]!r}"
        raise AnswerError("not json", message) from None
    if not isinstance(value, dict):
        raise AnswerError("not json", f"the answer is not a JSON object: {text[:80]!r}")
    missing = [name for name in ANSWER_FIELDS if name not in value]
    unknown = sorted(set(value) - set(ANSWER_FIELDS))
    if missing or unknown:
        parts = [f"lacks {', '.join(missing)}"] if missing else []
        parts += [f"has unknown fields {', '.join(unknown)}"] if unknown else []
        raise AnswerError("fields", f"the answer {' and '.join(parts)}")
    return value


def field_problems(answer: dict[str, Any]) -> list[str]:
    """What makes an answer wrong whatever its shot: a field name that is not an answer field,
    a flag outside its values. A null is an unfilled field (of `answers_template.jsonl`), left
    to `parse_answer`."""
    problems = [
        f"unknown field {name!r} = {json.dumps(value)} (the fields: {', '.join(ANSWER_FIELDS)})"
        for name, value in answer.items() if name not in ANSWER_FIELDS
    ]
    present = answer.get("character_present")
    if present is not None and not isinstance(present, bool):
        problems.append(f"character_present = {json.dumps(present)} is not allowed "
                        "(allowed: true, false)")
    for name, allowed in _FLAGS.items():
        value = answer.get(name)
        if value is not None and (isinstance(value, bool) or value not in allowed):
            problems.append(f"{name} = {json.dumps(value)} is outside its range (allowed: "
                            f"{', '.join(map(str, allowed))})")
    return problems


def start_seconds(value: object) -> float | None:
    """An answer's `start` in seconds: a number of seconds, or a timecode string (`_TIMECODE`);
    None for anything else."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    match = _TIMECODE.match(value) if isinstance(value, str) else None
    if match is None:
        return None
    hours, minutes, seconds = int(match[1] or 0), int(match[2]), float(match[3])
    if (match[1] is not None and minutes >= 60) or seconds >= 60:
        return None
    return hours * 3600 + minutes * 60 + seconds


def _text(answer: dict[str, Any], name: str, one_word: bool = False) -> str:
    value = answer[name]
    if not isinstance(value, str):
        raise AnswerError("fields", f"{name} must be text, got {value!r}")
    if one_word and len(normalise_field(value).split(" ")) != 1:
        raise AnswerError("fields", f"{name} must be one word, got {value!r}")
    return value


def parse_answer(text: str, character: str) -> Annotation:
    """The annotation in `text` for a dataset of `character`, or `AnswerError` saying why not."""
    answer = _decode(text)
    if answer["character_present"] is not True:
        if answer["character_present"] is False:
            raise AnswerError("character absent", f"{character} is not in the shot")
        raise AnswerError("fields", "character_present must be true or false")
    named = _text(answer, "character")
    if normalise_field(named).casefold() != normalise_field(character).casefold():
        raise AnswerError("another character", f"the shot shows another character ({named!r})")
    for name, allowed in _FLAGS.items():
        value = answer[name]
        if isinstance(value, bool) or value not in allowed:
            raise AnswerError("fields", f"{name} must be one of {allowed}, got {value!r}")
    fields = {
        "character": character,
        "adverb": _text(answer, "adverb", one_word=True),
        "motion": _text(answer, "motion"),
        "time": _text(answer, "time", one_word=True),
        "place": _text(answer, "place"),
    }
    try:
        instruction = make_instruction(fields)
    except InstructionError as error:
        raise AnswerError("fields", str(error)) from None
    if not reads_back(instruction):
        message = f"the fields break the instruction format: {instruction.text!r}"
        raise AnswerError("fields", message)
    return Annotation(
        instruction, answer["social"], answer["entertainment"], answer["stamina"]
    )


@dataclass(frozen=True)
class AnnotationRequest:
    """One shot to annotate."""

    video: str
    start: float
    clip: Path
    character: str
    reference_image: Path


class Annotator(Protocol):
    """A source of raw answers. `name` identifies it in the work records; `cached` says whether
    its answers are worth keeping for a rerun (a model's are, a file's are read again)."""

    name: str
    cached: bool
    given: int
    """How many answers were given ahead (a file's lines); 0 for a source that answers each
    shot asked."""

    def answer(self, requests: Sequence[AnnotationRequest]) -> list[str | None]:
        """The raw answer text of each request, or None when there is none for it."""
        ...

    def unmatched(self, shots: Sequence[tuple[str, float]]) -> list[dict[str, Any]]:
        """The answers given ahead (a file's) that belong to none of `shots` ((video, start)),
        with the reason; empty for a source that answers each shot asked."""
        ...


MATCH_TOLERANCE_S = 0.25
"""An answer keyed by a start time matches the shot whose start lies nearest, this close or
closer: a shot starts on the 1/24 s grid the video is decoded at (a cut at 2.7 s of a 10 fps
video starts its shot at 2.708 s), and shots lie 2 s or more apart."""
ANSWER_KEYS = {"video", "start", "answer"}
OPTIONAL_KEYS = {"end"}
"""`end` (seconds) is what `answers_template.jsonl` adds for people annotating by hand; it is
not used to match."""


@dataclass(frozen=True)
class FileAnswer:
    """One line of an answers file."""

    video: str
    start: float
    line: int
    text: str


class AnswerFile:
    """Answers from a JSONL file, one object per line:
    `{"video": "<path below --videos>", "start": <seconds>, "answer": {...} or "<raw text>"}`
    (and optionally `"end"`); `start` may also be a timecode string ("00:01:02.5"). An answer
    belongs to the shot of its video whose start lies nearest to its `start`, within
    `MATCH_TOLERANCE_S`; `unmatched` lists those that found none. A line that is not such an
    object, or an answer with an unknown field or a flag outside its range (`field_problems`),
    refuses the whole file, naming the line."""

    cached = False

    def __init__(self, path: Path) -> None:
        self.name = str(path)
        self._answers: dict[str, list[FileAnswer]] = {}
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            raise DataError(f"{path}: cannot read the annotations ({error})") from None
        problems = []
        for number, line in enumerate(lines, start=1):
            if line.strip():
                problems += self._add(path, number, line)
        if problems:
            more = f" ({len(problems) - 1} more such problems in the file)" * (len(problems) > 1)
            raise DataError(f"{problems[0]}{more}: fix the answers and rerun")
        self.given = sum(map(len, self._answers.values()))

    def _add(self, path: Path, number: int, line: str) -> list[str]:
        """Read one line; returns the problems of its answer's fields (`field_problems`)."""
        where = f"{path}, line {number}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataError(f"{where}: not JSON ({error.msg})") from None
        allowed = ANSWER_KEYS | OPTIONAL_KEYS
        if not isinstance(entry, dict) or not ANSWER_KEYS <= set(entry) <= allowed:
            raise DataError(f"{where}: needs the keys video, start and answer (and optionally "
                            "end), and no others")
        video, answer = entry["video"], entry["answer"]
        start = start_seconds(entry["start"])
        if not isinstance(video, str):
            raise DataError(f"{where}: video must be text (a path below --videos)")
        if start is None or start < 0:
            raise DataError(
                f"{where}: start {json.dumps(entry['start'])} is neither a number of seconds "
                "≥ 0 nor a timecode H:MM:SS.sss (a fraction of a second after the last colon)"
            )
        same = self._answers.setdefault(video, [])
        if any(abs(other.start - start) < 1e-3 for other in same):
            raise DataError(f"{where}: a second answer for {video} at {start} s")
        text = answer if isinstance(answer, str) else json.dumps(answer)
        same.append(FileAnswer(video, start, number, text))
        try:
            fields = json.loads(text)
        except json.JSONDecodeError:
            return []  # raw text: the parser says why it is unusable
        problems = field_problems(fields) if isinstance(fields, dict) else []
        return [f"{where}: {problem}" for problem in problems]

    def _nearest(self, video: str, start: float) -> FileAnswer | None:
        """The answer of `video` nearest to a shot starting at `start`, within tolerance."""
        own = self._answers.get(video, ())
        close = [a for a in own if abs(a.start - start) <= MATCH_TOLERANCE_S]
        return min(close, key=lambda a: abs(a.start - start), default=None)

    def answer(self, requests: Sequence[AnnotationRequest]) -> list[str | None]:
        found = (self._nearest(r.video, r.start) for r in requests)
        return [match.text if match else None for match in found]

    def unmatched(self, shots: Sequence[tuple[str, float]]) -> list[dict[str, Any]]:
        """The answers that belong to none of `shots` ((video, start) of every shot the build
        made, kept or not), each with its line and the reason."""
        taken = {id(m) for m in (self._nearest(v, s) for v, s in shots) if m is not None}
        starts: dict[str, list[float]] = {}
        for video, start in shots:
            starts.setdefault(video, []).append(start)
        missed = []
        for answers in self._answers.values():
            for answer in answers:
                if id(answer) in taken:
                    continue
                own = starts.get(answer.video, [])
                nearest = min(own, key=lambda s: abs(s - answer.start), default=None)
                if nearest is None:
                    reason = f"no shot of {answer.video} was built (see the report's videos)"
                elif abs(nearest - answer.start) <= MATCH_TOLERANCE_S:
                    reason = f"another answer lies nearer to the shot at {nearest:.3f} s"
                else:
                    reason = (f"no shot starts within {MATCH_TOLERANCE_S} s (the nearest "
                              f"starts at {nearest:.3f} s)")
                missed.append({"video": answer.video, "start": answer.start,
                               "line": answer.line, "reason": reason})
        return sorted(missed, key=lambda m: m["line"])


def prompt(character: str) -> str:
    """The annotation prompt for `character` (from `prompts/annotate.txt`)."""
    template = string.Template(PROMPT_FILE.read_text(encoding="utf-8"))
    return template.substitute(character=character).strip()


def shot_frames(frames: np.ndarray) -> np.ndarray:
    """The `ANNOTATED_FRAMES` frames the model sees, evenly spread from first to last."""
    picks = np.linspace(0, len(frames) - 1, ANNOTATED_FRAMES).round().astype(int)
    return frames[picks]


class VisionLanguageModel:
    """A vision-language model through transformers (`AutoModelForImageTextToText` and its
    processor's chat template: InternVL-hf, Qwen2-VL and models like them), greedy decoding.

    Loading is the only step that talks to the Hub; it fails with a `DataError` that says what
    to do instead.
    """

    cached = True
    given = 0
    model: Any
    processor: Any

    def __init__(self, model_id: str, device: str | None = None) -> None:
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self.name = f"model:{model_id}"
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
        try:
            self.processor = AutoProcessor.from_pretrained(model_id)
            self.model = AutoModelForImageTextToText.from_pretrained(model_id, dtype=dtype)
        except (OSError, ValueError, ImportError, KeyError) as error:
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise DataError(
                f"cannot load the annotator model {model_id!r} ({reason}). --annotator needs a "
                "vision-language model that transformers loads with AutoModelForImageTextToText, "
                "on disk or reachable on the Hub, and a GPU to run at a useful speed; without "
                "one, write the answers to a file and pass --annotations FILE."
            ) from None
        self.model.to(device).eval()
        self.processor.tokenizer.padding_side = "left"

    def answer(self, requests: Sequence[AnnotationRequest]) -> list[str | None]:
        conversations = []
        for request in requests:
            reference = Image.open(request.reference_image).convert("RGB")
            frames = [Image.fromarray(f) for f in shot_frames(read_clip(request.clip))]
            content = [{"type": "image", "image": image} for image in (reference, *frames)]
            content.append({"type": "text", "text": prompt(request.character)})
            conversations.append([{"role": "user", "content": content}])
        inputs = self.processor.apply_chat_template(
            conversations, add_generation_prompt=True, tokenize=True, return_dict=True,
            return_tensors="pt", padding=True,
        ).to(self.model.device, dtype=self.model.dtype)
        with torch.inference_mode():
            output = self.model.generate(
                **inputs, max_new_tokens=MAX_ANSWER_TOKENS, do_sample=False
            )
        new_tokens = output[:, inputs["input_ids"].shape[1] :]
        return list(self.processor.batch_decode(new_tokens, skip_special_tokens=True))

    def unmatched(self, shots: Sequence[tuple[str, float]]) -> list[dict[str, Any]]:
        return []
