"""The transformer's output refiner (`refiner_channels`): 3-D convolutions at the latent's
resolution that correct the prediction, told the timestep and the motion scope."""

from __future__ import annotations

import pytest
import torch

from animegamer.models.decoder import AnimeGamerTransformer3DModel
from animegamer.models.latent_refiner import LatentRefiner
from animegamer.models.representation import REPRESENTATION_TOKENS
from animegamer.models.tiny_decoder import tiny_transformer_config

FRAMES, CHANNELS, HEIGHT, WIDTH = 5, 16, 8, 12


def _model(refiner_channels: int) -> AnimeGamerTransformer3DModel:
    torch.manual_seed(0)
    config = {**tiny_transformer_config(64), "refiner_channels": refiner_channels}
    return AnimeGamerTransformer3DModel(**config).eval()


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    latents = torch.randn(2, FRAMES, CHANNELS, HEIGHT, WIDTH, generator=generator)
    return latents, torch.randn(2, REPRESENTATION_TOKENS, 64, generator=generator)


def _run(model: AnimeGamerTransformer3DModel, latents: torch.Tensor, representation: torch.Tensor,
         timestep: int = 500, scope: float = 1.0) -> torch.Tensor:
    with torch.no_grad():
        return model(latents, representation, timestep=torch.tensor([timestep, timestep]),
                     ofs=torch.tensor([scope, scope]), return_dict=False)[0]


def _randomise_last_convolution(model: AnimeGamerTransformer3DModel) -> None:
    assert model.refiner is not None
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for parameter in model.refiner.conv_out.parameters():
            parameter.copy_(0.1 * torch.randn(parameter.shape, generator=generator))


def test_the_release_has_no_refiner() -> None:
    assert _model(0).refiner is None


def test_a_new_refiner_leaves_the_transformers_output_as_it_is() -> None:
    latents, representation = _inputs()
    refined = _model(8)
    assert refined.refiner is not None
    assert refined.refiner.conv_in.in_channels == 2 * CHANNELS
    plain = _model(0)
    plain.load_state_dict({k: v for k, v in refined.state_dict().items()
                           if not k.startswith("refiner.")})
    torch.testing.assert_close(_run(refined, latents, representation),
                               _run(plain, latents, representation), rtol=0, atol=0)


def test_the_refiner_round_trips_and_both_output_forms_agree(tmp_path) -> None:
    model = _model(8)
    _randomise_last_convolution(model)
    latents, representation = _inputs()
    output = _run(model, latents, representation)
    assert output.shape == latents.shape
    with torch.no_grad():
        sample = model(latents, representation, timestep=torch.tensor([500, 500]),
                       ofs=torch.tensor([1.0, 1.0])).sample
    torch.testing.assert_close(sample, output, rtol=0, atol=0)
    model.save_pretrained(tmp_path)
    loaded = AnimeGamerTransformer3DModel.from_pretrained(tmp_path).eval()
    assert loaded.config.refiner_channels == 8
    torch.testing.assert_close(_run(loaded, latents, representation), output, rtol=0, atol=0)


def test_the_refiner_is_told_the_timestep_and_the_motion_scope() -> None:
    latents, representation = _inputs()
    refined, plain = _model(8), _model(0)
    plain.load_state_dict({k: v for k, v in refined.state_dict().items()
                           if not k.startswith("refiner.")})
    _randomise_last_convolution(refined)

    def correction(timestep: int, scope: float) -> torch.Tensor:
        return (_run(refined, latents, representation, timestep, scope)
                - _run(plain, latents, representation, timestep, scope))

    base = correction(500, 1.0)
    assert base.abs().mean() > 0
    assert not torch.allclose(correction(100, 1.0), base)
    assert not torch.allclose(correction(500, 5.0), base)


def test_the_correction_of_a_latent_pixel_reads_only_its_neighbourhood() -> None:
    """Three 3×3×3 convolutions: a change at one position of the noisy latent moves the
    correction at most 3 positions away in frame, row and column."""
    refiner = LatentRefiner(CHANNELS, 8, 32).eval()
    with torch.no_grad():
        refiner.conv_out.weight.normal_(0, 0.1)
    generator = torch.Generator().manual_seed(3)
    prediction = torch.randn(1, 9, CHANNELS, 12, 12, generator=generator)
    noisy = torch.randn(1, 9, CHANNELS, 12, 12, generator=generator)
    embedding = torch.randn(1, 32, generator=generator)
    bumped = noisy.clone()
    bumped[0, 4, :, 6, 6] += 5.0
    with torch.no_grad():
        change = (refiner(prediction, bumped, embedding)
                  - refiner(prediction, noisy, embedding)).abs().sum(dim=(0, 2))
    assert change[1:8, 3:10, 3:10].sum() > 0
    inside = torch.zeros_like(change, dtype=torch.bool)
    inside[1:8, 3:10, 3:10] = True
    assert not change[~inside].any()


def test_bad_refiner_widths_are_refused() -> None:
    with pytest.raises(ValueError, match="refiner_channels"):
        _model(-1)
    with pytest.raises(ValueError, match="output channels"):
        AnimeGamerTransformer3DModel(**{**tiny_transformer_config(64), "refiner_channels": 4,
                                        "out_channels": 8})
