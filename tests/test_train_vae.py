"""A small CogVideoX-family VAE trained on a dataset's clips (the Nano world's)."""

from __future__ import annotations

import json

import pytest
from diffusers.models.autoencoders.autoencoder_kl_cogvideox import AutoencoderKLCogVideoX
from tiny_dataset import moving_square, write_tiny_dataset

from animegamer.train.vae import (
    VaeRecipe,
    build_vae,
    clip_tensor,
    interleaved_clip_paths,
    reconstruction_error,
    train_vae,
)

TINY = {"block_out_channels": (4, 8, 8, 8), "norm_num_groups": 2, "batch_size": 2, "lr": 3e-3,
        "log_every": 5, "scale_samples": 4}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_tiny_dataset(tmp_path_factory.mktemp("tiny"), features=False)


def test_training_lowers_the_reconstruction_error_and_saves_a_loadable_vae(dataset, tmp_path):
    recipe = VaeRecipe(steps=20, train_frames=9, train_crop=(32, 48), **TINY)
    clip = moving_square(3, 64, 96, (200, 60, 40))
    before = reconstruction_error(build_vae(recipe, 64, 96).eval(), clip)
    vae = train_vae([dataset], tmp_path / "vae", recipe)
    after = reconstruction_error(vae, clip)
    assert after < 0.7 * before, (before, after)
    losses = [json.loads(line) for line in (tmp_path / "vae" / "losses.jsonl").open()]
    assert losses[-1]["l1"] < losses[0]["l1"]
    loaded = AutoencoderKLCogVideoX.from_pretrained(tmp_path / "vae")
    assert 0 < loaded.config.scaling_factor < 1e3
    assert loaded.config.scaling_factor == vae.config.scaling_factor
    latent = loaded.encode(clip_tensor(clip)[None]).latent_dist.mean
    assert tuple(latent.shape) == (1, 16, 5, 8, 12)  # 8x space, 4x time: the decoder's layout


def test_three_levels_compress_space_4x_and_crops_train_the_whole_frame(dataset, tmp_path):
    recipe = VaeRecipe(steps=3, train_frames=9, train_crop=(32, 48),
                       **dict(TINY, block_out_channels=(4, 8, 8)))
    vae = train_vae([dataset], tmp_path / "vae", recipe)
    clip = moving_square(3, 64, 96, (200, 60, 40))
    latent = vae.encode(clip_tensor(clip)[None]).latent_dist.mean
    assert tuple(latent.shape) == (1, 16, 5, 16, 24)
    assert tuple(vae.decode(latent).sample.shape) == (1, 3, 17, 64, 96)


def test_moving_pixels_weigh_more_and_still_ones_weigh_one():
    import torch

    from animegamer.train.vae import reconstruction_weights

    clips = torch.zeros(1, 3, 9, 8, 8)
    clips[0, 1, ::2, 2, 3], clips[0, 1, 1::2, 2, 3] = 1.0, -1.0  # one pixel blinks in green
    weights = reconstruction_weights(clips, 9.0)
    assert tuple(weights.shape) == (1, 1, 9, 8, 8)
    assert torch.all(weights[..., 0, 0] == 1.0)
    assert torch.all(weights[0, 0, :, 2, 3] == 10.0)  # saturated: ≥ 0.5 from its mean
    assert torch.all(reconstruction_weights(clips, 0.0) == 1.0)


def test_crops_lie_on_the_8_pixel_grid_inside_the_clip():
    import random

    import torch

    from animegamer.train.vae import _crop

    clip = torch.arange(64 * 96, dtype=torch.float32).reshape(1, 1, 64, 96).expand(3, 9, 64, 96)
    rng = random.Random(0)
    corners = set()
    for _ in range(50):
        crop = _crop(clip, (32, 48), rng)
        assert tuple(crop.shape) == (3, 9, 32, 48)
        top, left = divmod(int(crop[0, 0, 0, 0]), 96)
        assert top % 8 == 0 and left % 8 == 0
        corners.add((top, left))
    assert len(corners) > 5
    assert _crop(clip, None, rng) is clip


def test_recipe_and_sizes_are_checked():
    with pytest.raises(ValueError, match="steps"):
        VaeRecipe(steps=0)
    with pytest.raises(ValueError, match="8k\\+1"):
        VaeRecipe(train_frames=13)
    with pytest.raises(ValueError, match="odd number of latent frames"):
        VaeRecipe(train_frames=5)
    with pytest.raises(ValueError, match="odd number of latent frames"):
        VaeRecipe(train_frames=7, temporal_compression=2)
    assert VaeRecipe(train_frames=5, temporal_compression=1).train_frames == 5
    with pytest.raises(ValueError, match="colour"):
        VaeRecipe(colour=1)
    with pytest.raises(ValueError, match="multiples of 8"):
        build_vae(VaeRecipe(), 60, 96)
    with pytest.raises(ValueError, match="3 levels"):
        VaeRecipe(block_out_channels=(8, 16))
    with pytest.raises(ValueError, match="multiples of 8"):
        VaeRecipe(train_crop=(30, 48))
    with pytest.raises(ValueError, match="temporal_compression"):
        VaeRecipe(temporal_compression=3)


def test_a_world_vae_takes_the_clips_of_every_dataset_in_turn(dataset, tmp_path):
    other = write_tiny_dataset(tmp_path / "other", features=False)
    ours, theirs = interleaved_clip_paths([dataset]), interleaved_clip_paths([other])
    both = interleaved_clip_paths([dataset, other])
    assert len(ours) == len(theirs) > 1
    assert both[0::2] == ours and both[1::2] == theirs


def test_a_run_goes_on_from_a_saved_vae_and_counts_its_steps(dataset, tmp_path):
    import torch

    from animegamer.train.vae import STEPS_FILE

    recipe = VaeRecipe(steps=4, train_frames=9, save_every=2, **TINY)
    first = train_vae([dataset], tmp_path / "first", recipe)
    assert json.loads((tmp_path / "first" / STEPS_FILE).read_text())["steps"] == 4
    again = VaeRecipe(steps=3, train_frames=9, **dict(TINY, lr=1e-12))
    second = train_vae([dataset], tmp_path / "second", again, start_from=tmp_path / "first")
    # At a vanishing learning rate the weights are the first run's: they were loaded, not drawn.
    for name, weight in first.state_dict().items():
        torch.testing.assert_close(second.state_dict()[name], weight, rtol=0, atol=1e-6)
    assert json.loads((tmp_path / "second" / STEPS_FILE).read_text())["steps"] == 7
    steps = [json.loads(line)["step"] for line in (tmp_path / "second" / "losses.jsonl").open()]
    assert steps[0] == 5 and steps[-1] == 7


def test_a_run_refuses_to_go_on_from_a_vae_of_another_architecture(dataset, tmp_path):
    recipe = VaeRecipe(steps=1, train_frames=9, **TINY)
    train_vae([dataset], tmp_path / "first", recipe)
    other = VaeRecipe(steps=1, train_frames=9, **dict(TINY, latent_channels=4))
    with pytest.raises(ValueError, match="latent_channels"):
        train_vae([dataset], tmp_path / "second", other, start_from=tmp_path / "first")
