"""A convolutional refiner on the decoder transformer's output, at the latent's resolution.

The transformer sees a clip as patches (4×4 latent pixels in the Nano world), and its output
projection writes each patch's pixels from one token through a linear map. A Nano sprite is
about 2×4 latent pixels and moves 0.5–2 latent pixels a frame, so its shape and its motion lie
inside a patch, where attention has nothing to say and the linear map has to learn each
sub-patch shift on its own. Small 3-D convolutions see neighbouring pixels in space and time and
are the same everywhere, which is how a shift is written. The refiner reads the transformer's
prediction beside the noisy latent it was made from, is told the timestep and the motion scope
(the transformer's own embedding of both), and adds a correction; its last convolution starts
at zero, so a new refiner leaves the transformer's output as it is.
"""

from __future__ import annotations

import torch
from torch import nn


class LatentRefiner(nn.Module):
    """prediction, noisy latent [B, F, C, H, W] and embedding [B, E] → prediction + correction.

    Three 3×3×3 convolutions (`channels` wide, SiLU between them); the embedding enters as a
    per-channel shift after the first.
    """

    def __init__(self, latent_channels: int, channels: int, embedding_dim: int) -> None:
        super().__init__()
        if channels <= 0:
            raise ValueError(f"refiner channels must be positive, got {channels}")
        self.conv_in = nn.Conv3d(2 * latent_channels, channels, 3, padding=1)
        self.embedding_proj = nn.Linear(embedding_dim, channels)
        self.conv_mid = nn.Conv3d(channels, channels, 3, padding=1)
        self.conv_out = nn.Conv3d(channels, latent_channels, 3, padding=1)
        nn.init.zeros_(self.conv_out.weight)
        assert self.conv_out.bias is not None
        nn.init.zeros_(self.conv_out.bias)
        self.act = nn.SiLU()

    def forward(self, prediction: torch.Tensor, noisy: torch.Tensor,
                embedding: torch.Tensor) -> torch.Tensor:
        hidden = torch.cat([prediction, noisy.to(prediction.dtype)], dim=2).transpose(1, 2)
        hidden = self.conv_in(hidden)
        hidden = hidden + self.embedding_proj(self.act(embedding))[:, :, None, None, None]
        hidden = self.conv_mid(self.act(hidden))
        correction = self.conv_out(self.act(hidden)).transpose(1, 2)
        return prediction + correction
