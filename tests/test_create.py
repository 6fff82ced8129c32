"""`python -m animegamer.create`: bad input is one line (exit 2) that names the file, and
nothing written before is touched; answers keyed by true start times all match on a 10 fps
video; the registry entry's path is relative to the registry file; the printed play line runs
verbatim in a fresh shell from another folder."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import imageio_ffmpeg
import numpy as np
import pytest
import yaml

from animegamer.characters.conversion.character import write_manifest
from animegamer.characters.registry import load_registry
from animegamer.create.__main__ import main
from animegamer.create.example import render_shots
from animegamer.create.pipeline import CreateOptions, play_command
from animegamer.create.register import entry, register, registry_path_of
from animegamer.data.__main__ import main as data_main
from animegamer.serving.loading import build_preview_directory
from animegamer.video.writer import write_mp4

REPO_ROOT = Path(__file__).resolve().parents[1]
TEN_FPS_SHOTS = (27, 23, 31, 25, 24)
"""Frames of each shot of the 10 fps video: starts at 0, 2.7, 5.0, 8.1 and 10.6 s (2.708,
5.0, 8.083 and 10.583 on the 1/24 s grid the build reads at: ffmpeg takes the nearest frame)."""


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def ten_fps(tmp_path_factory) -> Path:
    """A 10 fps video of Nano shots on two backgrounds, and answers keyed by the true starts
    (the last shot has none, and one answer is for a time where no shot starts)."""
    root = tmp_path_factory.mktemp("tenfps")
    shots = render_shots()[: len(TEN_FPS_SHOTS)]
    frames, starts = [], []
    for shot, length in zip(shots, TEN_FPS_SHOTS, strict=True):
        starts.append(sum(len(f) for f in frames) / 10)
        picks = np.minimum(np.arange(length) * 8 // 10, len(shot.frames) - 1)
        frames.append(shot.frames[picks])
    video = write_mp4(np.concatenate(frames), root / "videos" / "ten.mp4", fps=10)
    whole = video.read_bytes()  # write_mp4 puts the index first ("fast start")
    (root / "videos" / "cut-fast-start.mp4").write_bytes(whole[: len(whole) // 2])
    index_last = root / "index-last.mp4"
    writer = imageio_ffmpeg.write_frames(str(index_last), (96, 64), fps=10, macro_block_size=2)
    writer.send(None)
    for frame in np.concatenate(frames):
        writer.send(frame)
    writer.close()
    data = index_last.read_bytes()
    (root / "videos" / "cut-index-last.mp4").write_bytes(data[: len(data) // 2])
    shutil.copy(Path("assets/avatars/qiqi.png"), root / "kiki.png")
    lines = []
    for shot, start in list(zip(shots, starts, strict=True))[:-1]:
        fields = shot.instruction.fields()
        answer = {"character_present": True, **fields, "social": 0, "entertainment": 0,
                  "stamina": 1}
        lines.append({"video": "ten.mp4", "start": start, "answer": answer})
    lines.append({"video": "ten.mp4", "start": 20.0, "answer": "late"})
    (root / "answers.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return root


def test_answers_keyed_by_true_starts_all_match_on_a_10_fps_video(ten_fps, tmp_path, capsys):
    out = tmp_path / "dataset"
    args = ["build", "--videos", str(ten_fps / "videos"), "--character", "Kiki",
            "--reference-image", str(ten_fps / "kiki.png"), "--annotations",
            str(ten_fps / "answers.jsonl"), "--out", str(out), "--size", "64", "96"]
    assert data_main(args) == 2  # 1 answer of 5 matches no shot: more than a tenth
    assert "1 of 5 answers in" in capsys.readouterr().err
    assert data_main([*args, "--allow-unmatched"]) == 0
    report = json.loads((out / "report.json").read_text())
    answers = report["answers"]
    without = [s["start"] for s in answers["shots_without_answer"] if s["video"] == "ten.mp4"]
    assert len(without) == 1 and answers["matched"] == len(TEN_FPS_SHOTS) - 1
    assert [(m["line"], m["start"]) for m in answers["unmatched"]] == [(5, 20.0)]
    assert without == [10.583333]
    assert [round(c["start"], 3) for c in report["videos"]["cuts"]["ten.mp4"]] == [
        2.708, 5.0, 8.083, 10.583]
    videos = report["videos"]
    assert "cut-fast-start.mp4: truncated" in videos["partial"]["cut-fast-start.mp4"]
    assert "cut-index-last.mp4: not a readable video" in videos["failed"]["cut-index-last.mp4"]
    printed = capsys.readouterr().out
    assert "1 answers matched no shot" in printed and "line 5 (ten.mp4 at 20.0 s)" in printed
    assert "1 partial" in printed and "cut-fast-start.mp4: truncated" in printed
    template = [json.loads(line) for line in (out / "answers_template.jsonl").read_text()
                .splitlines()]
    assert [(t["video"], t["start"], t["end"]) for t in template if t["video"] == "ten.mp4"][
        :2] == [("ten.mp4", 0.0, 2.0), ("ten.mp4", 2.708333, 4.708333)]
    assert set(template[0]["answer"]) >= {"motion", "stamina"}
    assert template[0]["answer"]["motion"] == "" and template[0]["answer"]["stamina"] is None


def create_args(root: Path, out: Path, *extra: str) -> list[str]:
    return ["--videos", str(root / "videos"), "--character", "Kiki", "--reference-image",
            str(root / "kiki.png"), "--annotations", str(root / "answers.jsonl"),
            "--out", str(out), *extra]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ("no videos folder", r"nowhere: no such folder of videos"),
        ("empty videos folder", r"empty: no videos"),
        ("no reference image", r"gone\.png: reference image not found"),
        ("bad answers line", r"answers\.jsonl, line 2: not JSON"),
        ("recipe without data", r"recipe\.yaml: the recipe has no 'data' section"),
        ("registry name taken", r"already lists a character named Qiqi"),
    ],
)
def test_bad_input_is_one_line_and_nothing_is_touched(ten_fps, tmp_path, capsys, change,
                                                      expected):
    root = tmp_path / "inputs"
    shutil.copytree(ten_fps, root)
    out = tmp_path / "out"
    (out / "dataset").mkdir(parents=True)
    (out / "dataset" / "earlier.txt").write_text("an earlier output")
    registry = tmp_path / "characters.yaml"
    shutil.copy("assets/characters.yaml", registry)
    shutil.copytree("assets/avatars", tmp_path / "avatars")
    extra = ["--register", str(registry)]
    args = create_args(root, out, *extra)
    if change == "no videos folder":
        args[1] = str(root / "nowhere")
    elif change == "empty videos folder":
        (root / "empty").mkdir()
        args[1] = str(root / "empty")
    elif change == "no reference image":
        args[5] = str(root / "gone.png")
    elif change == "bad answers line":
        lines = (root / "answers.jsonl").read_text().splitlines()
        (root / "answers.jsonl").write_text("\n".join([lines[0], "{oops", *lines[1:]]) + "\n")
    elif change == "recipe without data":
        recipe = yaml.safe_load(Path("recipes/tiny-cpu.yaml").read_text())
        (root / "recipe.yaml").write_text(yaml.safe_dump({**recipe, "data": None}))
        args += ["--recipe", str(root / "recipe.yaml")]
    else:
        args[3] = "Qiqi"
    before = snapshot(tmp_path)
    assert main(args) == 2
    captured = capsys.readouterr()
    error = captured.err.strip()
    assert len(error.splitlines()) == 1 and error.startswith("error: ")
    assert re.search(expected, error), error
    assert snapshot(tmp_path) == before


def test_real_towers_without_network_are_one_line_naming_the_repo(ten_fps, tmp_path, capsys,
                                                                   monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    out = tmp_path / "out"
    args = create_args(ten_fps, out, "--recipe", "recipes/paper-decoder.yaml")
    assert main(args) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert "laion/CLIP-ViT-B-16-laion2B-s34B-b88K" in error and "network access" in error
    assert not out.exists()


def test_the_entry_points_at_the_folder_relative_to_the_registry(tmp_path):
    registry = tmp_path / "reg" / "characters.yaml"
    registry.parent.mkdir()
    shutil.copy("assets/characters.yaml", registry)
    shutil.copytree("assets/avatars", registry.parent / "avatars")
    character = tmp_path / "runs" / "kiki" / "character"
    character.mkdir(parents=True)
    assert registry_path_of(character, registry) == "../runs/kiki/character"
    rows = [{"adverb": "slowly", "motion": "walk", "time": "day", "place": "town"},
            {"adverb": "slowly", "motion": "walk", "time": "day", "place": "town"},
            {"adverb": "gently", "motion": "jump", "time": "day", "place": "town"}]
    new = entry("Kiki", character, registry, rows)
    assert register(registry, new) is True
    assert register(registry, new) is False  # the same character again: nothing to do
    kiki = load_registry(registry).get("Kiki")
    assert kiki.converted is not None and Path(kiki.converted.repo) == character.resolve()
    assert [e.motion for e in kiki.examples] == ["jump"]
    text = registry.read_text()
    assert text.startswith("# AnimeGamer character registry")  # comments kept
    assert yaml.safe_load(text)["characters"][-1]["weights"] == {
        "converted": {"repo": "../runs/kiki/character"}}


def test_the_printed_play_line_runs_verbatim_in_a_fresh_shell_from_another_folder(
    tmp_path, monkeypatch
):
    """What `create` prints last, typed with relative paths: run by `sh` with nothing of this
    process's environment (no virtual environment on PATH, no ANIMEGAMER_* variables) from
    another folder, it plays the creator's own first instructions with the trained weights."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reg").mkdir()
    shutil.copy(REPO_ROOT / "assets" / "characters.yaml", "reg/characters.yaml")
    shutil.copytree(REPO_ROOT / "assets" / "avatars", "reg/avatars")
    options = CreateOptions(videos=Path("videos"), character="Kiki",
                            reference_image=Path("kiki.png"), out=Path("runs/kiki"),
                            registry=Path("reg/characters.yaml"))
    build_preview_directory(options.character_dir)  # tiny models, as a trained folder holds
    write_manifest(options.character_dir, "Kiki", {"dataset": {"path": "runs/kiki/dataset"}})
    rows = [{"adverb": "slowly", "motion": "walk", "time": "day", "place": "town"},
            {"adverb": "slowly", "motion": "walk", "time": "day", "place": "town"},
            {"adverb": "gently", "motion": "jump", "time": "day", "place": "town"},
            {"adverb": "quickly", "motion": "run", "time": "evening", "place": "street"},
            {"adverb": "calmly", "motion": "sit", "time": "night", "place": "grass"}]
    register(options.registry, entry("Kiki", options.character_dir, options.registry, rows))

    line = play_command(options, rows)
    assert f"{shlex.quote(sys.executable)} -m animegamer play --character Kiki" in line
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    fresh = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home")}
    done = subprocess.run(["/bin/sh", "-c", line], cwd=elsewhere, env=fresh,
                          capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr
    played = done.stdout
    assert played.startswith("Kiki: ") and "(trained, CPU)" in played.splitlines()[0]
    assert [t for t in played.splitlines() if t.startswith("turn ")] == [
        "turn 1: Character: Kiki; Motion: slowly walk; Background: day town.",
        "turn 2: Character: Kiki; Motion: gently jump; Background: day town.",
        "turn 3: Character: Kiki; Motion: quickly run; Background: evening street.",
    ]
    assert len(list((tmp_path / "runs" / "kiki" / "play").rglob("*.mp4"))) == 3
    assert not list(elsewhere.iterdir())
