"""Bad input to `python -m animegamer.train`: a one-line error before any compute (an empty or
mismatched dataset, a resume under another recipe), and a run that stops on a NaN loss keeping
its last good checkpoint (phase a's loop and phase b's)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from tiny_dataset import write_tiny_dataset

from animegamer.data.dataset import read_rows, split_file
from animegamer.models.shot_encoder import AnimeGamerShotEncoder
from animegamer.train import decoder_phase, game_state_phase
from animegamer.train.__main__ import main
from animegamer.train.checks import digest, field_default, phase_settings
from animegamer.train.decoder_samples import read_features
from animegamer.train.loop import losses_path, read_losses
from animegamer.train.recipe import Recipe, load_recipe
from animegamer.video.writer import write_mp4

pytestmark = pytest.mark.usefixtures("one_torch_thread")

REPO = Path(__file__).resolve().parents[1]
TINY_RECIPE = REPO / "recipes" / "tiny-cpu.yaml"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two train shots (one episode) and a test episode."""
    return write_tiny_dataset(tmp_path_factory.mktemp("data") / "dataset", shots=2)


def run(command: str, dataset: Path, out: Path, *extra: str, config: Path = TINY_RECIPE) -> int:
    return main([command, "--dataset", str(dataset), "--out", str(out), "--config", str(config),
                 *extra])


def one_line_error(capsys: pytest.CaptureFixture) -> str:
    """The error line, the last of stderr (before it: progress bars of the dataset writer)."""
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("error: ")]
    assert errors == err[-1:], err
    return errors[0]


def copy(dataset: Path, to: Path) -> Path:
    return Path(shutil.copytree(dataset, to))


def recipe_with(tmp_path: Path, name: str, **sections: dict) -> Path:
    """tiny-cpu.yaml with some fields of its sections replaced."""
    recipe = yaml.safe_load(TINY_RECIPE.read_text())
    for section, fields in sections.items():
        if section == "top":
            recipe.update(fields)
        else:
            recipe[section].update(fields)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(recipe))
    return path


def save_random_encoder(dataset: Path, out: Path) -> None:
    """OUT/decoder/shot_encoder as phase a leaves it, for phase b alone."""
    text, image = read_features(dataset, read_rows(dataset)["train"][0])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        encoder = AnimeGamerShotEncoder(text.shape[-1], image.shape[-1], width=64)
    encoder.save_pretrained(out / "decoder" / "shot_encoder")


@pytest.mark.parametrize("command", ["decoder", "game-state", "all"])
def test_an_empty_dataset_or_one_without_a_train_split_is_refused(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture, command: str
) -> None:
    (tmp_path / "empty").mkdir()
    assert run(command, tmp_path / "empty", tmp_path / "out") == 2
    assert "no train split rows" in one_line_error(capsys)
    no_train = copy(dataset, tmp_path / "no-train")
    (no_train / split_file("train")).unlink()
    assert run(command, no_train, tmp_path / "out") == 2
    assert f"{no_train}: no train split rows" in one_line_error(capsys)
    assert run(command, tmp_path / "nowhere", tmp_path / "out") == 2
    assert "no such dataset folder" in one_line_error(capsys)
    assert not (tmp_path / "out" / "latents").exists()


def test_clips_of_another_frame_count_are_refused_before_encoding(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    short = copy(dataset, tmp_path / "short")
    clip = short / read_rows(short)["train"][0]["clip_path"]
    write_mp4(np.zeros((9, 64, 96, 3), np.uint8), clip, fps=8)
    assert run("decoder", short, tmp_path / "out") == 2
    message = one_line_error(capsys)
    assert f"{clip}: 9 frames" in message and "clips of 17" in message
    assert not (tmp_path / "out" / "latents").exists()
    # phase b reads features only: the clips do not matter to it
    save_random_encoder(short, tmp_path / "b")
    recipe = recipe_with(tmp_path, "b.yaml", game_state={"steps": 1})
    assert run("game-state", short, tmp_path / "b", config=recipe) == 0


def test_missing_features_are_refused(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    without = write_tiny_dataset(tmp_path / "without", shots=2, features=False)
    assert run("game-state", without, tmp_path / "out") == 2
    assert "has no cached features (build the dataset with features)" in one_line_error(capsys)
    gone = copy(dataset, tmp_path / "gone")
    features = gone / read_rows(gone)["train"][1]["features_path"]
    features.unlink()
    assert run("decoder", gone, tmp_path / "out") == 2
    assert f"{features}: missing" in one_line_error(capsys)
    from safetensors.torch import save_file

    save_file({"text_features": torch.zeros(30, 32)}, str(features))
    assert run("adapt", gone, tmp_path / "out") == 2
    assert f"{features}: no image_features tensor" in one_line_error(capsys)


def test_a_character_not_in_the_data_is_refused(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert run("all", dataset, tmp_path / "out", "--name", "Kiki") == 2
    assert f"{dataset}: no train shot of Kiki (its characters: Qiqi)" in one_line_error(capsys)
    assert not (tmp_path / "out" / "latents").exists()


def test_game_state_recipe_errors_come_before_phase_a(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    recipe = recipe_with(tmp_path, "bad.yaml", game_state={"lora_dropout": 2.0, "lr_x": 1})
    assert run("all", dataset, tmp_path / "out", config=recipe) == 2
    message = one_line_error(capsys)
    assert "game_state.lora_dropout" in message and "game_state.lr_x" in message
    assert not (tmp_path / "out" / "latents").exists()


def test_missing_init_folders_are_refused_before_phase_a(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    paper = [str(REPO / "recipes" / f"paper-{phase}.yaml")
             for phase in ("decoder", "game-state", "adapt")]
    argv = ["all", "--dataset", str(dataset), "--out", str(tmp_path / "out")]
    assert main([*argv, *(arg for path in paper for arg in ("--config", path))]) == 2
    assert "decoder.init.pipeline: converted/Qiqi has no model_index.json" in one_line_error(
        capsys)
    recipe = recipe_with(tmp_path, "llm.yaml", game_state={"init": {"base_llm": "no/mistral"}})
    assert run("all", dataset, tmp_path / "out", config=recipe) == 2
    assert "game_state.init.base_llm: no/mistral has no config.json" in one_line_error(capsys)
    assert not (tmp_path / "out" / "latents").exists()


def test_resume_under_another_recipe_is_refused_naming_both(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "out"
    first = recipe_with(tmp_path, "first.yaml")
    assert run("decoder", dataset, out, "--max-steps", "1", config=first) == 0
    record = yaml.safe_load((out / "checkpoints" / "decoder" / "recipe.json").read_text())
    assert record["recipe"] == str(first) and len(record["digest"]) == 16
    capsys.readouterr()
    other = recipe_with(tmp_path, "other.yaml", decoder={"lr": 5e-4}, top={"seed": 1})
    assert run("decoder", dataset, out, "--resume", config=other) == 2
    message = one_line_error(capsys)
    assert str(first) in message and str(other) in message
    assert "differ in decoder.lr, seed" in message
    # what does not change the result may change; the recipe's own file name too
    logging = recipe_with(tmp_path, "renamed.yaml", top={"log_every": 2},
                          game_state={"checkpoint_every": 5})
    assert phase_settings(load_recipe(logging), "game_state") == phase_settings(
        load_recipe(first), "game_state")
    assert run("decoder", dataset, out, "--resume", "--max-steps", "2", config=logging) == 0
    # a phase without checkpoints takes the new recipe
    assert run("adapt", dataset, out, "--resume", config=other) == 2  # phase a unfinished
    assert "not a pipeline folder" in one_line_error(capsys)
    record = yaml.safe_load((out / "checkpoints" / "adapt" / "recipe.json").read_text())
    assert record["recipe"] == str(other)


def test_a_field_added_since_the_checkpoints_resumes_at_its_default(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Checkpoints made before a recipe field existed were made as its default behaves: their
    `recipe.json` lacks the field, and a resume at the default goes on, one off it does not."""
    out = tmp_path / "out"
    first = recipe_with(tmp_path, "first.yaml")
    assert run("decoder", dataset, out, "--max-steps", "1", config=first) == 0
    path = out / "checkpoints" / "decoder" / "recipe.json"
    record = json.loads(path.read_text())
    tiny = record["settings"]["decoder"]["init"]["tiny"]
    assert tiny.pop("reference_channels") == 0
    record["digest"] = digest(record["settings"])
    path.write_text(json.dumps(record))
    assert field_default(Recipe, ["decoder", "init", "tiny", "reference_channels"]) == 0
    assert run("decoder", dataset, out, "--resume", "--max-steps", "2", config=first) == 0
    capsys.readouterr()
    init = {"init": {"tiny": {**tiny, "reference_channels": 3}}}
    changed = recipe_with(tmp_path, "changed.yaml", decoder=init)
    assert run("decoder", dataset, out, "--resume", "--max-steps", "3", config=changed) == 2
    assert "differ in decoder.init.tiny.reference_channels" in one_line_error(capsys)


def nan_from(call: int, original):
    """`original` whose result is NaN from its `call`-th call on."""
    calls = []

    def patched(*args, **kwargs):
        calls.append(1)
        result = original(*args, **kwargs)
        if len(calls) < call:
            return result
        if isinstance(result, tuple):
            return tuple(r * float("nan") for r in result)
        return result * float("nan")

    return patched


def test_a_nan_loss_stops_phase_a_keeping_the_last_good_checkpoint(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "out"
    monkeypatch.setattr(decoder_phase, "v_prediction_loss",
                        nan_from(3, decoder_phase.v_prediction_loss))
    assert run("decoder", dataset, out) == 2
    message = one_line_error(capsys)
    kept = out / "checkpoints" / "decoder" / "step-00000002"
    assert "decoder: the loss is nan at step 3" in message
    assert f"the last good checkpoint, {kept}, is kept" in message
    assert sorted(p.name for p in kept.parent.glob("step-*")) == [kept.name]
    assert [r["step"] for r in read_losses(losses_path(out, "decoder"))] == [1, 2]
    assert not (out / "decoder").exists()
    monkeypatch.undo()
    assert run("decoder", dataset, out, "--resume") == 0  # continues from the kept checkpoint
    assert [r["step"] for r in read_losses(losses_path(out, "decoder"))] == [1, 2, 3, 4, 5]


def test_a_nan_loss_stops_phase_b_keeping_the_last_good_checkpoint(
    dataset: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "out"
    save_random_encoder(dataset, out)
    recipe = recipe_with(tmp_path, "b.yaml",
                         game_state={"steps": 3, "checkpoint_every": 1, "keep_checkpoints": 5})
    # batch 2: the 3rd window is step 2's first
    monkeypatch.setattr(game_state_phase, "window_losses",
                        nan_from(3, game_state_phase.window_losses))
    assert run("game-state", dataset, out, config=recipe) == 2
    message = one_line_error(capsys)
    kept = out / "checkpoints" / "game_state" / "step-00000001"
    assert "game_state: the loss is nan at step 2" in message
    assert f"the last good checkpoint, {kept}, is kept" in message
    assert sorted(p.name for p in kept.parent.glob("step-*")) == [kept.name]
    assert [r["step"] for r in read_losses(losses_path(out, "game_state"))] == [1]
    assert not (out / "game_state").exists()
