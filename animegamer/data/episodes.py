"""Episodes (consecutive shots of one scene) and the train/test split.

Our rule for "one scene" (the paper does not publish one): shots of the same video, in time
order, with the same background (time and place, case-insensitive), less than `EPISODE_GAP_S`
apart. Training samples of 1-5 turns are windows of an episode (docs/design.md §10).

The split (`choose_split`) holds out whole source videos when there are enough of them
(`MIN_SPLIT_VIDEOS`), so no scene is seen in both splits; with fewer, it holds out episodes
(and, when no episode is small enough, the last shots of one) inside the videos. Either way the
training split keeps at least one shot.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from animegamer.data.shots import CLIP_FPS, CLIP_FRAMES

EPISODE_GAP_S = 10.0
"""The longest pause between the end of a shot and the start of the next in one episode."""
SHOT_SECONDS = (CLIP_FRAMES - 1) / CLIP_FPS
TEST_FRACTION = 0.1
MIN_SPLIT_VIDEOS = 10
"""Videos needed to hold out whole videos: with fewer, a tenth of them is no video at all, and
one held-out video of three would take a third of the shots (or all of them, with one)."""


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


@dataclass(frozen=True)
class SplitShot:
    """What the split is made from: a shot, its video and its episode."""

    shot_id: str
    video: str
    episode: str


@dataclass(frozen=True)
class Split:
    """The shots held out for the test split, and how they were chosen (`by`: "videos",
    "episodes", or "episodes and shots" when the last shots of an episode were taken)."""

    by: str
    test: frozenset[str]

    def record(self, videos: int) -> dict[str, str]:
        """How the test split was chosen, for the report and the summary (`videos`: how many
        videos the shots come from)."""
        if self.by == "videos":
            how = f"whole videos held out ({videos} videos)"
        else:
            how = (f"{self.by} held out inside the videos ({videos} video"
                   f"{'s' * (videos != 1)}; whole videos are held out from "
                   f"{MIN_SPLIT_VIDEOS} on)")
        return {"by": self.by, "how": how}


def choose_split(shots: Sequence[SplitShot], fraction: float = TEST_FRACTION) -> Split:
    """The test split of `shots` (in video and time order): whole videos when there are at least
    `MIN_SPLIT_VIDEOS` (`choose_test_videos`), otherwise about `fraction` of the shots as whole
    episodes, drawn by their ids, or the last shots of an episode when none fits. The training
    split is never left empty."""
    videos = {shot.video for shot in shots}
    if len(videos) >= MIN_SPLIT_VIDEOS:
        test_videos = choose_test_videos(videos, fraction)
        if test_videos == videos:
            test_videos -= {max(videos, key=_draw)}
        return Split("videos", frozenset(s.shot_id for s in shots if s.video in test_videos))
    budget = 0
    if len(shots) >= 2 and fraction > 0:
        budget = min(max(1, math.floor(fraction * len(shots) + 0.5)), len(shots) - 1)
    episodes: dict[str, list[str]] = {}
    for shot in shots:
        episodes.setdefault(shot.episode, []).append(shot.shot_id)
    test: list[str] = []
    for episode in sorted(episodes, key=_draw):
        if len(test) + len(episodes[episode]) <= budget:
            test += episodes[episode]
    if test or not budget:
        return Split("episodes", frozenset(test))
    episode = min(episodes, key=_draw)
    return Split("episodes and shots", frozenset(episodes[episode][-budget:]))
