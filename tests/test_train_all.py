"""`python -m animegamer.train all`: from a dataset to a character folder the game plays."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import yaml
from diffusers.models.autoencoders.autoencoder_kl_cogvideox import AutoencoderKLCogVideoX
from tiny_dataset import write_tiny_dataset

from animegamer.__main__ import main as play_main
from animegamer.characters.conversion.character import check_layout, read_manifest
from animegamer.game.rules import make_instruction, new_session
from animegamer.serving.settings import Settings
from animegamer.serving.stand_ins import create_nano_engine
from animegamer.train.__main__ import main

TINY_VAE = {"steps": 2, "batch_size": 1, "train_frames": 9, "block_out_channels": [4, 8, 8, 8],
            "norm_num_groups": 2, "scale_samples": 2, "log_every": 1}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("all")
    dataset = write_tiny_dataset(root / "dataset")
    recipe = yaml.safe_load(Path("recipes/tiny-cpu.yaml").read_text())
    recipe["vae"] = TINY_VAE
    (root / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    args = ["all", "--dataset", str(dataset), "--out", str(root / "run"),
            "--config", str(root / "recipe.yaml")]
    assert main(args) == 0
    return root


def test_all_trains_every_phase_and_assembles_a_character(trained, tmp_path):
    run = trained / "run"
    for part in ("vae", "decoder", "game_state", "decoder_adapted", "character"):
        assert (run / part).is_dir(), part
    character = run / "character"
    check_layout(character)
    assert read_manifest(character)["character"] == "Qiqi"
    card = (character / "README.md").read_text()
    written = card + "".join(p.read_text() for p in character.rglob("*.json"))
    assert str(trained) not in written  # no path of the training machine
    for phase in ("vae", "decoder", "game_state", "adapt"):
        assert f"| {phase} |" in card
    # the decoder was built on the VAE trained first
    trained_vae = AutoencoderKLCogVideoX.from_pretrained(run / "vae")
    used_vae = AutoencoderKLCogVideoX.from_pretrained(character / "vae")
    assert used_vae.config.scaling_factor == trained_vae.config.scaling_factor
    assert all(torch.equal(a, b) for a, b in zip(trained_vae.state_dict().values(),
                                                  used_vae.state_dict().values(), strict=True))

    # the engine finds run/character/ by its manifest, the one character folder under run/
    engine = create_nano_engine(Settings(output_dir=tmp_path, nano_dir=run, nano_steps=2))
    instruction = make_instruction({"character": "Qiqi", "adverb": "quickly", "motion": "run",
                                    "time": "day", "place": "town"})
    session = engine.play(new_session("Qiqi"), instruction, seed=1)
    assert len(session.turns) == 1


def test_a_recipe_without_a_vae_section_refuses_the_vae_command(trained, capsys):
    code = main(["vae", "--dataset", str(trained / "dataset"), "--out", str(trained / "other"),
                 "--config", "recipes/tiny-cpu.yaml"])
    assert code == 2 and "no 'vae' section" in capsys.readouterr().err
    shutil.rmtree(trained / "other", ignore_errors=True)


def test_the_decoder_takes_a_given_vae_instead_of_training_one(trained, capsys):
    """`--vae DIR`: the VAE a world's characters share (`animegamer.nano train`)."""
    out, given = trained / "given-vae", trained / "run" / "vae"
    args = ["decoder", "--dataset", str(trained / "dataset"), "--out", str(out),
            "--config", str(trained / "recipe.yaml"), "--vae", str(given)]
    assert main(args) == 0
    assert not (out / "vae").exists()  # nothing trained
    expected = AutoencoderKLCogVideoX.from_pretrained(given).state_dict()
    used = AutoencoderKLCogVideoX.from_pretrained(out / "decoder" / "vae").state_dict()
    assert expected.keys() == used.keys()
    assert all(torch.equal(expected[k], used[k]) for k in expected)
    code = main(["vae", "--dataset", str(trained / "dataset"), "--out", str(out),
                 "--config", str(trained / "recipe.yaml"), "--vae", str(given)])
    assert code == 2 and "--vae is for the decoder and all commands" in capsys.readouterr().err
    shutil.rmtree(out, ignore_errors=True)


def test_the_trained_character_plays_its_own_weights_without_naming_an_engine(
    trained, tmp_path, capsys, monkeypatch
):
    """`play --character Tux` on a CPU: Tux's own (trained) weights, said once, and its states
    read from its state tokens (the grammar holds the briefly trained model's decoding)."""
    character = trained / "run" / "character"
    registry = tmp_path / "characters.yaml"
    registry.write_text(yaml.safe_dump({"format": 1, "characters": [{
        "name": "Tux",
        "defaults": {"character": "Tux", "adverb": "slowly", "motion": "walk", "time": "day",
                     "place": "town"},
        "weights": {"converted": {"repo": str(character)}},
    }]}))
    monkeypatch.setenv("ANIMEGAMER_CHARACTERS", str(registry))
    monkeypatch.delenv("ANIMEGAMER_ENGINE", raising=False)
    turns = [f"Character: Tux; Motion: {motion}; Background: day town."
             for motion in ("slowly walk", "quickly run", "happily jump")]
    code = play_main(["play", "--character", "Tux", "--steps", "2", "--seed", "1", *turns,
                      "--out", str(tmp_path / "clips")])
    out = capsys.readouterr().out
    assert code == 0
    assert out.count(f"Tux: {character} (trained, CPU)") == 1
    assert "turn 3: " in out and "note:" not in out
