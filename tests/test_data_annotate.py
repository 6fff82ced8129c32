"""Annotation answers: the strict parser on canned answers, the JSONL file, the model's errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from animegamer.command.parser import reads_back
from animegamer.data.annotate import (
    ANSWER_FIELDS,
    AnnotationRequest,
    AnswerError,
    AnswerFile,
    VisionLanguageModel,
    parse_answer,
    prompt,
    shot_frames,
)
from animegamer.data.errors import DataError

GOOD = {
    "character_present": True, "character": "Qiqi", "adverb": "quickly",
    "motion": "fly on broomstick", "time": "day", "place": "sky",
    "social": 0, "entertainment": 1, "stamina": -1,
}


def answer(**changes) -> str:
    return json.dumps({**GOOD, **changes})


def test_a_good_answer_becomes_a_playable_instruction():
    annotation = parse_answer(answer(), "Qiqi")
    assert annotation.instruction.text == (
        "Character: Qiqi; Motion: quickly fly on broomstick; Background: day sky."
    )
    assert reads_back(annotation.instruction)
    assert (annotation.social, annotation.entertainment, annotation.stamina) == (0, 1, -1)


def test_names_match_without_case_and_the_dataset_spelling_wins():
    annotation = parse_answer(answer(character=" qiqi ", motion="  walk   home "), "Qiqi")
    assert annotation.instruction.character == "Qiqi"
    assert annotation.instruction.motion == "walk home"


def test_a_markdown_fence_is_the_only_wrapping_allowed():
    assert parse_answer(f"```json\n{answer()}\n```", "Qiqi").instruction.place == "sky"
    with pytest.raises(AnswerError) as raised:
        parse_answer(f"Sure! Here is the JSON: {answer()}", "Qiqi")
    assert raised.value.kind == "not json"


@pytest.mark.parametrize(
    ("text", "kind", "message"),
    [
        ("I think she is flying.", "not json", "not JSON"),
        ("", "not json", "not JSON"),
        ("[1, 2]", "not json", "not a JSON object"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "place"}), "fields", "lacks place"),
        (answer(mood="happy"), "fields", "unknown fields mood"),
        ('{"adverb": "a", "adverb": "b"}', "fields", "repeats adverb"),
        (answer(character_present=False), "character absent", "Qiqi is not in the shot"),
        (answer(character_present="yes"), "fields", "true or false"),
        (answer(character="Klee"), "another character", "'Klee'"),
        (answer(social=2), "fields", r"social must be one of \(0, 1\)"),
        (answer(social=True), "fields", "social must be one of"),
        (answer(entertainment=0.5), "fields", "entertainment"),
        (answer(stamina=0), "fields", r"stamina must be one of \(-1, 1\)"),
        (answer(adverb="very quickly"), "fields", "adverb must be one word"),
        (answer(time="late night"), "fields", "time must be one word"),
        (answer(motion=3), "fields", "motion must be text"),
        (answer(motion="  "), "fields", "Motion is empty"),
        (answer(place="x" * 81), "fields", "Place is too long"),
        (answer(place="sky; Motion: jump"), "fields", "break the instruction format"),
    ],
)
def test_unusable_answers_are_refused_with_a_reason(text, kind, message):
    with pytest.raises(AnswerError, match=message) as raised:
        parse_answer(text, "Qiqi")
    assert raised.value.kind == kind


def test_an_answer_matches_the_shot_starting_nearest_within_a_quarter_second(tmp_path):
    path = tmp_path / "answers.jsonl"
    lines = [
        {"video": "v.mp4", "start": 2.7, "answer": "at 2.7", "end": 4.7},  # shot at 65/24 s
        {"video": "v.mp4", "start": 2.6, "answer": "at 2.6"},  # 0.108 s off: the other is nearer
        {"video": "v.mp4", "start": 6.0, "answer": "at 6.0"},  # 0.29 s from the shot at 6.29
        {"video": "w.mp4", "start": 0, "answer": "no such video"},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    file = AnswerFile(path)
    shots = [("v.mp4", 0.0), ("v.mp4", 65 / 24), ("v.mp4", 151 / 24)]
    requests = [AnnotationRequest(v, s, tmp_path, "Qiqi", tmp_path) for v, s in shots]
    assert file.answer(requests) == [None, "at 2.7", None]
    missed = {m["line"]: m["reason"] for m in file.unmatched(shots)}
    assert set(missed) == {2, 3, 4}
    assert "another answer lies nearer to the shot at 2.708 s" in missed[2]
    assert "no shot starts within 0.25 s (the nearest starts at 6.292 s)" in missed[3]
    assert "no shot of w.mp4 was built" in missed[4]


def test_answer_file_matches_video_and_start_to_the_millisecond(tmp_path):
    path = tmp_path / "answers.jsonl"
    lines = [
        {"video": "ep1.mp4", "start": 2.5417, "answer": GOOD},
        {"video": "ep1.mp4", "start": 0, "answer": "not json at all"},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    file = AnswerFile(path)
    requests = [
        AnnotationRequest("ep1.mp4", 61 / 24, tmp_path, "Qiqi", tmp_path),
        AnnotationRequest("ep1.mp4", 0.0, tmp_path, "Qiqi", tmp_path),
        AnnotationRequest("ep2.mp4", 0.0, tmp_path, "Qiqi", tmp_path),
    ]
    first, second, third = file.answer(requests)
    assert first is not None and json.loads(first) == GOOD
    assert (second, third) == ("not json at all", None)
    assert not file.cached


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{oops", "line 2: not JSON"),
        ('{"video": "a.mp4", "start": 1}', "line 2: needs the keys video, start and answer"),
        ('{"video": "a.mp4", "start": "1", "answer": {}}', 'start "1" is neither a number'),
        ('{"video": "a.mp4", "start": -1, "answer": {}}', "start -1 is neither a number"),
        ('{"video": "a.mp4", "start": "00:01:02:05", "answer": {}}',
         r'start "00:01:02:05" is neither a number of seconds ≥ 0 nor a timecode H:MM:SS\.sss'),
        ('{"video": "a.mp4", "start": "1:75", "answer": {}}', 'start "1:75" is neither'),
        ('{"video": "a.mp4", "start": "0:01.0", "answer": {}}', "a second answer for a.mp4"),
        ('{"video": "a.mp4", "start": 1.0, "answer": {}}', "a second answer for a.mp4"),
    ],
)
def test_a_bad_answer_file_names_the_line(tmp_path, line, message):
    path = tmp_path / "answers.jsonl"
    path.write_text('{"video": "a.mp4", "start": 1, "answer": {}}\n' + line + "\n")
    with pytest.raises(DataError, match=message) as raised:
        AnswerFile(path)
    assert "answers.jsonl" in str(raised.value)


def test_timecode_starts_are_read_as_seconds(tmp_path):
    path = tmp_path / "answers.jsonl"
    lines = [{"video": "v.mp4", "start": start, "answer": GOOD}
             for start in ("00:01:02.5", "1:05", "0:00:00")]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    file = AnswerFile(path)
    shots = [("v.mp4", 62.5), ("v.mp4", 65.0), ("v.mp4", 0.0)]
    requests = [AnnotationRequest(v, s, tmp_path, "Qiqi", tmp_path) for v, s in shots]
    assert all(text is not None for text in file.answer(requests))
    assert file.given == 3 and file.unmatched(shots) == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"stamina": 9}, r"line 2: stamina = 9 is outside its range \(allowed: -1, 1\)"),
        ({"social": True}, r"line 2: social = true is outside its range \(allowed: 0, 1\)"),
        ({"character_present": "yes"},
         r'line 2: character_present = "yes" is not allowed \(allowed: true, false\)'),
        ({"mood": "happy"}, r"line 2: unknown field 'mood' = \"happy\" \(the fields: "
                            r"character_present, character, adverb"),
    ],
)
def test_an_answer_field_out_of_range_or_unknown_refuses_the_file(tmp_path, change, message):
    path = tmp_path / "answers.jsonl"
    lines = [{"video": "a.mp4", "start": 0, "answer": GOOD},
             {"video": "a.mp4", "start": 2.5, "answer": {**GOOD, **change}},
             {"video": "a.mp4", "start": 5, "answer": json.dumps({**GOOD, **change})}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(DataError, match=message) as raised:
        AnswerFile(path)
    text = str(raised.value)
    assert str(path) in text and "(1 more such problems in the file)" in text


def test_an_unfilled_template_line_is_no_answer_not_an_error(tmp_path):
    path = tmp_path / "answers.jsonl"
    empty = {name: None if name in ("character_present", "social", "entertainment", "stamina")
             else "" for name in ANSWER_FIELDS}
    path.write_text(json.dumps({"video": "a.mp4", "start": 0, "end": 2.0, "answer": empty}))
    (text,) = AnswerFile(path).answer([AnnotationRequest("a.mp4", 0.0, tmp_path, "Qiqi",
                                                         tmp_path)])
    with pytest.raises(AnswerError):
        parse_answer(str(text), "Qiqi")


def test_a_missing_answer_file_is_named(tmp_path):
    with pytest.raises(DataError, match=r"nowhere\.jsonl: cannot read"):
        AnswerFile(tmp_path / "nowhere.jsonl")


def test_the_prompt_asks_for_every_field_for_the_character():
    text = prompt("Qiqi")
    assert all(f'"{name}"' in text for name in ANSWER_FIELDS)
    assert "Qiqi" in text and "$" not in text
    assert json.loads(text.split("\n\n")[2]).keys() == set(ANSWER_FIELDS)


def test_the_model_sees_four_frames_from_first_to_last():
    frames = np.arange(17)[:, None, None, None] * np.ones((1, 2, 2, 3), np.uint8)
    assert shot_frames(frames)[:, 0, 0, 0].tolist() == [0, 5, 11, 16]


def test_a_model_that_cannot_be_loaded_says_what_to_do(tmp_path):
    with pytest.raises(DataError) as raised:
        VisionLanguageModel(str(tmp_path / "no-model-here"))
    message = str(raised.value)
    assert "cannot load the annotator model" in message and "no-model-here" in message
    assert "--annotations FILE" in message
