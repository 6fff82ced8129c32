"""The Python API under the commands: `create_character` and `train` called as functions, on the
example video set with the tests' tiny recipe, return what they wrote and its numbers."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import yaml

from animegamer.characters.registry import load_registry
from animegamer.create import CreateOptions, create_character
from animegamer.create.example import EXAMPLE_CHARACTER, render_shots, write_example
from animegamer.train import TrainOptions, train

TINY_RECIPE = Path("recipes/tiny-cpu.yaml")
SHOTS = 12


@pytest.fixture(scope="module")
def created(tmp_path_factory):
    root = tmp_path_factory.mktemp("api")
    paths = write_example(root / "example", render_shots()[:SHOTS])
    shutil.copy("assets/characters.yaml", root / "characters.yaml")
    shutil.copytree("assets/avatars", root / "avatars")
    said: list[str] = []
    options = CreateOptions(
        videos=paths["videos"], character=EXAMPLE_CHARACTER,
        reference_image=paths["reference"], annotations=paths["answers"], out=root / "kiki",
        recipes=(TINY_RECIPE,), registry=root / "characters.yaml",
    )
    return root, create_character(options, say=said.append), said


def test_create_character_returns_the_folder_it_registered_and_the_training_numbers(created):
    root, result, said = created
    recipe = yaml.safe_load(TINY_RECIPE.read_text())
    assert result.character_dir == root / "kiki" / "run" / "character"
    assert (result.character_dir / "model_index.json").is_file()
    assert result.dataset == root / "kiki" / "dataset"
    assert sum(result.rows.values()) == SHOTS and result.rows["train"] > 0
    decoder_steps = recipe["decoder"]["warmup_steps"] + recipe["decoder"]["joint_steps"]
    assert {phase: steps for phase, (steps, _, _) in result.losses.items()} == {
        "decoder": decoder_steps, "game_state": recipe["game_state"]["steps"],
        "adapt": recipe["adapt"]["steps"],
    }
    listed = load_registry(root / "characters.yaml").get(EXAMPLE_CHARACTER)
    assert (root / listed.converted.repo).resolve() == result.character_dir.resolve()
    assert result.play_command is not None and result.play_command == said[-1]
    assert f"--character {EXAMPLE_CHARACTER}" in result.play_command
    assert set(result.seconds) == {"data", "train"}


def test_train_runs_one_phase_and_says_where_max_steps_stopped(created, tmp_path):
    _, result, _ = created
    said: list[str] = []
    first = train(TINY_RECIPE, result.dataset, tmp_path / "run", phases="decoder",
                  options=TrainOptions(max_steps=1), say=said.append)
    assert first.stopped == "decoder" and first.written == {}
    assert said == ["decoder: stopped by --max-steps; continue with --resume"]
    resumed = train(TINY_RECIPE, result.dataset, tmp_path / "run", phases="decoder",
                    options=TrainOptions(resume=True), say=said.append)
    assert resumed.stopped is None
    assert resumed.written == {"decoder": tmp_path / "run" / "decoder"}
    assert (tmp_path / "run" / "decoder" / "model_index.json").is_file()


def test_train_refuses_an_unknown_phase_before_any_compute(created, tmp_path):
    _, result, _ = created
    with pytest.raises(ValueError, match="phases 'everything'"):
        train(TINY_RECIPE, result.dataset, tmp_path / "run", phases="everything")
    assert not (tmp_path / "run").exists()


def test_build_dataset_refuses_bad_options_before_writing(tmp_path):
    from animegamer.data import BuildOptions, build_dataset
    from animegamer.data.errors import DataError

    paths = write_example(tmp_path / "example", render_shots()[:2])
    options = BuildOptions(videos=paths["videos"], character=EXAMPLE_CHARACTER,
                           reference_image=paths["reference"], out=tmp_path / "dataset")
    with pytest.raises(DataError, match="one of the two"):
        build_dataset(options)
    with pytest.raises(DataError, match="--limit must be at least 1"):
        build_dataset(dataclasses.replace(options, limit=0), annotations=paths["answers"])
    assert not (tmp_path / "dataset").exists()


def test_play_returns_the_game_it_played_and_tells_each_turn(tmp_path):
    from animegamer.play import PlayOptions, play
    from animegamer.serving.settings import EngineKind

    said: list[str] = []
    options = PlayOptions(["quickly run, day town", "gently sit on railing"], out=tmp_path,
                          engine=EngineKind.PREVIEW, seed=5, steps=1, save=tmp_path / "g.zip")
    result = play(options, say=said.append)
    turns = result.session.turns
    assert [turn.instruction.text for turn in turns] == [
        "Character: Qiqi; Motion: quickly run; Background: day town.",
        "Character: Qiqi; Motion: gently sit on railing; Background: day town.",
    ]
    assert [turn.seed for turn in turns] == [5, 6]
    assert all(Path(turn.clip_path).is_file() for turn in turns)
    assert result.saved == tmp_path / "g.zip" and result.saved.is_file()
    assert said[0] == result.casting and result.notice is not None and said[1] == result.notice
    assert [line.split(":")[0] for line in said[2:]] == ["turn 1", "turn 2"]
