"""Episodes (consecutive shots of one scene) and the train/test split by source video.

Our rule for "one scene" (the paper does not publish one): shots of the same video, in time
order, with the same background (time and place, case-insensitive), less than `EPISODE_GAP_S`
apart. Training samples of 1-5 turns are windows of an episode (docs/design.md §10).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from animegamer.data.shots import CLIP_FPS, CLIP_FRAMES

EPISODE_GAP_S = 10.0
"""The longest pause between the end of a shot and the start of the next in one episode."""
SHOT_SECONDS = (CLIP_FRAMES - 1) / CLIP_FPS
TEST_FRACTION = 0.1


@dataclass(frozen=True)
class ShotPlace:
    """What episodes are made from: where a shot is in its video, and its background."""

    video_id: str
    start: float
    time: str
    place: str


def assign_episodes(
    shots: Sequence[ShotPlace], gap: float = EPISODE_GAP_S
) -> list[tuple[str, int]]:
    """(episode id, index in the episode) of each shot; `shots` sorted by video, then start."""
    result: list[tuple[str, int]] = []
    counts: dict[str, int] = {}
    previous: ShotPlace | None = None
    for shot in shots:
        continues = (
            previous is not None
            and previous.video_id == shot.video_id
            and (previous.time.casefold(), previous.place.casefold())
            == (shot.time.casefold(), shot.place.casefold())
            and shot.start - (previous.start + SHOT_SECONDS) <= gap
        )
        if continues:
            episode, index = result[-1][0], result[-1][1] + 1
        else:
            number = counts[shot.video_id] = counts.get(shot.video_id, 0) + 1
            episode, index = f"{shot.video_id}-e{number:04d}", 0
        result.append((episode, index))
        previous = shot
    return result


def _draw(video: str) -> float:
    """A fixed number in [0, 1) per video name, so adding videos never moves the others."""
    return int(hashlib.sha256(video.encode()).hexdigest()[:12], 16) / 16**12


def choose_test_videos(videos: Iterable[str], fraction: float = TEST_FRACTION) -> set[str]:
    """The videos whose shots form the test split: those whose draw is below `fraction`, and
    when that picks none of two or more videos, the one with the lowest draw."""
    names = sorted(set(videos), key=_draw)
    chosen = {name for name in names if _draw(name) < fraction}
    if not chosen and len(names) >= 2 and fraction > 0:
        chosen = {names[0]}
    return chosen
