"""A scene's latent: the background an instruction names, as a video VAE encodes it, for a
`NanoTransformer3DModel` with `scene_channels` (which draws the clip as its difference from it).

A scene is one uint8 image [H, W, 3] at the clip's size, encoded as a one-frame clip: with a VAE
that is 1× in time its latent is what a clip's latent frames hold wherever nothing moves. The
posterior's mean, scaled by the VAE's `scaling_factor` as training latents are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

SceneSource = Callable[[str, str], np.ndarray]
"""`scene(time, place)` → the background a world paints for that time of day and place, uint8
[H, W, 3] with nobody in it."""


def scene_latents(vae: Any, images: np.ndarray | Sequence[np.ndarray]) -> torch.Tensor:
    """Scaled latents [B, C, h, w] (fp32, on the VAE's device) of uint8 images [B, H, W, 3]."""
    array = np.stack([np.asarray(image) for image in images])
    if array.ndim != 4 or array.shape[-1] != 3 or array.dtype != np.uint8:
        raise ValueError(f"scenes must be uint8 images [H, W, 3]; got {array.dtype} "
                         f"{list(array.shape[1:])}")
    video = torch.from_numpy(np.ascontiguousarray(array)).permute(0, 3, 1, 2)[:, :, None]
    video = video.to(device=vae.device, dtype=vae.dtype) / 127.5 - 1
    with torch.no_grad():
        mean = vae.encode(video).latent_dist.mean
    return (mean[:, :, 0] * float(vae.config.scaling_factor)).float()


def noise_levels(alphas_cumprod: torch.Tensor, timesteps: torch.Tensor) -> tuple[torch.Tensor,
                                                                                   torch.Tensor]:
    """(α_t, σ_t) [B, 1, 1, 1, 1] of a v-prediction scheduler at integer `timesteps` [B]:
    x_t = α_t·x0 + σ_t·ε and v = α_t·ε − σ_t·x0."""
    cumulative = alphas_cumprod.to(timesteps.device)[timesteps.long()].float()
    shape = (-1, 1, 1, 1, 1)
    return cumulative.sqrt().reshape(shape), (1 - cumulative).sqrt().reshape(shape)
