"""`python -m animegamer.nano world` then `train --quick --install`: the whole CPU path on the
Nano world, one model set per character sharing the world's VAE."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from animegamer.characters.conversion.character import (
    SHARED_VAE_KEY,
    WORLD_KEY,
    read_manifest,
    vae_folder,
)
from animegamer.characters.conversion.errors import ConversionError
from animegamer.data import layout
from animegamer.data.dataset import read_rows
from animegamer.game.rules import make_instruction, new_session
from animegamer.nano import NANO_WORLD, make_world
from animegamer.nano import __main__ as nano_cli
from animegamer.serving.settings import Settings
from animegamer.serving.stand_ins import create_nano_engine
from animegamer.train import run as train_run
from animegamer.train.vae import STEPS_FILE

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _losses(run, phase):
    return [json.loads(line)["loss"]
            for line in (run / "logs" / phase / "losses.jsonl").read_text().splitlines()]


def _falls(losses):
    tenth = max(1, len(losses) // 10)
    return sum(losses[-tenth:]) / tenth < sum(losses[:tenth]) / tenth


def test_quick_training_makes_one_folder_per_character_sharing_one_vae(tmp_path, monkeypatch):
    datasets, run, installed = tmp_path / "world", tmp_path / "run", tmp_path / "nano"
    assert nano_cli.main(["world", "--out", str(datasets), "--shots", "8",
                          "--episode-length", "4", "--test-fraction", "0.5",
                          "--tower-steps", "5"]) == 0
    assert sorted(p.name for p in datasets.iterdir()) == ["qiqi", "sosuke"]
    for key, name in (("qiqi", "Qiqi"), ("sosuke", "Sosuke")):
        rows = read_rows(datasets / key)
        assert {row["character"] for split in rows.values() for row in split} == {name}

    monkeypatch.setattr(nano_cli, "DEFAULT_NANO_DIR", installed)
    assert nano_cli.main(["train", "--dataset", str(datasets), "--out", str(run), "--quick",
                          "--install"]) == 0
    assert _falls(_losses(run, "vae"))
    for key, name in (("qiqi", "Qiqi"), ("sosuke", "Sosuke")):
        assert not (run / key / "vae").exists()  # the world's VAE is trained once
        assert read_manifest(run / key / "character")["character"] == name
        for phase in ("decoder", "game_state"):
            assert _falls(_losses(run / key, phase)), (key, phase)
        manifest = read_manifest(installed / key)
        assert (manifest[SHARED_VAE_KEY], manifest[WORLD_KEY]) == ("vae", NANO_WORLD)
        assert not (installed / key / "vae").exists()
        assert vae_folder(installed / key) == installed / "vae"
        assert (installed / key / "preview.safetensors").is_file()  # fitted before it ships
    assert not (installed / "vae" / "losses.jsonl").exists()

    engine = create_nano_engine(Settings(output_dir=tmp_path / "clips", nano_dir=installed,
                                         nano_steps=2))
    for name, motion in (("Qiqi", "fly on broomstick"), ("Sosuke", "ride in the car")):
        instruction = make_instruction({"character": name, "adverb": "slowly",
                                        "motion": motion, "time": "day", "place": "town"})
        session = engine.play(new_session(name, window=1), instruction, seed=0)
        assert len(session.turns) == 1
    assert engine.models_for("Qiqi") is not engine.models_for("Sosuke")
    _a_sitting_goes_on_from_the_installed_folders(datasets, installed, tmp_path)

    # A VAE sitting of its own goes on from the trained one and counts on from its steps.
    quick_vae_steps = yaml.safe_load(make_world.QUICK_RECIPE.read_text())["vae"]["steps"]
    assert nano_cli.main(["vae", "--dataset", str(datasets), "--out", str(tmp_path / "vae2"),
                          "--recipe", str(make_world.QUICK_RECIPE), "--start-from",
                          str(run / "vae"), "--steps", "2"]) == 0
    steps = json.loads((tmp_path / "vae2" / STEPS_FILE).read_text())["steps"]
    assert steps == quick_vae_steps + 2
    assert nano_cli.main(["vae", "--dataset", str(datasets), "--out", str(tmp_path / "vae3"),
                          "--start-from", str(tmp_path / "nowhere")]) == 2


def _a_sitting_goes_on_from_the_installed_folders(datasets, installed, tmp_path):
    """`train --start-from` trains each character on from its installed weights and their VAE
    (at a learning rate that barely moves them, the result is the installed model), not from
    the recipe's fresh ones; a folder without a character is refused before training."""
    from safetensors.torch import load_file

    sitting = yaml.safe_load(make_world.QUICK_RECIPE.read_text())
    del sitting["vae"]
    sitting["continues"] = True
    sitting["decoder"].update(warmup_steps=0, joint_steps=2, lr=1e-9)
    sitting["game_state"].update(steps=2, lr=1e-9)
    sitting["adapt"].update(steps=1, lr=1e-9)
    recipe = tmp_path / "sitting.yaml"
    recipe.write_text(yaml.safe_dump(sitting))
    run = tmp_path / "sitting"
    assert nano_cli.main(["train", "--dataset", str(datasets), "--out", str(run), "--recipe",
                          str(recipe), "--start-from", str(installed)]) == 0
    assert not (run / "vae").exists()
    for key in ("qiqi", "sosuke"):
        for part in ("transformer/diffusion_pytorch_model.safetensors",
                     "llm/model.safetensors"):
            before = load_file(installed / key / part)
            after = load_file(run / key / "character" / part)
            assert before.keys() == after.keys()
            for name, tensor in before.items():
                assert torch.allclose(after[name], tensor, atol=1e-5), (key, part, name)
        card = (run / key / "character" / "README.md").read_text(encoding="utf-8")
        assert f"went on training from an earlier `{key}` folder" in card
        assert str(tmp_path) not in card  # the card names no path of the training machine
    # a sitting keeps the folder's VAE: another one beside it is refused, by the command and
    # by `train` itself
    assert nano_cli.main(["train", "--dataset", str(datasets), "--out", str(tmp_path / "r2"),
                          "--recipe", str(recipe), "--start-from", str(installed), "--vae",
                          str(installed / "vae")]) == 2
    with pytest.raises(ValueError, match="leave out --vae"):
        train_run.train(recipe, datasets / "qiqi", tmp_path / "r2", "all", train_run.TrainOptions(
            vae=installed / "vae", start_from=installed / "qiqi",
            word_lists=make_world.nano_word_lists()))
    # a sitting's recipe without the folder it goes on from would train fresh weights briefly
    with pytest.raises(ValueError, match="give --start-from"):  # before the world's VAE
        make_world.train_world(datasets, tmp_path / "r2", recipe)
    with pytest.raises(ValueError, match="give --start-from"):
        train_run.train(recipe, datasets / "qiqi", tmp_path / "r2", "all", train_run.TrainOptions(
            vae=installed / "vae", word_lists=make_world.nano_word_lists()))
    (installed / "sosuke" / "model_index.json").unlink()
    assert nano_cli.main(["train", "--dataset", str(datasets), "--out", str(tmp_path / "r2"),
                          "--recipe", str(recipe), "--start-from", str(installed)]) == 2
    assert not (tmp_path / "r2").exists()


def test_install_refuses_an_incomplete_folder_and_keeps_the_installed_one(tmp_path):
    (tmp_path / "vae").mkdir()
    (tmp_path / "qiqi").mkdir()
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "kept").write_text("")
    with pytest.raises(ConversionError, match="not a complete AnimeGamer character"):
        make_world.install(tmp_path / "vae", {"qiqi": tmp_path / "qiqi"}, tmp_path / "target")
    assert (tmp_path / "target" / "kept").exists()


def test_bad_world_and_train_arguments_exit_2_with_one_line(tmp_path, capsys):
    assert nano_cli.main(["world", "--out", str(tmp_path / "w"), "--shots", "0"]) == 2
    assert "--shots" in capsys.readouterr().err
    assert nano_cli.main(["world", "--out", str(tmp_path / "w"), "--characters", "Qiqi",
                          "qiqi"]) == 2
    assert "twice" in capsys.readouterr().err
    assert nano_cli.main(["train", "--dataset", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    assert "no character dataset" in capsys.readouterr().err
    assert not (tmp_path / "w").exists() and not (tmp_path / "r").exists()


def test_train_with_a_trained_vae_gives_it_to_every_character_and_trains_none(tmp_path,
                                                                            monkeypatch, capsys):
    for key in ("qiqi", "sosuke"):
        (tmp_path / "world" / key).mkdir(parents=True)
        (tmp_path / "world" / key / layout.REPORT).write_text("{}")
    (tmp_path / "vae").mkdir()
    (tmp_path / "vae" / "config.json").write_text("{}")
    given: dict[str, Path] = {}

    def fake_train(recipe, dataset, out, phases, options, say):
        given[Path(dataset).name] = options.vae

    monkeypatch.setattr(train_run, "train", fake_train)
    monkeypatch.setattr(make_world, "train_world_vae", lambda *a, **k: pytest.fail("trained"))
    assert nano_cli.main(["train", "--dataset", str(tmp_path / "world"), "--out",
                          str(tmp_path / "run"), "--vae", str(tmp_path / "vae")]) == 0
    assert given == {"qiqi": tmp_path / "vae", "sosuke": tmp_path / "vae"}
    assert nano_cli.main(["train", "--dataset", str(tmp_path / "world"), "--out",
                          str(tmp_path / "run"), "--vae", str(tmp_path / "world")]) == 2
    assert "not a VAE folder" in capsys.readouterr().err


@pytest.mark.parametrize("path", [make_world.NANO_RECIPE, make_world.QUICK_RECIPE])
def test_the_nano_recipes_tokenize_the_worlds_words_whole_and_keep_every_frame(path):
    """The shipped recipe and the quick one the tests train share its path: the world's words
    as whole tokens (read from the world, not copied), a VAE 1× in time (a moving sprite is not
    blurred across frames), 2×2×2 latent patches, frame-correlated noise, the spatial reference
    and the scene drawn on, over all of the VAE's latent channels."""
    from animegamer.nano.vocabulary import world_words
    from animegamer.train.recipe import RecipeError, TinyGameStateInit, load_recipe

    assert yaml.safe_load(path.read_text())["game_state"]["init"]["tiny"]["words"] == "nano-world"
    with pytest.raises(RecipeError, match="the word list 'nano-world' is not given here"):
        load_recipe(path)  # only the Nano commands know the world's words
    recipe = load_recipe(path, word_lists=make_world.nano_word_lists())
    assert recipe.game_state is not None
    assert isinstance(recipe.game_state.init, TinyGameStateInit)
    assert recipe.game_state.init.tiny.words == world_words()
    assert {"Qiqi", "Sosuke", "broomstick", "harbour"} <= set(world_words())
    assert len(recipe.vae.block_out_channels) == 3
    assert recipe.vae.train_crop == (32, 48) and recipe.vae.motion_weight > 0
    assert recipe.vae.temporal_compression == 1
    tiny = recipe.decoder.init.tiny
    assert (tiny.patch_size, tiny.patch_size_t) == (2, 2)
    assert (tiny.motion_scope_scale, tiny.noise_correlation) == (100.0, 0.9)
    assert tiny.reference_channels > 0
    assert tiny.scene_channels == recipe.vae.latent_channels
