"""The sampling loop against the original sampler's recorded 50-step trajectory, and the pipeline
on a tiny random decoder: seeding, callbacks, output types, batches, input checks, CPU offload."""

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

from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline
from animegamer.pipelines.animegamer.pipeline_output import AnimeGamerPipelineOutput
from animegamer.pipelines.animegamer.sampling import (
    denoising_step,
    dynamic_guidance_scale,
    guided_prediction,
    sample_latents,
    scheduler_config,
)
from animegamer.pipelines.animegamer.tiny import save_tiny_decoder
from animegamer.video.writer import write_mp4

STEPS = 50
PER_STEP_TOLERANCE = 5e-3  # relative (Frobenius), docs/design.md §4
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
    seen: list[int] = []

    def predict(latents: torch.Tensor, timestep: torch.Tensor) -> torch.Tensor:
        i = len(seen)
        assert int(timestep) == int(trajectory["net_t"][i, 0])
        assert _relative(latents, trajectory["net_in"][i, :1]) <= FINAL_TOLERANCE
        return trajectory["net_out"][i]

    def step_end(i: int, timestep: torch.Tensor, latents: torch.Tensor, x0: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        assert latents.dtype == torch.float32
        assert _relative(x0, trajectory["step_denoised"][i]) <= FINAL_TOLERANCE
        seen.append(i)
        return latents, x0

    final = sample_latents(
        scheduler,
        predict,
        trajectory["init_noise"],
        num_inference_steps=STEPS,
        guidance_scale=6.0,
        step_end=step_end,
    )
    assert seen == list(range(STEPS))
    error = _relative(final, trajectory["samples_z"])
    assert error <= FINAL_TOLERANCE, f"final relative error {error:.3e}"


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_decoder(tmp_path_factory.mktemp("tiny"))


def _load(folder: Path) -> AnimeGamerPipeline:
    pipeline = AnimeGamerPipeline.from_pretrained(folder)
    pipeline.set_progress_bar_config(disable=True)
    return pipeline


@pytest.fixture(scope="module")
def tiny_pipeline(tiny_folder: Path) -> AnimeGamerPipeline:
    return _load(tiny_folder)


def _representation(seed: int = 5, batch: int = 1) -> torch.Tensor:
    return torch.randn(batch, 226, 64, generator=torch.Generator().manual_seed(seed))


def _seeded(seed: int) -> torch.Generator:
    return torch.Generator("cpu").manual_seed(seed)


def test_tiny_shot_is_seeded_and_calls_back_every_step(tiny_pipeline):
    representation = _representation()
    calls: list[tuple[int, int, tuple]] = []

    def on_step_end(pipeline, i, t, tensors):
        assert pipeline is tiny_pipeline and pipeline.num_timesteps == 4
        calls.append((i, int(t), tuple(tensors)))
        return tensors

    first = tiny_pipeline(
        representation,
        motion_level=3,
        num_inference_steps=4,
        generator=_seeded(7),
        output_type="latent",
        callback_on_step_end=on_step_end,
    )
    assert isinstance(first, AnimeGamerPipelineOutput)
    again = tiny_pipeline(
        representation, 3, num_inference_steps=4, generator=_seeded(7), output_type="latent"
    )
    other_level = tiny_pipeline(
        representation, 5, num_inference_steps=4, generator=_seeded(7), output_type="latent"
    )
    assert calls == [(i, t, ("latents",)) for i, t in enumerate([999, 749, 499, 249])]
    assert first.frames.shape == (1, 5, 16, 8, 12) and first.frames.dtype == torch.float32
    torch.testing.assert_close(first.frames, again.frames, rtol=0, atol=0)
    assert (first.frames - other_level.frames).abs().max() > 1e-4


def test_the_callback_can_replace_the_latents(tiny_pipeline):
    def zero_at_the_end(pipeline, i, t, tensors):
        return {"latents": torch.zeros_like(tensors["latents"])} if i == 1 else tensors

    (latents,) = tiny_pipeline(
        _representation(),
        2,
        num_inference_steps=2,
        generator=_seeded(1),
        output_type="latent",
        return_dict=False,
        callback_on_step_end=zero_at_the_end,
    )
    assert not latents.any()


def test_output_types_agree(tiny_pipeline):
    kwargs = {"motion_level": 2, "num_inference_steps": 2}
    frames = tiny_pipeline(_representation(), generator=_seeded(3), **kwargs).frames
    floats = tiny_pipeline(_representation(), generator=_seeded(3), output_type="pt", **kwargs)
    assert frames.shape == (1, 17, 64, 96, 3) and frames.dtype == np.uint8
    video = floats.frames
    assert video.shape == (1, 17, 3, 64, 96) and video.dtype == torch.float32
    assert video.min() >= 0.0 and video.max() <= 1.0
    as_uint8 = (255.0 * video).to(torch.uint8).permute(0, 1, 3, 4, 2).numpy()
    np.testing.assert_array_equal(frames, as_uint8)


def test_a_batch_renders_each_shot_as_alone(tiny_pipeline):
    representations = _representation(9, batch=2)
    batch = tiny_pipeline(
        representations,
        motion_level=[1, 4],
        num_inference_steps=2,
        generator=[_seeded(10), _seeded(11)],
        output_type="latent",
    ).frames
    for index, (level, seed) in enumerate([(1, 10), (4, 11)]):
        alone = tiny_pipeline(
            representations[index : index + 1],
            motion_level=level,
            num_inference_steps=2,
            generator=_seeded(seed),
            output_type="latent",
        ).frames
        torch.testing.assert_close(batch[index : index + 1], alone, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"representation": torch.zeros(1, 10, 64)}, "representation"),
        ({"representation": torch.zeros(226, 64)}, "representation"),
        ({"representation": torch.zeros(1, 226, 32)}, "representation"),
        ({"motion_level": 0}, "motion level"),
        ({"motion_level": [1, 2, 3]}, "motion_level"),
        ({"num_inference_steps": 0}, "num_inference_steps"),
        ({"guidance_scale": float("nan")}, "guidance_scale"),
        ({"generator": [_seeded(0), _seeded(1)]}, "generators"),
        ({"latents": torch.zeros(1, 5, 16, 8, 8)}, "latents"),
        ({"output_type": "pil"}, "output_type"),
        ({"callback_on_step_end_tensor_inputs": ["noise_pred"]}, "tensor_inputs"),
    ],
)
def test_bad_arguments_are_refused_before_any_step(tiny_pipeline, arguments, message):
    steps: list[int] = []
    call = {
        "representation": _representation(),
        "motion_level": 3,
        "num_inference_steps": 2,
        "callback_on_step_end": lambda pipeline, i, t, tensors: steps.append(i) or tensors,
        **arguments,
    }
    with pytest.raises(ValueError, match=message):
        tiny_pipeline(**call)
    assert steps == []


def test_model_cpu_offload_renders_the_same_frames(tiny_pipeline, tiny_folder):
    offloaded = _load(tiny_folder)
    offloaded.enable_model_cpu_offload(device="cpu")
    assert offloaded._execution_device.type == "cpu"
    kwargs = {"motion_level": 4, "num_inference_steps": 2}
    expected = tiny_pipeline(_representation(), generator=_seeded(2), **kwargs).frames
    np.testing.assert_array_equal(
        offloaded(_representation(), generator=_seeded(2), **kwargs).frames, expected
    )


def test_tiny_shot_to_mp4(tiny_pipeline, tmp_path):
    output = tiny_pipeline(_representation(), 2, num_inference_steps=8, generator=_seeded(0))
    (frames,) = output.frames
    assert frames.shape == (17, 64, 96, 3) and frames.dtype == np.uint8
    reader = imageio.get_reader(str(write_mp4(frames, tmp_path / "turn.mp4")), format="FFMPEG")
    decoded = np.stack(list(reader.iter_data()))
    reader.close()
    assert decoded.shape == (17, 64, 96, 3)
