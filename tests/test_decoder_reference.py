"""The transformer's spatial reference (`reference_channels`): the representation's image tokens,
laid on their 14×14 grid, as extra input channels of every latent frame."""

from __future__ import annotations

import math

import pytest
import torch
from tiny_transformer import run_transformer, transformer_inputs

from animegamer.game.representation import IMAGE_TOKENS, TEXT_TOKENS
from animegamer.models.tiny_decoder import tiny_transformer_config
from animegamer.models.transformers.transformer_animegamer import AnimeGamerTransformer3DModel
from animegamer.models.transformers.transformer_nano import NanoTransformer3DModel

GRID = math.isqrt(IMAGE_TOKENS)
FRAMES, CHANNELS, HEIGHT, WIDTH = 5, 16, 8, 12


def _model(reference_channels: int) -> NanoTransformer3DModel:
    torch.manual_seed(0)
    config = {**tiny_transformer_config(64), "reference_channels": reference_channels}
    return NanoTransformer3DModel(**config).eval()


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return transformer_inputs(FRAMES, CHANNELS, HEIGHT, WIDTH)


def _image_token(row: int, column: int) -> int:
    return TEXT_TOKENS + row * GRID + column


def test_the_release_has_no_reference() -> None:
    release = AnimeGamerTransformer3DModel(**tiny_transformer_config(64))
    assert not hasattr(release, "reference_proj") and "reference_channels" not in release.config
    assert release.patch_embed.proj.in_channels == CHANNELS
    model = _model(0)
    assert model.reference_proj is None
    assert model.patch_embed.proj.in_channels == CHANNELS


def test_the_reference_adds_input_channels_and_keeps_the_output_shape(tmp_path) -> None:
    model = _model(3)
    assert model.patch_embed.proj.in_channels == CHANNELS + 3
    assert model.config.in_channels == CHANNELS  # the latent's channels, as the pipeline reads
    latents, representation = _inputs()
    output = run_transformer(model, latents, representation)
    assert output.shape == latents.shape
    model.save_pretrained(tmp_path)
    loaded = NanoTransformer3DModel.from_pretrained(tmp_path).eval()
    assert loaded.config.reference_channels == 3
    torch.testing.assert_close(run_transformer(loaded, latents, representation), output,
                               rtol=0, atol=0)


def test_the_reference_lies_where_its_token_lies_in_every_frame() -> None:
    model = _model(3)
    _, representation = _inputs()
    base = model.spatial_reference(representation, FRAMES, HEIGHT, WIDTH)
    assert base.shape == (2, FRAMES, 3, HEIGHT, WIDTH)
    torch.testing.assert_close(base, base[:, :1].expand_as(base), rtol=0, atol=0)
    bumped = representation.clone()
    bumped[:, _image_token(0, 0)] += 10.0  # the top-left patch of the first frame
    change = (model.spatial_reference(bumped, FRAMES, HEIGHT, WIDTH) - base).abs().sum(dim=(0, 2))
    assert change[:, :2, :2].sum(dim=(1, 2)).min() > 0
    assert not change[:, HEIGHT // 2:].any() and not change[:, :, WIDTH // 2:].any()


def test_the_text_tokens_do_not_reach_the_reference() -> None:
    model = _model(3)
    _, representation = _inputs()
    changed = representation.clone()
    changed[:, :TEXT_TOKENS] = 0.0
    torch.testing.assert_close(model.spatial_reference(changed, FRAMES, HEIGHT, WIDTH),
                               model.spatial_reference(representation, FRAMES, HEIGHT, WIDTH))


def test_the_first_frames_image_tokens_reach_the_network_through_the_reference() -> None:
    """With the joint attention's path the same, a model with a reference answers a change of
    the top-left image token with more change than one without."""
    latents, representation = _inputs()
    bumped = representation.clone()
    bumped[:, _image_token(0, 0)] += 10.0
    with_reference, without = _model(3), _model(0)
    without.load_state_dict(
        {k: v for k, v in with_reference.state_dict().items()
         if not k.startswith(("reference_proj", "patch_embed.proj.weight"))}, strict=False)
    without.patch_embed.proj.weight.data = with_reference.patch_embed.proj.weight[:, :CHANNELS]

    def output_change(model: NanoTransformer3DModel) -> float:
        change = (run_transformer(model, latents, bumped)
                  - run_transformer(model, latents, representation))
        return float(change.abs().mean())

    assert output_change(with_reference) > 1.5 * output_change(without)


def test_negative_reference_channels_are_refused() -> None:
    with pytest.raises(ValueError, match="reference_channels"):
        _model(-1)
