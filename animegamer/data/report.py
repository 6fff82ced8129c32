"""`report.json`: what each stage did, what was skipped and why, and what the rows hold."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from animegamer.data.flow import MotionLevels
from animegamer.game.rules import ACTION_FIELDS


@dataclass(frozen=True)
class Skip:
    """A shot left out: the stage, a short kind (grouped in the counts) and the full reason."""

    shot_id: str
    video: str
    start: float
    stage: str
    kind: str
    reason: str


def _videos(records: Sequence[Mapping[str, Any]], found: int) -> dict[str, Any]:
    done = [r for r in records if r["status"] == "done"]
    return {
        "found": found,
        "done": len(done),
        "not_reached": found - len(records),
        "failed": {r["video"]: r["reason"] for r in records if r["status"] == "failed"},
        "warnings": {r["video"]: r["warning"] for r in done if "warning" in r},
        "partial": {r["video"]: r["partial"] for r in done if "partial" in r},
        "no_cuts": sorted(r["video"] for r in done if r["segments"] == 1),
        "variable_frame_rate": sorted(r["video"] for r in done if r["variable_frame_rate"]),
        "cuts": {r["video"]: r.get("cuts", []) for r in done},
        "motion_spikes": {r["video"]: r.get("motion_spikes", []) for r in done},
    }


def _vocabulary(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    counters: dict[str, Counter[str]] = {name: Counter() for name in ACTION_FIELDS}
    for row in rows:
        for name, counter in counters.items():
            counter[row[name]] += 1
    return {name: dict(counter.most_common()) for name, counter in counters.items()}


def make_report(
    *,
    character: str,
    videos: Sequence[Mapping[str, Any]],
    videos_found: int,
    stages: Mapping[str, int],
    skips: Sequence[Skip],
    rows: Mapping[str, Sequence[Mapping[str, Any]]],
    levels: MotionLevels | None,
    answers: Mapping[str, Any] | None = None,
    split: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The report as a JSON-ready dict; deterministic (no times), so a resumed build writes the
    same report as an uninterrupted one. `videos.cuts` lists each video's cuts with the
    detectors that found them and every score (`shots.Cut`), `videos.motion_spikes` the
    detectors' findings judged as motion inside a shot; `answers` says which answers of
    a file matched no shot and which shots have none; `split` how the test split was chosen
    (`episodes.Split`)."""
    every_row = [row for split in rows.values() for row in split]
    episodes = Counter(row["episode_id"] for row in every_row)
    done = [v for v in videos if v["status"] == "done"]
    return {
        "character": character,
        "videos": _videos(videos, videos_found),
        "stages": {
            "segments": sum(v["segments"] for v in done),
            "segments_too_short": sum(v["too_short"] for v in done),
            **stages,
            "rows": {name: len(split_rows) for name, split_rows in rows.items()},
        },
        "split": dict(split or {}),
        "answers": dict(answers or {}),
        "skipped": dict(Counter(f"{s.stage}: {s.kind}" for s in skips).most_common()),
        "skips": [asdict(s) for s in skips],
        "levels": levels.to_dict() if levels else None,
        "level_histogram": {
            str(level): sum(row["motion_level"] == level for row in every_row)
            for level in range(1, 6)
        },
        "episodes": {
            "count": len(episodes),
            "lengths": {
                str(length): count for length, count in sorted(Counter(episodes.values()).items())
            },
        },
        "vocabulary": _vocabulary(every_row),
    }
