"""Every answer accounted for: the build stops when too many of a file's answers match no shot,
or when their start times look like another unit, naming the count, examples and the likely fix.

An answer that matches no shot is lost to training. A few are expected (a shot too short or cut
differently than the annotator thought); many mean the file and the videos disagree, most often
on the unit of `start`: milliseconds, frame numbers, or minutes written as a decimal number.
`guess_unit` reads the unmatched starts in each such unit and sees whether they then match.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from animegamer.data.annotate import MATCH_TOLERANCE_S
from animegamer.data.decode import DECODE_FPS
from animegamer.data.errors import DataError
from animegamer.data.shots import MIN_SEGMENT_SECONDS

MAX_UNMATCHED_SHARE = 0.1
"""More than this share of a file's answers matching no shot stops the build."""
EXAMPLES = 3


@dataclass(frozen=True)
class Unit:
    """A unit `start` may have been written in, and how to read it as seconds (None: it
    cannot be that unit)."""

    name: str
    seconds: Callable[[float, float], float | None]
    """(start, the video's frame rate) → seconds."""


def _minutes_seconds(start: float, fps: float) -> float | None:
    minutes, rest = divmod(round(start * 100), 100)
    return minutes * 60.0 + rest if rest < 60 else None


UNITS = (
    Unit("milliseconds", lambda start, fps: start / 1000),
    Unit("frame numbers", lambda start, fps: start / fps if fps > 0 else None),
    Unit("minutes.seconds (1.05 for 1:05)", _minutes_seconds),
)


@dataclass(frozen=True)
class UnitGuess:
    """The unit that makes most unmatched answers match, and an example of the fix."""

    unit: str
    fits: int
    example: str


def _shot_at(seconds: float | None, starts: Sequence[float]) -> float | None:
    """The start in `starts` within the match tolerance of `seconds`, if any."""
    if seconds is None:
        return None
    return next((s for s in starts if abs(s - seconds) <= MATCH_TOLERANCE_S), None)


def guess_unit(
    unmatched: Sequence[Mapping[str, Any]], open_starts: Mapping[str, Sequence[float]],
    fps: Mapping[str, float],
) -> UnitGuess | None:
    """The unit in which at least half of the `unmatched` answers (and two or more) start where
    distinct shots without an answer start (`open_starts`: those shots' starts in seconds, by
    video). Shots that already have an answer do not count, so seconds read as milliseconds
    (all near a video's first shot, which has its answer) are no fit."""
    best: UnitGuess | None = None
    for unit in UNITS:
        hits: dict[tuple[str, float], tuple[float, float]] = {}
        for answer in unmatched:
            video = answer["video"]
            seconds = unit.seconds(answer["start"], fps.get(video, 0.0))
            shot = _shot_at(seconds, open_starts.get(video, ()))
            if seconds is not None and shot is not None:
                hits.setdefault((video, shot), (answer["start"], seconds))
        if len(hits) >= max(2, math.ceil(len(unmatched) / 2)) and (
            best is None or len(hits) > best.fits
        ):
            start, seconds = next(iter(hits.values()))
            best = UnitGuess(unit.name, len(hits), f"{start:g} → {seconds:.3f}")
    return best


def _hint(start: float, video: Mapping[str, Any]) -> str:
    """What the video's cuts say about an answer at `start` that matched no shot."""
    near = [spike for spike in video.get("motion_spikes", [])
            if abs(spike["start"] - start) <= MATCH_TOLERANCE_S]
    if near:
        spike = near[0]
        return (f"; the detectors saw a change at {spike['start']:.3f} s but judged it motion "
                f"inside a shot (discontinuity {spike['discontinuity']:.2f}): if a cut is "
                "there, a lower --discontinuity-threshold finds it")
    end = video.get("frames", 0) / DECODE_FPS
    bounds = [0.0, *(cut["start"] for cut in video.get("cuts", [])), end]
    for begin, after in pairwise(bounds):
        if abs(begin - start) <= MATCH_TOLERANCE_S and after - begin < MIN_SEGMENT_SECONDS:
            return (f"; the segment from {begin:.3f} s lasts {after - begin:.2f} s, under the "
                    f"{MIN_SEGMENT_SECONDS:g} s a shot needs")
    if start >= end:
        return f"; the video lasts only {end:.2f} s"
    return ("; no cut was found there (report.json lists the cuts, videos.cuts, and what was "
            "judged as motion, videos.motion_spikes)")


def explain(
    unmatched: Sequence[Mapping[str, Any]], videos: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The unmatched answers, each reason followed by what its video's cuts tell about it: a
    change judged as motion there (a missed cut?), a segment too short for a shot, or no cut."""
    done = {video["video"]: video for video in videos if video.get("status") == "done"}
    explained = []
    for answer in unmatched:
        video = done.get(answer["video"])
        hint = _hint(answer["start"], video) if video is not None else ""
        explained.append({**answer, "reason": answer["reason"] + hint})
    return explained


def unmatched_problem(answers: Mapping[str, Any], given: int) -> str | None:
    """Why the build must stop over the answers that matched no shot, or None.

    `answers` is the report's `answers` (with `unit`: a `guess_unit` result as a dict, or None);
    `given` how many answers the file holds."""
    unmatched = answers["unmatched"]
    guess = answers.get("unit")
    too_many = len(unmatched) > MAX_UNMATCHED_SHARE * given
    if not unmatched or not (too_many or guess):
        return None
    examples = "; ".join(
        f"line {a['line']} ({a['video']} at {a['start']:g} s): {a['reason']}"
        for a in unmatched[:EXAMPLES]
    )
    text = (f"{len(unmatched)} of {given} answers in {answers['source']} match no shot "
            f"(e.g. {examples}). ")
    if guess:
        text += (f"Their starts look like {guess['unit']}: read so, {guess['fits']} of them "
                 f"match a shot; write seconds ({guess['example']}). ")
    else:
        text += ("Check that each answer's video is the path below --videos and its start the "
                 "shot's start in seconds; a missed cut shows as an answer between two shots "
                 "(see the report's videos.cuts and answers_template.jsonl). ")
    return text + "To build with the answers that match, rerun with --allow-unmatched."


def check_unmatched(answers: Mapping[str, Any], given: int) -> None:
    """Raise `DataError` with `unmatched_problem`'s text when there is one."""
    problem = unmatched_problem(answers, given)
    if problem:
        raise DataError(problem)
