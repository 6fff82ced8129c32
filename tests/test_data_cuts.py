"""Cuts a person sees: between shots on one background that differ only in the character's
action, where it stands, or the framing (the example videos of `animegamer.create.example`,
rendered by the Nano world), found at the default settings; and truncated videos."""

from __future__ import annotations

from itertools import pairwise

import pytest

from animegamer.create.example import render_shots, write_example
from animegamer.data.decode import DECODE_FPS, FrameStream, probe
from animegamer.data.shots import CutDetector
from animegamer.video.mp4check import truncation


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    shots = render_shots()
    return shots, write_example(tmp_path_factory.mktemp("example"), shots)


def test_every_cut_between_shots_on_one_background_is_found(example):
    shots, paths = example
    videos = sorted({shot.video for shot in shots})
    same_background = 0
    for video in videos:
        own = [shot for shot in shots if shot.video == video]
        same_background += sum(
            (a.instruction.time, a.instruction.place) == (b.instruction.time, b.instruction.place)
            for a, b in pairwise(own)
        )
        path = paths["videos"] / video
        cuts = CutDetector().feed(FrameStream(path, probe(path), 64, 96))
        expected = [round(shot.start * DECODE_FPS) for shot in own[1:]]
        assert [cut.frame for cut in cuts] == expected, video
        assert all(cut.scores["content"] > 0 and "discontinuity" in cut.scores for cut in cuts)
    assert same_background >= 12  # most cuts keep the background: the hard case


def test_a_truncated_fast_start_mp4_is_named(example, tmp_path):
    _, paths = example
    whole = (paths["videos"] / "walk.mp4").read_bytes()
    assert truncation(paths["videos"] / "walk.mp4") is None
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(whole[: len(whole) * 2 // 3])  # write_mp4 puts the index first (faststart)
    reason = truncation(cut)
    assert reason and reason.startswith("truncated") and "'mdat'" in reason
