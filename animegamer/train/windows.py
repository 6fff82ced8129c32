"""Training windows of the game-state model: 1..max_turns consecutive shots of one episode.

The paper mixes the sample lengths equally (it draws a length uniformly, then a window of that
length). Here one *epoch* of windows holds every length that fits some episode equally often:
each length's windows are drawn without replacement, in passes, until that length has as many
as the most common length (length 1: one window per shot). Rare lengths are so repeated, common
ones are all seen once, and the order is shuffled; everything is fixed by the seed.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class EpisodeWindow:
    """Consecutive shots (dataset rows) of one episode, in order; the last is the target turn."""

    rows: tuple[dict[str, Any], ...]

    @property
    def history(self) -> tuple[dict[str, Any], ...]:
        return self.rows[:-1]

    @property
    def target(self) -> dict[str, Any]:
        return self.rows[-1]


def episodes(rows: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The rows grouped by `episode_id` (in order of first appearance), each by `episode_index`."""
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        grouped[row["episode_id"]].append(row)
    return [sorted(shots, key=lambda row: row["episode_index"]) for shots in grouped.values()]


def episode_windows(
    rows: Sequence[dict[str, Any]], max_turns: int = 5, seed: int = 0
) -> list[EpisodeWindow]:
    """One epoch of windows: each length 1..max_turns that fits some episode, equally often.

    Episodes shorter than a length give no window of that length. Deterministic for `seed`.
    """
    if max_turns < 1:
        raise ValueError(f"max_turns must be at least 1, got {max_turns}")
    pools = {
        length: [
            EpisodeWindow(tuple(shots[start:start + length]))
            for shots in episodes(rows)
            for start in range(len(shots) - length + 1)
        ]
        for length in range(1, max_turns + 1)
    }
    pools = {length: pool for length, pool in pools.items() if pool}
    if not pools:
        return []
    share = max(len(pool) for pool in pools.values())
    generator = random.Random(seed)
    windows: list[EpisodeWindow] = []
    for pool in pools.values():
        drawn: list[EpisodeWindow] = []
        while len(drawn) < share:
            drawn += generator.sample(pool, min(len(pool), share - len(drawn)))
        windows += drawn
    generator.shuffle(windows)
    return windows
