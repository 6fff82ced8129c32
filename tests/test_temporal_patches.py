"""Temporal patches (`patch_size_t`, as in CogVideoX 1.5): a token spans that many latent
frames, its sinusoidal position counts token frames, and a clip whose latent frames are not a
whole number of patches is padded in front with its first frame, whose outputs are dropped."""

from __future__ import annotations

import pytest
import torch
from diffusers.models.embeddings import get_3d_sincos_pos_embed
from tiny_transformer import run_transformer, transformer_inputs

from animegamer.game.representation import REPRESENTATION_TOKENS
from animegamer.models.tiny_decoder import tiny_transformer_config
from animegamer.models.transformers.transformer_animegamer import AnimeGamerTransformer3DModel

CHANNELS, HEIGHT, WIDTH, PATCH = 16, 8, 12, 2
TOKENS_PER_FRAME = (HEIGHT // PATCH) * (WIDTH // PATCH)


def _model(patch_size_t: int | None, frames: int = 17) -> AnimeGamerTransformer3DModel:
    torch.manual_seed(0)
    config = {**tiny_transformer_config(64), "sample_height": HEIGHT, "sample_width": WIDTH,
              "sample_frames": frames, "temporal_compression_ratio": 1,
              "patch_size_t": patch_size_t}
    return AnimeGamerTransformer3DModel(**config).eval()


def _inputs(frames: int) -> tuple[torch.Tensor, torch.Tensor]:
    return transformer_inputs(frames, CHANNELS, HEIGHT, WIDTH)


@pytest.mark.parametrize("frames", [17, 4, 1])
def test_a_clip_comes_back_with_its_own_frames(frames: int) -> None:
    latents, representation = _inputs(frames)
    output = run_transformer(_model(2, frames), latents, representation)
    assert output.shape == latents.shape
    assert torch.isfinite(output).all()


def test_an_odd_clip_is_the_even_clip_led_by_its_first_frame_minus_that_frame() -> None:
    model = _model(2)
    latents, representation = _inputs(17)
    padded = torch.cat([latents[:, :1], latents], dim=1)
    plain = run_transformer(model, padded, representation)  # 18 frames: no padding of its own
    torch.testing.assert_close(run_transformer(model, latents, representation), plain[:, 1:])


def test_the_positions_count_token_frames() -> None:
    model = _model(2)
    table = model.patch_embed.pos_embedding
    assert table.shape == (1, REPRESENTATION_TOKENS + 9 * TOKENS_PER_FRAME, 64)
    expected = get_3d_sincos_pos_embed(64, (WIDTH // PATCH, HEIGHT // PATCH), 9, 1.875, 1.0,
                                       output_type="pt").flatten(0, 1)
    torch.testing.assert_close(table[0, REPRESENTATION_TOKENS:], expected.to(table.dtype))
    assert table[0, :REPRESENTATION_TOKENS].abs().sum() == 0


def test_a_token_reads_two_frames_so_the_clip_costs_half_the_tokens() -> None:
    model = _model(2)
    latents, representation = _inputs(17)
    with torch.no_grad():
        tokens = model.patch_embed(representation, torch.cat([latents[:, :1], latents], 1))
    assert tokens.shape[1] == REPRESENTATION_TOKENS + 9 * TOKENS_PER_FRAME
    assert model.patch_embed.proj.in_features == CHANNELS * PATCH * PATCH * 2


def test_without_temporal_patches_the_model_is_the_release_s() -> None:
    model = _model(None)
    assert model.patch_embed.pos_embedding.shape[1] == REPRESENTATION_TOKENS + 17 * TOKENS_PER_FRAME
    assert type(model.patch_embed).__name__ == "CogVideoXPatchEmbed"


def test_temporal_patches_survive_saving(tmp_path) -> None:
    model = _model(2)
    latents, representation = _inputs(17)
    model.save_pretrained(tmp_path)
    loaded = AnimeGamerTransformer3DModel.from_pretrained(tmp_path).eval()
    assert loaded.config.patch_size_t == 2
    torch.testing.assert_close(run_transformer(loaded, latents, representation),
                               run_transformer(model, latents, representation), rtol=0, atol=0)
