"""The output of `AnimeGamerPipeline`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from diffusers.utils import BaseOutput


@dataclass
class AnimeGamerPipelineOutput(BaseOutput):
    """Output of `AnimeGamerPipeline`.

    Args:
        frames: per `output_type`: `"np"` uint8 [B, F, H, W, 3] (what the game writes to mp4),
            `"pt"` float32 [B, F, 3, H, W] in [0, 1], `"latent"` the fp32 latent [B, T, C, H, W].
    """

    frames: np.ndarray | torch.Tensor

