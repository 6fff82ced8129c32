"""Frame-correlated diffusion noise: its covariance, its whitening, and that the decoder is trained
and sampled with the noise its transformer's config names."""

from __future__ import annotations

import pytest
import torch
from diffusers.schedulers.scheduling_dpm_cogvideox import CogVideoXDPMScheduler

from animegamer.models.noise_prior import FrameCorrelatedNoise
from animegamer.models.tiny_decoder import tiny_transformer_config
from animegamer.models.transformers.transformer_nano import NanoTransformer3DModel
from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline
from animegamer.pipelines.animegamer.sampling import scheduler_config
from animegamer.pipelines.animegamer.tiny import tiny_pipeline
from animegamer.train import decoder_model
from animegamer.train.recipe import TinyInit


def frame_correlation(x: torch.Tensor) -> float:
    """Mean correlation between different frames (dim 1) of zero-mean noise."""
    frames = x.transpose(0, 1).reshape(x.shape[1], -1)
    covariance = frames @ frames.T / frames.shape[1]
    variance = covariance.diagonal().mean()
    off_diagonal = covariance.sum() - covariance.diagonal().sum()
    count = x.shape[1] * (x.shape[1] - 1)
    return float(off_diagonal / count / variance)


@pytest.mark.parametrize("rho", [0.0, 0.5, 0.9])
def test_samples_have_the_named_covariance_over_frames(rho: float) -> None:
    noise = FrameCorrelatedNoise(rho).sample((64, 5, 4, 8, 12), torch.Generator().manual_seed(0))
    assert abs(noise.var().item() - 1.0) < 0.03
    assert abs(frame_correlation(noise) - rho) < 0.03


def test_whitening_undoes_coloring_and_makes_the_noise_independent() -> None:
    prior = FrameCorrelatedNoise(0.9)
    x = torch.randn(3, 17, 4, 6, 5, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(prior.whiten(prior.color(x)), x, rtol=0, atol=1e-5)
    white = prior.whiten(prior.sample((64, 5, 4, 8, 12), torch.Generator().manual_seed(2)))
    assert abs(frame_correlation(white)) < 0.03
    assert abs(white.var().item() - 1.0) < 0.03


def test_the_diffusion_in_the_whitened_space_is_the_standard_one() -> None:
    """whiten(x_t) = add_noise(whiten(x0), whiten(ε), t), and so for v: the sampler may run on
    whitened latents with a stock scheduler."""
    prior = FrameCorrelatedNoise(0.8)
    scheduler = CogVideoXDPMScheduler(**scheduler_config())
    generator = torch.Generator().manual_seed(3)
    x0 = torch.randn(2, 5, 4, 8, 12, generator=generator)
    noise = prior.sample(tuple(x0.shape), generator)
    t = torch.tensor([100, 700])
    torch.testing.assert_close(
        prior.whiten(scheduler.add_noise(x0, noise, t)),
        scheduler.add_noise(prior.whiten(x0), prior.whiten(noise), t), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        prior.whiten(scheduler.get_velocity(x0, noise, t)),
        scheduler.get_velocity(prior.whiten(x0), prior.whiten(noise), t), rtol=1e-5, atol=1e-5)


def test_independent_noise_is_left_as_it_is() -> None:
    prior = FrameCorrelatedNoise()
    x = torch.randn(1, 5, 2, 3, 3)
    assert prior.is_independent and prior.color(x) is x and prior.whiten(x) is x


@pytest.mark.parametrize("rho", [-0.1, 1.0])
def test_a_correlation_outside_0_to_1_is_refused(rho: float) -> None:
    with pytest.raises(ValueError, match="noise correlation must be in"):
        FrameCorrelatedNoise(rho)
    with pytest.raises(ValueError, match="noise correlation must be in"):
        NanoTransformer3DModel(**tiny_transformer_config(64), noise_correlation=rho)
    with pytest.raises(ValueError, match="noise_correlation"):
        TinyInit(noise_correlation=rho)


def _tiny_pipeline(rho: float) -> AnimeGamerPipeline:
    """The project's tiny random pipeline, its transformer told it was trained at `rho`."""
    pipeline = tiny_pipeline()
    pipeline.transformer.register_to_config(noise_correlation=rho)
    pipeline.set_progress_bar_config(disable=True)
    return pipeline


@pytest.mark.parametrize("rho", [0.0, 0.9])
def test_the_pipeline_feeds_its_network_the_noise_it_was_trained_on(rho: float) -> None:
    pipeline = _tiny_pipeline(rho)
    seen: list[torch.Tensor] = []
    handle = pipeline.transformer.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs["hidden_states"].clone()),
        with_kwargs=True,
    )
    representation = torch.randn(8, 226, 64, generator=torch.Generator().manual_seed(4))
    frames = pipeline(representation, 3, num_inference_steps=2,
                      generator=torch.Generator().manual_seed(5), output_type="latent").frames
    handle.remove()
    assert frames.shape == (8, 5, 16, 8, 12)
    # the first step's input is pure noise (init_noise_sigma 1)
    assert abs(frame_correlation(seen[0]) - rho) < 0.05


@pytest.mark.parametrize("rho", [0.0, 0.9])
def test_training_noises_the_latents_with_the_transformers_prior(rho: float) -> None:
    pipeline = _tiny_pipeline(rho)
    seen: list[torch.Tensor] = []

    def recording_model(noisy: torch.Tensor, timesteps: torch.Tensor, scopes: torch.Tensor
                        ) -> torch.Tensor:
        seen.append(noisy)
        return torch.zeros_like(noisy)

    decoder_model.v_prediction_loss(
        recording_model, pipeline.scheduler, torch.zeros(32, 5, 16, 8, 12), torch.ones(32),
        torch.Generator().manual_seed(6), noise=pipeline.noise_prior,
    )
    assert abs(frame_correlation(seen[0]) - rho) < 0.05
