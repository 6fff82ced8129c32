"""`python -m animegamer.nano world` then `train --quick`: the whole CPU path on the Nano world."""

from __future__ import annotations

import json

import pytest

from animegamer.convert.character import check_layout, read_manifest
from animegamer.convert.errors import ConversionError
from animegamer.nano import NANO_NAME
from animegamer.nano import __main__ as nano_cli

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _losses(run, phase):
    return [json.loads(line)["loss"]
            for line in (run / "logs" / phase / "losses.jsonl").read_text().splitlines()]


def test_quick_training_on_a_small_world_makes_a_character(tmp_path):
    dataset, run = tmp_path / "world", tmp_path / "run"
    assert nano_cli.main(["world", "--out", str(dataset), "--shots", "16",
                          "--episode-length", "4", "--test-fraction", "0.25",
                          "--tower-steps", "5"]) == 0
    assert nano_cli.main(["train", "--dataset", str(dataset), "--out", str(run), "--quick"]) == 0
    check_layout(run / "character")
    assert read_manifest(run / "character")["character"] == NANO_NAME
    for phase in ("vae", "decoder", "game_state"):
        losses = _losses(run, phase)
        tenth = max(1, len(losses) // 10)
        first, last = sum(losses[:tenth]) / tenth, sum(losses[-tenth:]) / tenth
        assert last < first, (phase, first, last)

    target = tmp_path / "installed"
    assert nano_cli.install(run / "character", target) == target
    check_layout(target)
    assert not target.with_name("installed.partial").exists()


def test_install_refuses_an_incomplete_folder(tmp_path, capsys):
    (tmp_path / "character").mkdir()
    with pytest.raises(ConversionError, match="not a complete AnimeGamer character"):
        nano_cli.install(tmp_path / "character", tmp_path / "target")
    assert not (tmp_path / "target").exists()
    assert nano_cli.main(["world", "--out", str(tmp_path / "w"), "--shots", "0"]) == 2
    assert "--shots" in capsys.readouterr().err


@pytest.mark.parametrize("path", [nano_cli.NANO_RECIPE, nano_cli.QUICK_RECIPE])
def test_the_nano_recipes_tokenize_the_worlds_words_whole_and_keep_every_frame(path):
    """The shipped recipe and the quick one the tests train share its path: a VAE 1× in time
    (a moving sprite is not blurred across frames), 4×4 latent patches, frame-correlated noise
    and the spatial reference."""
    from animegamer.nano.vocabulary import world_words
    from animegamer.train.recipe import GameStateRecipe, load_recipe

    recipe = load_recipe(path)
    game_state = GameStateRecipe.model_validate(recipe.game_state)
    assert game_state.init.tiny.words == world_words()
    assert len(recipe.vae.block_out_channels) == 3
    assert recipe.vae.train_crop == (32, 48) and recipe.vae.motion_weight > 0
    assert (recipe.vae.temporal_compression, recipe.vae.latent_channels) == (1, 4)
    tiny = recipe.decoder.init.tiny
    assert (tiny.patch_size, tiny.motion_scope_scale, tiny.noise_correlation) == (4, 100.0, 0.9)
    assert tiny.reference_channels > 0


def test_the_v8_candidate_recipe_is_1x_in_time_with_a_scaled_motion_scope():
    from animegamer.nano.vocabulary import world_words
    from animegamer.train.recipe import GameStateRecipe, load_recipe

    recipe = load_recipe(nano_cli.NANO_RECIPE.parent / "nano-v8.yaml")
    assert GameStateRecipe.model_validate(recipe.game_state).init.tiny.words == world_words()
    assert (recipe.vae.temporal_compression, recipe.vae.latent_channels) == (1, 4)
    tiny = recipe.decoder.init.tiny
    assert (tiny.patch_size, tiny.motion_scope_scale) == (4, 100.0)
