"""The shipped recipes: the paper-scale ones carry docs/design.md §11's numbers and combine into
one recipe for `all`; the tiny CPU one validates."""

from __future__ import annotations

from pathlib import Path

import pytest

from animegamer.train.recipe import BaseLLMInit, GameStateRecipe, RecipeError, load_recipe

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
PAPER = [RECIPES / f"paper-{phase}.yaml" for phase in ("decoder", "game-state", "adapt")]


def test_paper_recipes_have_the_papers_numbers() -> None:
    decoder = load_recipe(RECIPES / "paper-decoder.yaml")
    game_state = load_recipe(RECIPES / "paper-game-state.yaml")
    adapt = load_recipe(RECIPES / "paper-adapt.yaml")
    for recipe in (decoder, game_state, adapt):
        assert recipe.mixed_precision == "bf16" and recipe.gradient_checkpointing

    a = decoder.decoder
    assert a is not None and a.transformer == "lora"
    assert (a.warmup_steps, a.joint_steps, a.lr, a.lora_rank) == (10_000, 80_000, 2e-4, 64)
    assert a.init.pipeline == Path("converted/Qiqi") and a.init.tiny is None
    assert (a.cfg_dropout.text_zero, a.cfg_dropout.text_empty, a.cfg_dropout.image_zero) == (
        0.10, 0.05, 0.05)

    assert game_state.game_state is not None
    b = GameStateRecipe.model_validate(game_state.game_state)
    assert (b.steps, b.lr) == (15_000, 5e-5)
    assert (b.lora_rank, b.lora_alpha, b.lora_dropout) == (32, 32, 0.05)
    assert b.mse_weight == 1.0 and b.max_turns == 5 and b.gradient_checkpointing
    assert isinstance(b.init, BaseLLMInit)
    assert b.init.base_llm.name == "Mistral-7B-Instruct-v0.1"
    assert set(b.lora_target_modules) == {
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

    c = adapt.adapt
    assert c is not None and c.transformer == "lora"
    assert (c.steps, c.lr) == (10_000, 5e-5)


def test_the_paper_recipes_combine_into_one_for_all() -> None:
    recipe = load_recipe(*PAPER)
    assert recipe.decoder is not None and recipe.game_state is not None
    assert recipe.adapt is not None and recipe.vae is None
    assert recipe.decoder.joint_steps == 80_000 and recipe.adapt.steps == 10_000


def test_combined_files_must_agree(tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text((RECIPES / "paper-adapt.yaml").read_text().replace("seed: 0", "seed: 1"))
    with pytest.raises(RecipeError, match=rf"{other}: 'seed' is also set, to another value, in "
                                          rf".*paper-decoder\.yaml"):
        load_recipe(PAPER[0], other)
    with pytest.raises(RecipeError, match="no recipe file given"):
        load_recipe()
    twice = tmp_path / "twice.yaml"
    twice.write_text("decoder:\n  init: {tiny: {}}\n  warmup_steps: 1\n  joint_steps: 1\n")
    with pytest.raises(RecipeError, match="'decoder' is also set"):
        load_recipe(PAPER[0], twice)


def test_the_tiny_cpu_recipe_is_small() -> None:
    recipe = load_recipe(RECIPES / "tiny-cpu.yaml")
    assert recipe.decoder is not None and recipe.decoder.init.tiny is not None
    assert recipe.decoder.warmup_steps + recipe.decoder.joint_steps <= 10
    assert recipe.adapt is not None and recipe.adapt.steps <= 10
    assert recipe.game_state is not None
    assert GameStateRecipe.model_validate(recipe.game_state).steps <= 10


def test_the_cpu_recipe_names_nanos_vae_and_says_where_its_path_is_read_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """recipes/cpu.yaml encodes the creator's clips with the Nano world's shared VAE and draws on
    the footage's scenes; run from another folder, its relative VAE path is one clear line."""
    recipe = load_recipe(RECIPES / "cpu.yaml")  # the tests run from the repository's root
    assert recipe.decoder is not None and recipe.decoder.init.tiny is not None
    tiny = recipe.decoder.init.tiny
    assert tiny.vae == Path("assets/nano/vae") and tiny.scene_channels == 16
    assert recipe.vae is None  # the VAE is the world's, not trained again
    assert recipe.decoder.play_guidance == 1.0  # a CPU-trained decoder overshoots at 6
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RecipeError, match=r"assets/nano/vae is not a VAE folder .*relative to "
                                          r"the folder the command runs in"):
        load_recipe(RECIPES / "cpu.yaml")
