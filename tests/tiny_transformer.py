"""A batch of 2 random inputs for a tiny AnimeGamer transformer and one no-grad call of it at
timestep 500 and motion scope 1, for the transformer tests."""

from __future__ import annotations

import torch
from diffusers.models.transformers.cogvideox_transformer_3d import CogVideoXTransformer3DModel

from animegamer.game.representation import REPRESENTATION_TOKENS


def transformer_inputs(frames: int, channels: int, height: int, width: int,
                       representation_dim: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """Latents [2, frames, channels, height, width] and representations [2, 226, dim]."""
    generator = torch.Generator().manual_seed(1)
    latents = torch.randn(2, frames, channels, height, width, generator=generator)
    return latents, torch.randn(2, REPRESENTATION_TOKENS, representation_dim, generator=generator)


def run_transformer(model: CogVideoXTransformer3DModel, latents: torch.Tensor,
                    representation: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(latents, representation, timestep=torch.tensor([500, 500]),
                     ofs=torch.tensor([1.0, 1.0]), return_dict=False)[0]
