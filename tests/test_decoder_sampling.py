"""The sampling loop against the original sampler's recorded 50-step trajectory, and a tiny turn."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import diffusers.schedulers.scheduling_dpm_cogvideox as dpm_module
import imageio.v2 as imageio
import numpy as np
import pytest
import torch
from diffusers import CogVideoXDPMScheduler
from safetensors.torch import load_file

from animegamer.models.decoder import (
    AnimeGamerDecoder,
    denoising_step,
    dynamic_guidance_scale,
    guided_prediction,
    sample_latents,
    scheduler_config,
)
from animegamer.models.tiny_decoder import save_tiny_decoder
from animegamer.video import write_mp4

STEPS = 50
PER_STEP_TOLERANCE = 5e-3  # relative (Frobenius), DESIGN §4
FINAL_TOLERANCE = 1e-2


@pytest.fixture(scope="module")
def trajectory(reference_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(reference_dir / "decoder" / "decoder_sample_trajectory.safetensors")


@pytest.fixture()
def scheduler() -> CogVideoXDPMScheduler:
    scheduler = CogVideoXDPMScheduler(**scheduler_config())
    scheduler.set_timesteps(STEPS)
    return scheduler


def _relative(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual - expected).norm() / expected.norm()).item()


def _replay(monkeypatch: pytest.MonkeyPatch, draws: list[torch.Tensor]) -> None:
    """Make the scheduler's noise draws return the recorded ones, in order."""
    queue: Iterator[torch.Tensor] = iter(draws)

    def recorded(shape, generator=None, device=None, dtype=None, layout=None):
        draw = next(queue)
        assert tuple(draw.shape) == tuple(shape)
        return draw.to(device=device, dtype=dtype)

    monkeypatch.setattr(dpm_module, "randn_tensor", recorded)


@pytest.mark.reference
def test_timesteps_and_cfg_scales_are_exact(trajectory, scheduler):
    assert scheduler.timesteps.flip(0).tolist() == trajectory["timesteps"].tolist()
    scales = [dynamic_guidance_scale(int(t), STEPS, 6.0) for t in scheduler.timesteps]
    assert scales == trajectory["cfg_scale"][:, 1].tolist()


@pytest.mark.reference
def test_each_step_tracks_the_reference(trajectory, scheduler, monkeypatch):
    draws = trajectory["randn_like"]
    errors = []
    for i, t in enumerate(scheduler.timesteps):
        # reference draws: step 0 uses draw 0, steps 1..48 draw twice (2i-1, 2i), step 49 none;
        # the scheduler draws once more at the last step, where the noise coefficient is 0
        if i == 0:
            step_draws = [draws[0]]
        elif i < STEPS - 1:
            step_draws = [draws[2 * i - 1], draws[2 * i]]
        else:
            step_draws = [torch.full_like(draws[0], 1e3)]
        _replay(monkeypatch, step_draws)
        scale = dynamic_guidance_scale(int(t), STEPS, 6.0)
        previous = trajectory["step_denoised"][i - 1] if i else None
        latents, x0 = denoising_step(
            scheduler,
            guided_prediction(trajectory["net_out"][i], scale),
            i,
            trajectory["step_x_in"][i],
            previous,
        )
        assert latents.dtype == torch.float32
        errors.append(_relative(latents, trajectory["step_x_out"][i]))
        assert _relative(x0, trajectory["step_denoised"][i]) <= PER_STEP_TOLERANCE
    assert max(errors) <= PER_STEP_TOLERANCE, f"per-step relative errors {errors}"


@pytest.mark.reference
def test_whole_loop_reproduces_the_final_latent(trajectory, scheduler, monkeypatch):
    _replay(monkeypatch, [*trajectory["randn_like"], torch.zeros_like(trajectory["init_noise"])])
    seen: list[tuple[int, int]] = []

    def predict(latents: torch.Tensor, timestep: torch.Tensor) -> torch.Tensor:
        i = len(seen)
        assert int(timestep) == int(trajectory["net_t"][i, 0])
        assert _relative(latents, trajectory["net_in"][i, :1]) <= FINAL_TOLERANCE
        return trajectory["net_out"][i]

    final = sample_latents(
        scheduler,
        predict,
        trajectory["init_noise"],
        num_inference_steps=STEPS,
        guidance_scale=6.0,
        callback=lambda done, total: seen.append((done, total)),
    )
    assert seen == [(i, STEPS) for i in range(1, STEPS + 1)]
    error = _relative(final, trajectory["samples_z"])
    assert error <= FINAL_TOLERANCE, f"final relative error {error:.3e}"


@pytest.fixture(scope="module")
def tiny_decoder(tmp_path_factory: pytest.TempPathFactory) -> AnimeGamerDecoder:
    return AnimeGamerDecoder.from_pretrained(save_tiny_decoder(tmp_path_factory.mktemp("tiny")))


def test_tiny_turn_is_seeded_and_reports_progress(tiny_decoder):
    representation = torch.randn(1, 226, 64, generator=torch.Generator().manual_seed(5))
    progress: list[tuple[int, int]] = []
    first = tiny_decoder.sample(
        representation,
        3,
        num_inference_steps=4,
        generator=7,
        callback=lambda done, total: progress.append((done, total)),
    )
    again = tiny_decoder.sample(
        representation, 3, num_inference_steps=4, generator=torch.Generator().manual_seed(7)
    )
    other_level = tiny_decoder.sample(representation, 5, num_inference_steps=4, generator=7)
    assert progress == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert first.shape == (1, 5, 16, 8, 12) and first.dtype == torch.float32
    torch.testing.assert_close(first, again, rtol=0, atol=0)
    assert (first - other_level).abs().max() > 1e-4
    with pytest.raises(ValueError, match="representation"):
        tiny_decoder.sample(torch.zeros(1, 10, 64), 3)
    with pytest.raises(ValueError, match="motion level"):
        tiny_decoder.sample(representation, 0)


def test_tiny_turn_to_mp4(tiny_decoder, tmp_path):
    frames = tiny_decoder(torch.randn(1, 226, 64), 2, num_inference_steps=8, generator=0)
    assert frames.shape == (17, 64, 96, 3) and frames.dtype == np.uint8
    reader = imageio.get_reader(str(write_mp4(frames, tmp_path / "turn.mp4")), format="FFMPEG")
    decoded = np.stack(list(reader.iter_data()))
    reader.close()
    assert decoded.shape == (17, 64, 96, 3)
