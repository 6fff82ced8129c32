"""The train/test split never leaves training empty: with few videos the test split is episodes
(or the last shots of one) inside the videos; with many, whole videos. A one-video folder whose
name once sent all its shots to the test split builds a training split."""

from __future__ import annotations

import json

from PIL import Image
from test_data_annotate import GOOD
from test_data_shots import CLIP_SIZE, make_video

from animegamer.data.__main__ import main
from animegamer.data.episodes import (
    MIN_SPLIT_VIDEOS,
    SplitShot,
    choose_split,
    choose_test_videos,
)

ONE_VIDEO = "spearman-12.mp4"
"""A name whose draw is under 0.1: held out whole by the per-video rule."""


def shots_of(episodes: dict[str, int], video: str = ONE_VIDEO) -> list[SplitShot]:
    return [SplitShot(f"{episode}-{i}", video, episode)
            for episode, count in episodes.items() for i in range(count)]


def test_one_video_holds_out_whole_episodes_near_a_tenth():
    shots = shots_of({"e1": 9, "e2": 2, "e3": 8, "e4": 5})
    split = choose_split(shots)
    assert split.by == "episodes"
    held = {shot.episode for shot in shots if shot.shot_id in split.test}
    assert held == {"e2"}  # the only episode that fits round(0.1 · 24) = 2 shots
    assert len(split.test) == 2


def test_one_long_episode_gives_its_last_shots():
    shots = shots_of({"e1": 24})
    split = choose_split(shots)
    assert split.by == "episodes and shots"
    assert split.test == {"e1-22", "e1-23"}


def test_training_keeps_a_shot_however_few_there_are():
    assert choose_split(shots_of({"e1": 1})).test == frozenset()
    two = choose_split(shots_of({"e1": 1, "e2": 1}))
    assert len(two.test) == 1
    assert choose_split(shots_of({"e1": 5}), fraction=0).test == frozenset()


def test_many_videos_hold_out_whole_videos():
    shots = [SplitShot(f"v{v}-{i}", f"video-{v}.mp4", f"v{v}-e1")
             for v in range(MIN_SPLIT_VIDEOS) for i in range(3)]
    split = choose_split(shots)
    assert split.by == "videos"
    held = {shot.video for shot in shots if shot.shot_id in split.test}
    assert held and len(held) < MIN_SPLIT_VIDEOS
    assert all(shot.shot_id in split.test for shot in shots if shot.video in held)


def test_a_one_video_folder_trains_whatever_its_name(tmp_path, capsys):
    assert choose_test_videos({ONE_VIDEO}) == {ONE_VIDEO}  # the old rule held it all out
    videos = tmp_path / "videos"
    videos.mkdir()
    make_video(videos / ONE_VIDEO, [60, 60, 60, 60], speeds=[2, 3, 2, 3])
    Image.new("RGB", (32, 48), (200, 120, 40)).save(tmp_path / "ref.png")
    places = ["park", "park", "beach", "town"]
    lines = [json.dumps({"video": ONE_VIDEO, "start": 2.5 * i,
                         "answer": {**GOOD, "place": place}})
             for i, place in enumerate(places)]
    (tmp_path / "answers.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    args = ["build", "--videos", str(videos), "--character", "Qiqi", "--reference-image",
            str(tmp_path / "ref.png"), "--annotations", str(tmp_path / "answers.jsonl"),
            "--out", str(out), "--size", *map(str, CLIP_SIZE)]
    assert main(args) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["stages"]["rows"] == {"train": 3, "test": 1}
    assert report["split"]["by"] == "episodes"
    printed = capsys.readouterr().out
    assert "shots per split: train 3, test 1 (test split: episodes held out inside the videos" \
        in printed
