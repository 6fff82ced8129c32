"""Diffusion noise whose frames share a part: a video decoder's noise prior.

Independent noise per frame asks a small decoder to paint the same background again in every
frame, and what it gets wrong differs frame to frame: its clips flicker. With noise whose
covariance over the frame axis is `ρ·11ᵀ + (1 − ρ)·I` (the "mixed" noise prior of PYoCo,
arXiv 2305.10474: a share `ρ` of every element's variance is common to all frames), what stays
still in a clip is noised, and so denoised, alike in every frame.

That covariance is `Σ = (1 − ρ)·(I − P) + (1 − ρ + ρT)·P` with `P` the mean over the T frames,
so `Σ^{±1/2}` only scales a tensor's frame mean and its deviations from it. A sampler runs in
the whitened space `w = Σ^{−1/2}·x`, where the diffusion `x_t = α·x_0 + σ·ε, ε ~ N(0, Σ)` is
the standard one with independent noise, and a v-prediction maps by the same linear map; so
every stock scheduler works unchanged: `color` the latents going into the network, `whiten`
its output, `color` the result. At ρ = 0 both maps are the identity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class FrameCorrelatedNoise:
    """The noise prior of correlation `correlation` (ρ, in [0, 1)) over the frame axis `dim`."""

    correlation: float = 0.0
    dim: int = 1

    def __post_init__(self) -> None:
        if not 0.0 <= self.correlation < 1.0:
            raise ValueError(f"noise correlation must be in [0, 1), got {self.correlation}")

    @property
    def is_independent(self) -> bool:
        return self.correlation == 0.0

    def _scales(self, frames: int) -> tuple[float, float]:
        """Σ^{1/2}'s factors on the deviations from the frame mean and on the mean."""
        rho = self.correlation
        return math.sqrt(1.0 - rho), math.sqrt(1.0 - rho + rho * frames)

    def _scale(self, x: torch.Tensor, deviation: float, mean: float) -> torch.Tensor:
        frame_mean = x.mean(dim=self.dim, keepdim=True)
        return deviation * (x - frame_mean) + mean * frame_mean

    def color(self, x: torch.Tensor) -> torch.Tensor:
        """`Σ^{1/2}·x`: independent standard noise → noise of this prior."""
        if self.is_independent:
            return x
        deviation, mean = self._scales(x.shape[self.dim])
        return self._scale(x, deviation, mean)

    def whiten(self, x: torch.Tensor) -> torch.Tensor:
        """`Σ^{−1/2}·x`, the inverse of `color`."""
        if self.is_independent:
            return x
        deviation, mean = self._scales(x.shape[self.dim])
        return self._scale(x, 1.0 / deviation, 1.0 / mean)

    def sample(self, shape: tuple[int, ...], generator: torch.Generator | None = None
               ) -> torch.Tensor:
        """Noise of this prior, fp32 on the generator's device."""
        device = generator.device if generator is not None else None
        return self.color(torch.randn(shape, generator=generator, device=device))


INDEPENDENT_NOISE = FrameCorrelatedNoise()
"""The release's prior: independent noise in every frame."""
