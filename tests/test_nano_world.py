"""The Nano world: vocabulary, rendering, physics, continuity, state labels, and the dataset it
writes (the data pipeline's format, read by `read_rows`, `datasets` and `data show`)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file
from transformers import CLIPVisionModel

from animegamer.characters.registry import load_registry
from animegamer.data import dataset, layout
from animegamer.data.__main__ import main as data_main
from animegamer.data.flow import MotionLevels, motion_scope
from animegamer.game.rules import make_instruction
from animegamer.models.shot_encoder import clip_pixel_values, image_features
from animegamer.models.tiny_shot_encoder import tiny_shot_towers
from animegamer.nano import NANO_VOCABULARY
from animegamer.nano.__main__ import main as nano_main
from animegamer.nano.renderer import (
    CLIMB,
    MAX_TRAVEL,
    NanoRenderer,
    RenderedShot,
    WorldState,
    state_labels,
)
from animegamer.nano.scene import luminance
from animegamer.nano.sprites import sprite_mask
from animegamer.nano.vocabulary import MOTIONS, PLACES, TIMES
from animegamer.nano.world import (
    TOWER_DIR,
    TOWER_WIDTH,
    EpisodeRules,
    WorldOptions,
    first_state,
    random_instructions,
    render_episode,
    world_shots,
)

REPO = Path(__file__).resolve().parents[1]
WORLD_ARGS = ["--shots", "10", "--seed", "3", "--episode-length", "4", "--tower-steps", "5"]


def _render(character: str, adverb: str, motion: str, time_: str = "day", place: str = "grass",
            altitude: float = 0.0, x: float = 40.0) -> RenderedShot:
    instruction = make_instruction({"character": character, "adverb": adverb, "motion": motion,
                                    "time": time_, "place": place})
    return NanoRenderer().render(instruction, WorldState(x, altitude, 1, time_, place))


def _centre(shot: RenderedShot, frame: int) -> tuple[float, float]:
    """(x, y) centre of the sprite's pixels in a frame, measured against the background."""
    ys, xs = np.nonzero(sprite_mask(shot.frames[frame], shot.background))
    assert len(ys) > 20, "the sprite is not visible"
    return float(xs.mean()), float(ys.mean())


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    worlds = tmp_path_factory.mktemp("nano") / "worlds"
    out = worlds / "qiqi"  # one dataset per character: Qiqi's
    started = time.perf_counter()
    code = nano_main(["world", "--out", str(worlds), "--characters", "Qiqi", *WORLD_ARGS])
    print(f"world of 10 shots written in {time.perf_counter() - started:.1f} s")
    assert code == 0
    return out, "3"


def test_vocabulary_sizes_and_the_registry_and_examples_words() -> None:
    assert len(NANO_VOCABULARY.motions) >= 10 and len(NANO_VOCABULARY.adverbs) >= 6
    assert len(NANO_VOCABULARY.times) >= 4 and len(NANO_VOCABULARY.places) >= 8
    instructions = []
    for character in load_registry().characters:
        instructions += [character.defaults, *character.examples]
    for path in sorted((REPO / "examples").glob("*.json")):
        instructions += [make_instruction(t) for t in json.loads(path.read_text())["turns"]]
    for instruction in instructions:
        assert NANO_VOCABULARY.motion(instruction.motion) is not None, instruction.motion
        assert NANO_VOCABULARY.place(instruction.place) is not None, instruction.place
    assert NANO_VOCABULARY.motion("run along the road").name == "run"
    assert NANO_VOCABULARY.motion("walk through the trees").name == "walk"
    assert NANO_VOCABULARY.motion("run to school").name == "run"
    assert NANO_VOCABULARY.motion("eat ramen") is None
    assert NANO_VOCABULARY.adverb("QUICKLY").name == "quickly"


def test_unknown_words_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="motion 'eat ramen'"):
        _render("Qiqi", "quickly", "eat ramen")
    with pytest.raises(ValueError, match="sprite for 'Totoro'"):
        _render("Totoro", "quickly", "walk")


def test_shot_shape_and_render_time() -> None:
    shot = _render("Sosuke", "happily", "run along the road", place="seaside town")
    assert shot.frames.shape == (17, 64, 96, 3) and shot.frames.dtype == np.uint8
    renderer = NanoRenderer()
    instructions = random_instructions(np.random.default_rng(0), "Qiqi", 100)
    started = time.perf_counter()
    shots = list(render_episode(renderer, instructions, first_state(np.random.default_rng(0),
                                                                    instructions[0])))
    seconds = time.perf_counter() - started
    print(f"rendered 100 shots in {seconds:.2f} s ({100 / seconds:.0f} shots/s)")
    assert len(shots) == 100


def test_characters_differ_in_colour_and_silhouette() -> None:
    qiqi, sosuke = _render("Qiqi", "gently", "wave hand"), _render("Sosuke", "gently", "wave hand")
    masks = [sprite_mask(s.frames[0], s.background) for s in (qiqi, sosuke)]
    qiqi_colour, sosuke_colour = (s.frames[0][m].mean(axis=0) for s, m in zip((qiqi, sosuke),
                                                                               masks, strict=True))
    assert np.abs(qiqi_colour - sosuke_colour).max() > 40
    assert (masks[0] ^ masks[1]).sum() > 0.2 * masks[0].sum()
    red = (qiqi.frames[0][..., 0] > 200) & (qiqi.frames[0][..., 1] < 60) & masks[0]
    assert red.sum() >= 8, "Qiqi's red bow"


def test_night_is_darker_than_day_everywhere() -> None:
    for place in PLACES:
        day = _render("Qiqi", "slowly", "walk", "day", place.name)
        night = _render("Qiqi", "slowly", "walk", "night", place.name)
        assert luminance(night.frames) < 0.6 * luminance(day.frames), place.name
    brightness = {t.name: luminance(_render("Sosuke", "calmly", "sit", t.name, "town").frames)
                  for t in TIMES}
    assert brightness["day"] > brightness["evening"] > brightness["night"]
    assert min(brightness, key=brightness.__getitem__) == "night"


def test_flying_is_high_and_sitting_and_lying_are_low() -> None:
    flying = _render("Qiqi", "smoothly", "fly on broomstick", place="countryside")
    takeoff_y = _centre(flying, 0)[1]
    high = np.mean([_centre(flying, f)[1] for f in range(8, 17)])
    low = {m: np.mean([_centre(_render("Qiqi", "gently", m), f)[1] for f in range(17)])
           for m in ("sit", "lie down")}
    standing = np.mean([_centre(_render("Qiqi", "gently", "turn head"), f)[1] for f in range(17)])
    assert high < 32 < standing < low["sit"] < low["lie down"]
    assert takeoff_y > high + 15, "a flight from the ground takes off within the shot"


def test_quick_moves_more_than_slow() -> None:
    for character, motion in (("Sosuke", "walk"), ("Sosuke", "run"), ("Qiqi", "wave hand"),
                              ("Sosuke", "sit"), ("Qiqi", "fly on broomstick")):
        altitude = 30.0 if motion.startswith("fly") else 0.0
        slow = motion_scope(_render(character, "slowly", motion, altitude=altitude).frames)
        quick = motion_scope(_render(character, "quickly", motion, altitude=altitude).frames)
        assert quick > 1.3 * slow > 0, (motion, slow, quick)


def test_consecutive_shots_continue_each_other() -> None:
    rng = np.random.default_rng(7)
    renderer = NanoRenderer()
    for character in ("Qiqi", "Sosuke"):
        instructions = random_instructions(rng, character, 12)
        shots = list(render_episode(renderer, instructions, first_state(rng, instructions[0])))
        for shot in shots:
            steps = np.abs(np.diff(shot.anchors, axis=0))
            assert steps[:, 0].max() <= MAX_TRAVEL + 1e-6 and steps[:, 1].max() <= CLIMB + 1e-6
        for before, after in itertools.pairwise(shots):
            assert np.abs(before.anchors[-1] - after.anchors[0]).max() <= 1e-9
            assert (after.start.x, after.start.altitude) == (before.end.x, before.end.altitude)
            if not (before.motion.sc or after.motion.sc):
                same = (before.end.place, before.end.time) == (after.end.place, after.end.time)
                assert same == np.array_equal(before.background, after.background)
            if before.motion.posture == after.motion.posture == "stand" and not after.motion.sc:
                measured = np.subtract(_centre(before, -1), _centre(after, 0))
                assert np.abs(measured).max() <= 2.0


def test_place_and_time_persist_unless_changed() -> None:
    rng = np.random.default_rng(1)
    still = random_instructions(rng, "Sosuke", 30, EpisodeRules(place_change=0, time_change=0))
    assert len({i.place for i in still}) == 1 and len({i.time for i in still}) == 1
    moving = random_instructions(rng, "Qiqi", 200)
    changes = sum(a.place != b.place for a, b in itertools.pairwise(moving))
    assert 20 < changes < 120
    assert all(NANO_VOCABULARY.motion(i.motion).posture == "fly" for i in moving
               if NANO_VOCABULARY.place(i.place).name == "sky")


def test_state_labels_follow_the_rules() -> None:
    labels = {m.name: state_labels(m) for m in MOTIONS}
    for effort in ("fly on broomstick", "run", "jump"):
        assert labels[effort][2] == -1
    for rest in ("sit", "lie down"):
        assert labels[rest][2] == 1
    for social in ("wave hand", "talk"):
        assert labels[social][0] == 1
    for play in ("fly on broomstick", "jump", "dance"):
        assert labels[play][1] == 1
    assert all(sc in (0, 1) and et in (0, 1) and st in (-1, 1) for sc, et, st in labels.values())


def test_world_is_deterministic_for_a_seed(tmp_path: Path) -> None:
    def shots(seed: int) -> list:
        return list(world_shots(WorldOptions(out=tmp_path, shots=6, seed=seed, episode_length=3)))

    first, again, other = shots(5), shots(5), shots(6)
    assert [r.shot.instruction for r in first] == [r.shot.instruction for r in again]
    assert all(np.array_equal(a.shot.frames, b.shot.frames) for a, b in zip(first, again,
                                                                             strict=True))
    assert [r.shot.instruction for r in first] != [r.shot.instruction for r in other]


def test_dataset_rows_follow_the_pipeline(world: tuple[Path, str]) -> None:
    out, _ = world
    rows = dataset.read_rows(out)
    every = [row for split in rows.values() for row in split]
    assert set(rows) == {"train", "test"} and len(every) == 10
    assert all(set(row) == set(dataset.row_features()) for row in every)
    assert not {r["video"] for r in rows["train"]} & {r["video"] for r in rows["test"]}
    levels = MotionLevels.from_dict(json.loads((out / layout.LEVELS).read_text()))
    for row in every:
        fields = {k: row[k] for k in ("character", "adverb", "motion", "time", "place")}
        assert row["instruction"] == make_instruction(fields).text
        assert row["motion_level"] == levels.level(row["motion_scope"])
        assert (row["sc"], row["et"], row["st"]) == state_labels(
            NANO_VOCABULARY.motion(row["motion"]))
        assert (out / row["clip_path"]).is_file()
        features = load_file(str(out / row["features_path"]))
        assert features["image_features"].shape == (196, 32)
        assert features["text_features"].shape == (30, 32)
    episodes: dict[str, list[int]] = {}
    for row in every:
        episodes.setdefault(row["episode_id"], []).append(row["episode_index"])
    assert sorted(sorted(i) for i in episodes.values()) == [[0, 1], [0, 1, 2, 3], [0, 1, 2, 3]]
    assert {row["character"] for row in every} == {"Qiqi"}
    for name in ("reference.png", "reference-qiqi.png"):
        assert (out / name).is_file()
    assert not (out / "reference-sosuke.png").exists()


def test_dataset_is_the_seed_s_world_with_measured_scopes(world: tuple[Path, str]) -> None:
    out, seed = world
    rendered = list(world_shots(WorldOptions(out=out, shots=10, seed=int(seed),
                                             episode_length=4, characters=("Qiqi",))))
    rows = {r["shot_id"]: r for split in dataset.read_rows(out).values() for r in split}
    assert sorted(rows) == sorted(row.shot_id for row in rendered)
    for row in rendered:
        assert rows[row.shot_id]["instruction"] == row.shot.instruction.text
    for row in rendered[:2]:
        assert rows[row.shot_id]["motion_scope"] == motion_scope(row.shot.frames)
    tower = CLIPVisionModel.from_pretrained(out / TOWER_DIR).eval()
    random_tower = tiny_shot_towers(TOWER_WIDTH, int(seed)).image_encoder
    first_frames = np.stack([row.shot.frames[0] for row in rendered[:2]])
    with torch.no_grad():
        expected = image_features(tower, clip_pixel_values(first_frames)).numpy()
        untrained = image_features(random_tower, clip_pixel_values(first_frames)).numpy()
    for index, row in enumerate(rendered[:2]):
        stored = load_file(str(out / rows[row.shot_id]["features_path"]))["image_features"]
        np.testing.assert_allclose(stored, expected[index], atol=1e-5)
        assert np.abs(stored - untrained[index]).max() > 1e-3


def test_dataset_loads_with_datasets_and_shows(world: tuple[Path, str], tmp_path: Path) -> None:
    from datasets import load_dataset

    out, _ = world
    files = {s: str(out / dataset.split_file(s)) for s in dataset.SPLITS}
    loaded = load_dataset("parquet", data_files=files, cache_dir=str(tmp_path / "cache"))
    assert loaded["train"].features == dataset.row_features()
    assert len(loaded["train"]) + len(loaded["test"]) == 10
    report = json.loads((out / layout.REPORT).read_text())
    assert report["world"]["seed"] == 3 and report["stages"]["shots"] == 10
    png = tmp_path / "sheet.png"
    assert data_main(["show", str(out), "--png", str(png), "--count", "4"]) == 0
    assert png.stat().st_size > 0


def test_world_refuses_a_folder_that_is_not_a_world(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "qiqi").mkdir()
    (tmp_path / "qiqi" / "notes.txt").write_text("mine")
    assert nano_main(["world", "--out", str(tmp_path), "--shots", "1"]) == 2
    assert "holds no Nano world" in capsys.readouterr().err
    assert (tmp_path / "qiqi" / "notes.txt").read_text() == "mine"
    assert nano_main(["world", "--out", str(tmp_path / "w"), "--shots", "0"]) == 2
    assert "--shots" in capsys.readouterr().err


def test_options_are_plain_dataclasses() -> None:
    assert dataclasses.asdict(EpisodeRules()) == {"place_change": 0.25, "time_change": 0.2}
