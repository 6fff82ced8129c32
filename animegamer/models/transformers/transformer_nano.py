"""`NanoTransformer3DModel`: AnimeGamer's transformer with the three aids a decoder trained from
scratch on a CPU needs and the release does not have (docs/nano.md, docs/nano-experiments.md).
Only the tiny CPU recipes build it (`decoder.init.tiny`); converted release weights never do."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from diffusers.configuration_utils import register_to_config
from diffusers.models.embeddings import Timesteps
from diffusers.models.modeling_outputs import Transformer2DModelOutput
from diffusers.models.modeling_utils import ModelMixin  # noqa: F401  (see the parent's doc)
from torch import nn

from animegamer.game.representation import IMAGE_TOKENS, REPRESENTATION_TOKENS, TEXT_TOKENS
from animegamer.models.decoder_defaults import DEFAULT_LATENT_SIZE, DEFAULT_SAMPLE_FRAMES
from animegamer.models.noise_prior import FrameCorrelatedNoise
from animegamer.models.transformers.transformer_animegamer import (
    DEFAULT_MOTION_SCOPES,
    AnimeGamerTransformer3DModel,
)


class NanoTransformer3DModel(AnimeGamerTransformer3DModel):
    """AnimeGamer's transformer plus, in its config:

    * `motion_scope_scale` multiplies the scope before its sinusoid. The release's scopes span
      0.5–40 at scale 1; a world whose scopes span 1–7 sets it to ~100, so they spread over the
      frequencies as timesteps 0–999 do (at 1 only the few fastest channels tell 1 from 7).
    * `noise_correlation` is the correlation over frames of the diffusion noise the model was
      trained on and is sampled with (`FrameCorrelatedNoise`, through the pipeline's
      `noise_prior`); the release's noise is independent.
    * `reference_channels` > 0 adds a spatial reference, as CogVideoX's image-to-video model
      concatenates an image's latent to the noisy one: the representation's image tokens (the
      first frame's 14×14 patch grid) are projected to that many channels, resized to the
      latent's height and width and given to every latent frame as extra input channels (the
      background stays where the first frame has it). Joint attention alone has to learn which
      of the 196 tokens lies where in the latent; a model trained from scratch on a CPU does not
      learn that in its budget and paints an average scene.
    * `scene_channels` > 0 (the VAE's latent channels) draws on a known scene: the latent of the
      background the instruction names (its place at its time of day, as the world paints it
      without anyone in it) is given to every latent frame as extra input channels, and the
      model denoises the clip's difference from it (`forward`'s `scene`). Its background is
      then exact from the first step and what it learns is the figure; the pipeline maps its
      prediction back to the whole clip (`AnimeGamerPipeline.predict_fn`).
    """

    @register_to_config
    def __init__(
        self,
        num_attention_heads: int = 30,
        attention_head_dim: int = 64,
        in_channels: int = 16,
        out_channels: int = 16,
        time_embed_dim: int = 512,
        num_layers: int = 30,
        sample_width: int = DEFAULT_LATENT_SIZE[1],
        sample_height: int = DEFAULT_LATENT_SIZE[0],
        sample_frames: int = DEFAULT_SAMPLE_FRAMES,
        patch_size: int = 2,
        patch_size_t: int | None = None,
        temporal_compression_ratio: int = 4,
        max_text_seq_length: int = REPRESENTATION_TOKENS,
        norm_eps: float = 1e-5,
        final_norm_eps: float = 1e-6,
        spatial_interpolation_scale: float = 1.875,
        temporal_interpolation_scale: float = 1.0,
        motion_scopes: Sequence[float] = DEFAULT_MOTION_SCOPES,
        motion_scope_scale: float = 1.0,
        noise_correlation: float = 0.0,
        reference_channels: int = 0,
        scene_channels: int = 0,
    ):
        # the parent's arguments as given: all of this signature but the aids
        release = {name: value for name, value in locals().items()
                   if name not in ("self", "__class__", "motion_scope_scale",
                                   "noise_correlation", "reference_channels", "scene_channels")}
        FrameCorrelatedNoise(noise_correlation)  # checks its range
        if reference_channels < 0:
            raise ValueError(f"reference_channels must be at least 0, got {reference_channels}")
        if scene_channels not in (0, in_channels):
            raise ValueError(f"scene_channels must be 0 or the latent's {in_channels} channels, "
                             f"got {scene_channels}")
        if motion_scope_scale <= 0:
            raise ValueError(f"motion_scope_scale must be positive, got {motion_scope_scale}")
        extra = reference_channels + scene_channels
        super().__init__(**{**release, "in_channels": in_channels + extra})
        # The parent recorded the channels its patch embedding reads, the extra ones included.
        self.register_to_config(in_channels=in_channels)
        inner_dim = num_attention_heads * attention_head_dim
        # `Timesteps` annotates `scale` as int; it only multiplies the sinusoid's arguments
        self.ofs_proj = Timesteps(
            inner_dim, flip_sin_to_cos=True, downscale_freq_shift=0,
            scale=motion_scope_scale,  # type: ignore[arg-type]
        )
        self.reference_proj = (
            nn.Linear(inner_dim, reference_channels) if reference_channels else None
        )

    def spatial_reference(self, encoder_hidden_states: torch.Tensor, frames: int, height: int,
                          width: int) -> torch.Tensor:
        """[B, frames, reference_channels, height, width]: the image tokens' projection laid on
        their 14×14 grid and resized to the latent, the same in every frame."""
        assert self.reference_proj is not None
        batch = encoder_hidden_states.shape[0]
        side = math.isqrt(IMAGE_TOKENS)
        grid = self.reference_proj(encoder_hidden_states[:, TEXT_TOKENS:])
        grid = grid.transpose(1, 2).reshape(batch, -1, side, side)
        reference = nn.functional.interpolate(grid, size=(height, width), mode="bilinear",
                                              align_corners=False)
        return reference[:, None].expand(batch, frames, *reference.shape[1:])

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        timestep: int | float | torch.LongTensor,
        timestep_cond: torch.Tensor | None = None,
        ofs: int | float | torch.Tensor | None = None,
        image_rotary_emb: tuple[torch.Tensor, torch.Tensor] | None = None,
        attention_kwargs: dict[str, Any] | None = None,
        return_dict: bool = True,
        scene: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor] | Transformer2DModelOutput:
        """The parent's forward, with the spatial reference and the scene (the background's
        latent [B, C, H, W], scaled as the clip's; required when `scene_channels` > 0, for the
        noisy difference from it in `hidden_states`) concatenated to the latent's channels when
        the model has them."""
        channels = int(self.config["scene_channels"])
        if (scene is None) != (channels == 0):
            raise ValueError(f"give a scene latent exactly when the model has scene_channels "
                             f"({channels})")
        if scene is not None:
            frames = hidden_states.shape[1]
            scene = scene[:, None].expand(-1, frames, -1, -1, -1).to(hidden_states.dtype)
            hidden_states = torch.cat([hidden_states, scene], dim=2)
        if self.reference_proj is not None:
            frames, _, height, width = hidden_states.shape[1:]
            reference = self.spatial_reference(encoder_hidden_states, frames, height, width)
            hidden_states = torch.cat([hidden_states, reference.to(hidden_states.dtype)], dim=2)
        return super().forward(hidden_states, encoder_hidden_states, timestep, timestep_cond,
                               ofs, image_rotary_emb, attention_kwargs, return_dict)
