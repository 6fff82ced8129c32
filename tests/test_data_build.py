"""`python -m animegamer.data build|show` end to end on generated videos and a fake annotator.

One folder of videos covers the bad inputs too: a file that is no video, a portrait video, a
variable-frame-rate one in a subfolder, one without cuts, a static segment and a too-short one;
the answers file has a nonsense answer, one naming another character, and one shot without an
answer.
"""

from __future__ import annotations

import errno
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from test_data_annotate import GOOD
from test_data_shots import CLIP_SIZE, make_video

from animegamer.data import layout
from animegamer.data.__main__ import main
from animegamer.data.decode import read_clip
from animegamer.data.flow import MotionLevels

FPS = 24
ANSWERS = [
    ("ep1.mp4", 0, {"time": "day", "place": "park", "social": 1}),
    ("ep1.mp4", 60, {"time": "day", "place": "park", "adverb": "happily", "motion": "wave"}),
    ("ep1.mp4", 230, {"character": "Klee"}),
    ("ep2.mp4", 0, {"time": "night", "place": "bedroom", "stamina": 1, "motion": "sleep"}),
    ("ep2.mp4", 51, "Qiqi is flying over the town, I think."),
    ("season2/vfr.mp4", 0, {"time": "evening", "place": "beach"}),
    ("season2/vfr.mp4", 96, {"time": "evening", "place": "beach", "entertainment": 0}),
]
"""(video, start frame at 24 fps, answer changes or raw text); vfr.mp4 at 147 has no answer."""


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sources")
    videos = root / "videos"
    (videos / "season2").mkdir(parents=True)
    # Segments: 2.5 s, ~2.1 s, 3.75 s static, 1.25 s (too short), 2.5 s.
    make_video(videos / "ep1.mp4", [60, 50, 90, 30, 60], speeds=[2, 2, 0, 2, 3])
    make_video(videos / "ep2.mp4", [110])
    make_video(videos / "season2" / "vfr.mp4", [72, 60], vfr_after=48)
    make_video(videos / "portrait.mp4", [60], size=(144, 96))
    (videos / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 8)
    (videos / "notes.txt").write_text("not a video")
    Image.new("RGB", (32, 48), (200, 120, 40)).save(root / "qiqi.png")
    lines = []
    for video, frame, change in ANSWERS:
        answer = change if isinstance(change, str) else {**GOOD, **change}
        lines.append(json.dumps({"video": video, "start": frame / FPS, "answer": answer}))
    (root / "answers.jsonl").write_text("\n".join(lines) + "\n")
    return root


def build_args(sources: Path, out: Path, *extra: str) -> list[str]:
    return [
        "build", "--videos", str(sources / "videos"), "--character", "Qiqi",
        "--reference-image", str(sources / "qiqi.png"), "--out", str(out),
        "--annotations", str(sources / "answers.jsonl"),
        "--size", str(CLIP_SIZE[0]), str(CLIP_SIZE[1]), *extra,
    ]


@pytest.fixture(scope="module")
def built(sources, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("built") / "qiqi"
    assert main(build_args(sources, out, "--features", "tiny")) == 0
    return out


def snapshot(out: Path) -> dict[str, str]:
    """Every file of a dataset but the work records, by content."""
    return {
        path.relative_to(out).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(out.rglob("*"))
        if path.is_file() and not path.relative_to(out).as_posix().startswith(layout.WORK)
    }


def rows_of(out: Path, tmp_path: Path) -> dict[str, list[dict]]:
    import datasets

    loaded = datasets.load_dataset(str(out), cache_dir=str(tmp_path / "hf-cache"))
    return {split: loaded[split].to_list() for split in loaded}


def test_build_writes_a_dataset_that_datasets_loads(built, tmp_path):
    rows = rows_of(built, tmp_path)
    every = sorted((row for split in rows.values() for row in split),
                   key=lambda r: (r["video"], r["start"]))
    assert [(r["video"], round(r["start"] * FPS)) for r in every] == [
        ("ep1.mp4", 0), ("ep1.mp4", 60), ("ep2.mp4", 0),
        ("season2/vfr.mp4", 0), ("season2/vfr.mp4", 96),
    ]
    test_videos = {row["video"] for row in rows.get("test", [])}
    train_videos = {row["video"] for row in rows["train"]}
    assert len(test_videos) == 1 and not test_videos & train_videos
    first = every[0]
    assert first["instruction"] == (
        "Character: Qiqi; Motion: quickly fly on broomstick; Background: day park."
    )
    assert (first["sc"], first["et"], first["st"]) == (1, 1, -1)
    assert [(r["episode_index"]) for r in every[:2]] == [0, 1]
    assert every[0]["episode_id"] == every[1]["episode_id"] != every[2]["episode_id"]
    levels = MotionLevels.from_dict(json.loads((built / layout.LEVELS).read_text()))
    assert all(row["motion_level"] == levels.level(row["motion_scope"]) for row in every)
    clip = read_clip(built / first["clip_path"])
    assert clip.shape == (17, *CLIP_SIZE, 3)
    from safetensors.numpy import load_file

    features = load_file(built / first["features_path"])
    assert features["image_features"].shape == (196, 32)
    assert features["text_features"].shape == (30, 32)
    assert (built / "reference.png").is_file()


def test_parquet_files_load_directly(built, tmp_path):
    import datasets

    files = {s: str(built / f"data/{s}-00000-of-00001.parquet") for s in ("train", "test")}
    loaded = datasets.load_dataset("parquet", data_files=files, cache_dir=str(tmp_path / "c"))
    assert loaded["train"].num_rows + loaded["test"].num_rows == 5


def test_report_says_what_was_skipped_and_why(built):
    report = json.loads((built / layout.REPORT).read_text())
    videos = report["videos"]
    assert set(videos["failed"]) == {"broken.mp4", "portrait.mp4"}
    assert "broken.mp4: not a readable video" in videos["failed"]["broken.mp4"]
    assert "portrait video (96×144)" in videos["failed"]["portrait.mp4"]
    assert videos["no_cuts"] == ["ep2.mp4"]
    assert videos["variable_frame_rate"] == ["season2/vfr.mp4"]
    stages = report["stages"]
    assert (stages["segments"], stages["segments_too_short"]) == (8, 1)
    assert (stages["clips"], stages["static"], stages["shots"]) == (9, 1, 8)
    assert (stages["answered"], stages["annotated"], stages["features"]) == (7, 5, 5)
    assert report["skipped"] == {
        "clips: static": 1, "annotate: another character": 1, "annotate: not json": 1,
        "annotate: no answer": 1,
    }
    reasons = {skip["kind"]: skip for skip in report["skips"]}
    assert reasons["no answer"]["video"] == "season2/vfr.mp4"
    assert reasons["another character"]["reason"] == "the shot shows another character ('Klee')"
    assert sum(report["level_histogram"].values()) == 5
    assert report["vocabulary"]["place"] == {"park": 2, "beach": 2, "bedroom": 1}
    assert report["episodes"] == {"count": 3, "lengths": {"1": 1, "2": 2}}


def test_an_interrupted_build_resumes_to_the_same_dataset(
    sources, built, tmp_path, monkeypatch, capsys
):
    import animegamer.data.build as build_module
    import animegamer.data.extract as extract

    out = tmp_path / "qiqi"
    real_write_mp4, real_write_features = extract.write_mp4, build_module.write_features
    clips, features = [], []

    def disk_full_on_the_third_clip(frames, path, fps):
        if len(clips) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        clips.append(path)
        return real_write_mp4(frames, path, fps)

    monkeypatch.setattr(extract, "write_mp4", disk_full_on_the_third_clip)
    assert main(build_args(sources, out, "--features", "tiny")) == 2
    message = capsys.readouterr().err
    assert "no space left on device writing" in message and "/clips/ep1-" in message
    assert "rerun the same command" in message
    records = [json.loads(line) for line in (out / layout.CLIP_LOG).read_text().splitlines()]
    assert [r["status"] for r in records] == ["kept", "kept", "static"]
    assert all((out / r["clip"]).is_file() for r in records[:2])
    assert not list(out.rglob("*partial*"))
    monkeypatch.undo()

    def stopped_after_two(*args, **kwargs):
        if len(features) == 2:
            raise KeyboardInterrupt
        features.append(real_write_features(*args, **kwargs))

    monkeypatch.setattr(build_module, "write_features", stopped_after_two)
    assert main(build_args(sources, out, "--features", "tiny")) == 130
    assert "rerun the same command" in capsys.readouterr().err
    monkeypatch.undo()
    with (out / layout.CLIP_LOG).open("ab") as log:
        log.write(b'{"shot_id": "torn-off')

    assert main(build_args(sources, out, "--features", "tiny")) == 0
    assert snapshot(out) == snapshot(built)


def test_limit_stops_after_that_many_shots(sources, tmp_path):
    out = tmp_path / "few"
    assert main(build_args(sources, out, "--limit", "2")) == 0
    report = json.loads((out / layout.REPORT).read_text())
    assert report["stages"]["shots"] == 2 and report["videos"]["not_reached"] == 3
    assert sum(report["stages"]["rows"].values()) == 2


def test_worker_processes_build_the_same_rows(sources, built, tmp_path):
    out = tmp_path / "parallel"
    assert main(build_args(sources, out, "--num-proc", "2")) == 0
    strip = lambda rows: [{**r, "features_path": None} for r in rows]  # noqa: E731
    ours, reference = rows_of(out, tmp_path), rows_of(built, tmp_path)
    assert {s: strip(r) for s, r in ours.items()} == {s: strip(r) for s, r in reference.items()}


def test_a_missing_reference_image_is_named(sources, tmp_path, capsys):
    args = build_args(sources, tmp_path / "out")
    args[args.index("--reference-image") + 1] = str(tmp_path / "missing.png")
    assert main(args) == 2
    assert "missing.png: reference image not found" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_build_continues_only_with_the_same_clip_options(sources, built, capsys):
    args = build_args(sources, built)
    args[args.index("--size") + 1 : args.index("--size") + 3] = ["48", "72"]
    assert main(args) == 2
    assert "built with other values of height, width" in capsys.readouterr().err


def test_show_writes_a_contact_sheet_and_statistics(built, tmp_path, capsys):
    png = tmp_path / "sheet.png"
    assert main(["show", str(built), "--png", str(png)]) == 0
    text = capsys.readouterr().out
    assert "rows: train" in text and "motion level" in text and "skipped:" in text
    with Image.open(png) as sheet:
        assert sheet.width == 4 * (240 + 8) and sheet.height > 160
        pixels = np.asarray(sheet)
    assert (pixels < 128).any()


def test_show_refuses_a_folder_without_a_dataset(tmp_path, capsys):
    assert main(["show", str(tmp_path)]) == 2
    assert "no dataset here" in capsys.readouterr().err
