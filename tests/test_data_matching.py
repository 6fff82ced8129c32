"""Every answer accounted for: a build whose answers mostly match no shot, or whose starts are in
milliseconds or frames, stops with exit 2 before the features, naming the count, three examples
and the fix; `--allow-unmatched` builds on and the summary gives the count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image
from test_data_annotate import GOOD
from test_data_shots import CLIP_SIZE, make_video

from animegamer.data.__main__ import main
from animegamer.data.matching import explain, guess_unit, unmatched_problem

SHOT_STARTS = (0.0, 2.5, 5.0, 7.5, 10.0)
"""The test video's shots: five 2.5 s segments at 24 fps."""


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("matching")
    (root / "videos").mkdir()
    make_video(root / "videos" / "unit.mp4", [60] * 5, speeds=[2, 3, 2, 3, 2])
    Image.new("RGB", (32, 48), (200, 120, 40)).save(root / "ref.png")
    return root


def build(root: Path, starts: list[float | str], out: Path, *extra: str) -> int:
    lines = [json.dumps({"video": "unit.mp4", "start": start, "answer": GOOD}) for start in starts]
    answers = out.parent / f"{out.name}.jsonl"
    answers.write_text("\n".join(lines) + "\n")
    return main(["build", "--videos", str(root / "videos"), "--character", "Qiqi",
                 "--reference-image", str(root / "ref.png"), "--annotations", str(answers),
                 "--out", str(out), "--size", *map(str, CLIP_SIZE), *extra])


def test_millisecond_starts_stop_the_build_with_the_fix(videos, tmp_path, capsys):
    out = tmp_path / "ms"
    assert build(videos, [1000 * s for s in SHOT_STARTS], out) == 2
    error = capsys.readouterr().err
    assert "4 of 5 answers in" in error and "match no shot" in error
    assert error.count("line ") == 3 and "line 2 (unit.mp4 at 2500 s)" in error
    assert "look like milliseconds: read so, 4 of them match a shot" in error
    assert "write seconds (2500 → 2.500)" in error and "--allow-unmatched" in error
    assert not (out / "report.json").exists() and not (out / "data").exists()


def test_frame_number_starts_are_named(videos, tmp_path, capsys):
    assert build(videos, [24 * s for s in SHOT_STARTS], tmp_path / "frames") == 2
    assert "look like frame numbers" in capsys.readouterr().err


def test_allow_unmatched_builds_on_and_counts_them(videos, tmp_path, capsys):
    out = tmp_path / "allowed"
    assert build(videos, [1000 * s for s in SHOT_STARTS], out, "--allow-unmatched") == 0
    printed = capsys.readouterr().out
    assert "1 shots answered, 4 answers matched no shot, 4 shots without one" in printed
    assert "their starts look like milliseconds" in printed
    report = json.loads((out / "report.json").read_text())
    assert report["answers"]["given"] == 5 and len(report["answers"]["unmatched"]) == 4


def test_timecode_starts_match(videos, tmp_path):
    out = tmp_path / "timecodes"
    assert build(videos, ["00:00:00", "0:02.5", "00:00:05.0", "0:07.5", "0:00:10"], out) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["answers"]["matched"] == 5 and report["answers"]["unmatched"] == []


def test_one_answer_in_ten_lost_is_reported_not_fatal():
    answers = {"source": "a.jsonl", "unmatched": [
        {"video": "v.mp4", "start": 3.1, "line": 4, "reason": "no shot starts within 0.25 s"}]}
    assert unmatched_problem({**answers, "unit": None}, given=10) is None
    problem = unmatched_problem({**answers, "unit": None}, given=9)
    assert problem and "1 of 9 answers in a.jsonl match no shot" in problem
    assert "a missed cut shows as an answer between two shots" in problem


def test_seconds_are_not_taken_for_milliseconds():
    # Answers in seconds that missed their shots read as milliseconds land on the first shot,
    # which has its own answer: no unit is guessed.
    unmatched = [{"video": "v.mp4", "start": s, "line": i} for i, s in enumerate((3.1, 6.9))]
    assert guess_unit(unmatched, {"v.mp4": [2.5, 7.5]}, {"v.mp4": 24.0}) is None
    minutes = [{"video": "v.mp4", "start": s, "line": i} for i, s in enumerate((1.05, 2.1))]
    guess = guess_unit(minutes, {"v.mp4": [0.0, 65.0, 130.0]}, {"v.mp4": 24.0})
    assert guess is not None and guess.unit.startswith("minutes.seconds")
    assert (guess.fits, guess.example) == (2, "1.05 → 65.000")


def test_create_stops_before_training_on_millisecond_answers(videos, tmp_path, capsys):
    from animegamer.create.__main__ import main as create

    answers = tmp_path / "ms.jsonl"
    answers.write_text("".join(
        json.dumps({"video": "unit.mp4", "start": 1000 * s, "answer": GOOD}) + "\n"
        for s in SHOT_STARTS))
    out = tmp_path / "out"
    args = ["--videos", str(videos / "videos"), "--character", "Qiqi", "--reference-image",
            str(videos / "ref.png"), "--annotations", str(answers), "--out", str(out)]
    assert create(args) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "look like milliseconds" in error
    assert not (out / "run").exists()


def test_an_unmatched_answer_says_what_the_cuts_tell():
    video = {"video": "v.mp4", "status": "done", "frames": 240,
             "cuts": [{"start": 2.5}, {"start": 4.0}],
             "motion_spikes": [{"start": 7.25, "discontinuity": 0.12}]}
    answers = [{"video": "v.mp4", "start": s, "line": i, "reason": "no shot starts within 0.25 s"}
               for i, s in enumerate((2.5, 7.3, 8.5, 12.0), start=1)]
    short, spike, inside, after = (a["reason"] for a in explain(answers, [video]))
    assert short.endswith("; the segment from 2.500 s lasts 1.50 s, under the 2 s a shot needs")
    assert "saw a change at 7.250 s but judged it motion inside a shot (discontinuity 0.12)" \
        in spike and "--discontinuity-threshold" in spike
    assert inside.endswith("no cut was found there (report.json lists the cuts, videos.cuts, "
                           "and what was judged as motion, videos.motion_spikes)")
    assert after == "no shot starts within 0.25 s; the video lasts only 10.00 s"
