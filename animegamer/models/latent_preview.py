"""Live previews of a clip while it denoises: a linear latent → RGB map, fitted once against a
character's VAE, applied to the sampler's clean-latent estimate every few steps.

A denoising step's x0 estimate (`pred_original_sample`) is a blurry version of the final
latent early on and the final latent at the end. Decoding it with the VAE would cost about as
much as the turn's own decode; a latent pixel's colour, though, is close to a linear function
of its channels, so `LatentPreview` maps each latent pixel to RGB with a `[3, C]` matrix and a
bias, fitted by least squares on a few images encoded and decoded by the character's VAE. It
decodes the first, middle and last latent frame at the latent's resolution (a small image:
60×90 for the release, 16×24 for Nano), in well under a millisecond.

The map is stored with the character, as `preview.safetensors` in its folder: `for_folder`
reads it, or fits it (seconds on a CPU for the real VAE, milliseconds for tiny ones) and
writes it there when the folder is writable, so it is fitted once per character folder.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from diffusers.callbacks import PipelineCallback
from diffusers.models.autoencoders.autoencoder_kl_cogvideox import AutoencoderKLCogVideoX
from safetensors.torch import load_file, save_file
from torch import nn

logger = logging.getLogger(__name__)

PREVIEW_FILE = "preview.safetensors"
"""The fitted map in a character folder (tensors `weight` [3, C] and `bias` [3])."""
FIT_IMAGES = 8
FIT_LATENT_SIZE = 8
"""The fit encodes FIT_IMAGES single-frame images whose latent is FIT_LATENT_SIZE² pixels."""
PREVIEWS_PER_TURN = 4
"""A turn of N steps previews every max(1, N // PREVIEWS_PER_TURN) steps, never at the last
(the clip itself follows): 3 previews at 8 steps, 3 at 12, 4 at 50."""


@dataclass(frozen=True)
class ClipPreview:
    """A preview of the clip being denoised: after `step` of `num_steps` steps, `frames` are
    uint8 [3, h, w, 3], the first, middle and last latent frame of the clip's x0 estimate."""

    step: int
    num_steps: int
    frames: np.ndarray

    def strip(self, scale: int = 1) -> np.ndarray:
        """The three frames side by side, [h·scale, 3·w·scale, 3] uint8 (nearest upscaling)."""
        strip = np.concatenate(list(self.frames), axis=1)
        return strip.repeat(scale, axis=0).repeat(scale, axis=1)


class LatentPreview(nn.Module):
    """The linear latent → RGB map of one VAE: `rgb = weight @ latent + bias`, in [0, 1], for
    the pipeline's latents (the VAE's latent times its scaling factor)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor):
        super().__init__()
        if weight.ndim != 2 or weight.shape[0] != 3 or tuple(bias.shape) != (3,):
            raise ValueError(f"a preview map is weight [3, C] and bias [3], got "
                             f"{tuple(weight.shape)} and {tuple(bias.shape)}")
        self.weight: torch.Tensor
        self.bias: torch.Tensor
        self.register_buffer("weight", weight.float().cpu())
        self.register_buffer("bias", bias.float().cpu())

    @classmethod
    @torch.no_grad()
    def fit(cls, vae: AutoencoderKLCogVideoX, seed: int = 0) -> LatentPreview:
        """Least squares from latent pixels to the colour the VAE decodes there, on
        `FIT_IMAGES` smooth random colour images encoded and decoded by `vae`."""
        spatial = 2 ** (len(vae.config["block_out_channels"]) - 1)
        generator = torch.Generator().manual_seed(seed)
        coarse = torch.rand(FIT_IMAGES, 3, 4, 4, generator=generator)
        size = FIT_LATENT_SIZE * spatial
        images = nn.functional.interpolate(coarse, size=(size, size), mode="bilinear")
        video = (2.0 * images - 1.0)[:, :, None].to(device=vae.device, dtype=vae.dtype)
        latent = vae.encode(video).latent_dist.mean
        decoded = vae.decode(latent).sample.float()[:, :, 0]
        colour = nn.functional.avg_pool2d(((decoded + 1.0) / 2.0).clamp(0.0, 1.0), spatial)
        channels = (latent.float()[:, :, 0] * vae.config["scaling_factor"]).cpu()
        inputs = channels.permute(0, 2, 3, 1).reshape(-1, channels.shape[1])
        targets = colour.cpu().permute(0, 2, 3, 1).reshape(-1, 3)
        design = torch.cat([inputs, torch.ones(len(inputs), 1)], dim=1).double()
        solution = torch.linalg.lstsq(design, targets.double()).solution.float()
        return cls(solution[:-1].T.contiguous(), solution[-1].contiguous())

    @classmethod
    def load(cls, path: str | Path) -> LatentPreview:
        tensors = load_file(str(path))
        return cls(tensors["weight"], tensors["bias"])

    def save(self, path: str | Path) -> Path:
        target = Path(path)
        save_file({"weight": self.weight, "bias": self.bias}, str(target),
                  metadata={"format": "pt"})
        return target

    @classmethod
    def for_folder(cls, folder: str | Path, vae: AutoencoderKLCogVideoX) -> LatentPreview:
        """The character folder's map: read from `preview.safetensors`, or fitted against
        `vae` and written there (kept in memory only when the folder is read-only)."""
        path = Path(folder) / PREVIEW_FILE
        if path.is_file():
            return cls.load(path)
        preview = cls.fit(vae)
        try:
            preview.save(path)
        except OSError as error:
            logger.warning("live-preview map not saved to %s (%s); fitted again next load",
                           path, error)
        return preview

    @torch.no_grad()
    def decode(self, latents: torch.Tensor) -> np.ndarray:
        """One clip's latents [T, C, h, w] → uint8 [3, h, w, 3]: its first, middle and last
        frame."""
        frames = latents[[0, latents.shape[0] // 2, latents.shape[0] - 1]].float().cpu()
        rgb = torch.einsum("oc,tchw->thwo", self.weight, frames) + self.bias
        return (255.0 * rgb.clamp(0.0, 1.0)).to(torch.uint8).numpy()


def preview_due(step_index: int, num_steps: int) -> bool:
    """Whether a turn of `num_steps` steps previews after step `step_index` (0-based)."""
    every = max(1, num_steps // PREVIEWS_PER_TURN)
    done = step_index + 1
    return done % every == 0 and done < num_steps


class LatentPreviewCallback(PipelineCallback):
    """`callback_on_step_end` of `AnimeGamerPipeline` that hands `on_preview` a `ClipPreview`
    of shot `shot` (the batch's first by default) when `preview_due`, decoded by `preview` from
    the step's x0 estimate:

        pipeline(representation, 3, callback_on_step_end=LatentPreviewCallback(map, show))
    """

    def __init__(self, preview: LatentPreview, on_preview: Callable[[ClipPreview], None],
                 shot: int = 0):
        super().__init__()
        self.preview = preview
        self.on_preview = on_preview
        self.shot = shot

    @property
    def tensor_inputs(self) -> list[str]:
        """The pipeline tensors the callback reads: the step's x0 estimate."""
        return ["pred_original_sample"]

    def callback_fn(self, pipeline: Any, step_index: int, timestep: Any,
                    callback_kwargs: dict[str, Any]) -> dict[str, Any]:
        steps = pipeline.num_timesteps
        if preview_due(step_index, steps):
            # the sampler's space is whitened under frame-correlated noise: colour it back
            shot = callback_kwargs["pred_original_sample"][self.shot : self.shot + 1]
            x0 = pipeline.noise_prior.color(shot)
            self.on_preview(ClipPreview(step_index + 1, steps, self.preview.decode(x0[0])))
        return callback_kwargs
