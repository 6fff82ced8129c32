"""The sampler of `AnimeGamerPipeline`, as plain functions of tensors.

The pieces of a turn, in order: `dynamic_guidance_scale` and `guided_prediction` (classifier-free
guidance), `denoising_step` (one `CogVideoXDPMScheduler` step) and `sample_latents` (the loop, with
the network behind a `predict` callable so that recorded network outputs can be replayed through
it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import torch

# From its defining module: to a type checker, diffusers' top-level names are its placeholder
# classes for a missing torch (the same objects at run time either way).
from diffusers.schedulers.scheduling_dpm_cogvideox import CogVideoXDPMScheduler

from animegamer.models.decoder_defaults import DEFAULT_GUIDANCE, DEFAULT_STEPS

PredictFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""predict(latents [B, T, C, H, W] fp32, timestep 0-d) → network output [2B, T, C, H, W] for
the [uncond, cond] batch."""

StepEndFn = Callable[
    [int, torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]
]
"""step_end(i, timestep, latents, x0) after denoising step i (0-based), x0 being the step's
clean-latent estimate → the (latents, x0) to go on with."""



def scheduler_config() -> dict:
    """`CogVideoXDPMScheduler` settings of the CogVideoX-2B sampler (v-prediction, zero SNR)."""
    return {
        "num_train_timesteps": 1000,
        "beta_start": 0.00085,
        "beta_end": 0.012,
        "beta_schedule": "scaled_linear",
        "clip_sample": False,
        "set_alpha_to_one": True,
        "steps_offset": 0,
        "prediction_type": "v_prediction",
        "timestep_spacing": "trailing",
        "rescale_betas_zero_snr": True,
        "snr_shift_scale": 3.0,
    }


def save_scheduler(out: str | Path) -> Path:
    """Write the sampler's `CogVideoXDPMScheduler` config to `out/scheduler/`; returns that."""
    target = Path(out) / "scheduler"
    CogVideoXDPMScheduler(**scheduler_config()).save_pretrained(target)
    return target


def dynamic_guidance_scale(timestep: int, num_steps: int, guidance_scale: float) -> float:
    """CogVideoX's dynamic CFG, in float64 as the original: the raw timestep `t` (0..999) against
    `N = num_steps` gives `1 + g·(1 − cos(π·((N − t)/N)^5))/2`.

    Mixing a timestep with a step count makes the scale oscillate over the run; it is what the
    release (and diffusers' CogVideoX pipeline) computes, so it is reproduced as is.
    """
    progress = (num_steps - int(timestep)) / num_steps
    return 1.0 + guidance_scale * (1.0 - math.cos(math.pi * progress**5.0)) / 2.0


def guided_prediction(network_output: torch.Tensor, scale: float) -> torch.Tensor:
    """Combine the [uncond, cond] batch: `uncond + scale·(cond − uncond)`, in fp32."""
    uncond, cond = network_output.float().chunk(2)
    return uncond + scale * (cond - uncond)


def denoising_step(
    scheduler: CogVideoXDPMScheduler,
    noise_pred: torch.Tensor,
    step_index: int,
    latents: torch.Tensor,
    previous_x0: torch.Tensor | None,
    generator: torch.Generator | list[torch.Generator] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One DPM-Solver++(2M) SDE step from the guided v-prediction; returns (latents, x0).

    `previous_x0` is the x0 of the previous step (None at step 0). Noise comes from the
    scheduler's own `randn_tensor` draws with `generator`.
    """
    timesteps = scheduler.timesteps.tolist()
    timestep_back = timesteps[step_index - 1] if step_index > 0 else None
    # diffusers types `step` narrower than it works: at step 0 the previous x0 and timestep are
    # None (its code checks for that), and `generator` goes to `randn_tensor`, which takes a list.
    latents, x0 = scheduler.step(
        noise_pred,
        previous_x0,  # type: ignore[arg-type]
        timesteps[step_index],
        timestep_back,  # type: ignore[arg-type]
        latents,
        generator=generator,  # type: ignore[arg-type]
        return_dict=False,
    )
    return latents, x0


def sample_latents(
    scheduler: CogVideoXDPMScheduler,
    predict: PredictFn,
    latents: torch.Tensor,
    num_inference_steps: int = DEFAULT_STEPS,
    guidance_scale: float | Callable[[], float] = DEFAULT_GUIDANCE,
    generator: torch.Generator | list[torch.Generator] | None = None,
    step_end: StepEndFn | None = None,
    interrupted: Callable[[], bool] | None = None,
) -> torch.Tensor:
    """Denoise `latents` (the initial noise, [B, T, C, H, W]) in fp32 between steps.

    `predict` runs the network (or replays recorded outputs). `guidance_scale` is `g` of
    `dynamic_guidance_scale`, or a function read before every step (so a callback can change
    it). `step_end` is called after every step and returns the latents and x0 to continue
    from; the loop stops early once `interrupted()` is true. Step counts that divide 1000
    (50, 25, 10, 8, ...) keep the scheduler's "previous timestep" on the trailing grid; others
    work but are slightly off it (a limit of the stock scheduler).
    """
    scheduler.set_timesteps(num_inference_steps, device=latents.device)
    latents = latents.float()
    x0 = None
    for i, t in enumerate(scheduler.timesteps):
        if interrupted is not None and interrupted():
            break
        g = guidance_scale() if callable(guidance_scale) else guidance_scale
        scale = dynamic_guidance_scale(int(t), num_inference_steps, g)
        noise_pred = guided_prediction(predict(latents, t), scale)
        latents, x0 = denoising_step(scheduler, noise_pred, i, latents, x0, generator)
        if step_end is not None:
            latents, x0 = step_end(i, t, latents, x0)
    return latents

