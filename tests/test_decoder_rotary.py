"""The transformer's rotary positions (`rotary_positions`): 3-D RoPE over the video tokens'
frame, row and column in attention, besides the patch embedding's sine-cosine table."""

from __future__ import annotations

import torch

from animegamer.models.decoder import AnimeGamerTransformer3DModel
from animegamer.models.representation import REPRESENTATION_TOKENS
from animegamer.models.tiny_decoder import tiny_transformer_config

FRAMES, CHANNELS, HEIGHT, WIDTH = 5, 16, 8, 12


def _model(rotary: bool) -> AnimeGamerTransformer3DModel:
    torch.manual_seed(0)
    config = {**tiny_transformer_config(64), "rotary_positions": rotary}
    return AnimeGamerTransformer3DModel(**config).eval()


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    latents = torch.randn(2, FRAMES, CHANNELS, HEIGHT, WIDTH, generator=generator)
    return latents, torch.randn(2, REPRESENTATION_TOKENS, 64, generator=generator)


def _run(model: AnimeGamerTransformer3DModel, latents: torch.Tensor,
         representation: torch.Tensor, **kwargs: object) -> torch.Tensor:
    with torch.no_grad():
        return model(latents, representation, timestep=torch.tensor([500, 500]),
                     ofs=torch.tensor([1.0, 1.0]), return_dict=False, **kwargs)[0]


def test_rotary_positions_change_attention_and_nothing_else() -> None:
    """The same weights with and without RoPE: same parameters, different outputs."""
    plain, rotary = _model(False), _model(True)
    assert not plain.config.rotary_positions
    rotary.load_state_dict(plain.state_dict())
    latents, representation = _inputs()
    plain_out, rotary_out = _run(plain, latents, representation), _run(rotary, latents,
                                                                        representation)
    assert rotary_out.shape == plain_out.shape == latents.shape
    assert (rotary_out - plain_out).abs().max() > 1e-3


def test_the_embedding_counts_frames_rows_and_columns_in_whole_tokens() -> None:
    model = _model(True)
    patch = model.config.patch_size
    rows, columns = HEIGHT // patch, WIDTH // patch
    cos, sin = model.rotary_embedding(FRAMES, HEIGHT, WIDTH, torch.device("cpu"))
    head = model.config.attention_head_dim
    assert cos.shape == sin.shape == (FRAMES * rows * columns, head)
    torch.testing.assert_close(cos[0], torch.ones(head))  # frame 0, row 0, column 0
    torch.testing.assert_close(sin[0], torch.zeros(head))
    grid = cos.reshape(FRAMES, rows, columns, head)
    time_channels = head // 4
    # the next frame turns only the temporal channels; the next column only the column ones
    assert not torch.allclose(grid[1, 0, 0, :time_channels], grid[0, 0, 0, :time_channels])
    torch.testing.assert_close(grid[1, 0, 0, time_channels:], grid[0, 0, 0, time_channels:])
    column_channels = head // 8 * 3
    torch.testing.assert_close(grid[0, 0, 1, :-column_channels], grid[0, 0, 0, :-column_channels])
    assert not torch.allclose(grid[0, 0, 1, -column_channels:], grid[0, 0, 0, -column_channels:])


def test_a_given_embedding_is_used_as_given() -> None:
    model = _model(True)
    latents, representation = _inputs()
    own = model.rotary_embedding(FRAMES, HEIGHT, WIDTH, torch.device("cpu"))
    torch.testing.assert_close(_run(model, latents, representation, image_rotary_emb=own),
                               _run(model, latents, representation), rtol=0, atol=0)
    still = (torch.ones_like(own[0]), torch.zeros_like(own[1]))  # the identity rotation
    torch.testing.assert_close(_run(model, latents, representation, image_rotary_emb=still),
                               _run(_model(False), latents, representation))


def test_the_setting_survives_saving(tmp_path) -> None:
    model = _model(True)
    latents, representation = _inputs()
    model.save_pretrained(tmp_path)
    loaded = AnimeGamerTransformer3DModel.from_pretrained(tmp_path).eval()
    assert loaded.config.rotary_positions
    torch.testing.assert_close(_run(loaded, latents, representation),
                               _run(model, latents, representation), rtol=0, atol=0)
