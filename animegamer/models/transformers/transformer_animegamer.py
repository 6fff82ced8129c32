"""`AnimeGamerTransformer3DModel`: the CogVideoX-2B transformer conditioned on the game-state
model's representation and a motion scope (docs/design.md §4), and its motion-scope table."""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral
from typing import Any

import torch

# The classes come from their defining modules: to a type checker, diffusers' top-level names
# are its placeholder classes for a missing torch (the same objects at run time either way).
from diffusers.configuration_utils import register_to_config
from diffusers.models.embeddings import CogVideoXPatchEmbed, TimestepEmbedding, Timesteps
from diffusers.models.modeling_outputs import Transformer2DModelOutput
from diffusers.models.modeling_utils import ModelMixin  # noqa: F401  (see the class's doc)
from diffusers.models.transformers.cogvideox_transformer_3d import CogVideoXTransformer3DModel
from torch import nn

from animegamer.game.representation import REPRESENTATION_TOKENS
from animegamer.models.decoder_defaults import DEFAULT_LATENT_SIZE, DEFAULT_SAMPLE_FRAMES

DEFAULT_MOTION_SCOPES: tuple[float, ...] = (0.5, 1.0, 5.0, 20.0, 40.0)
"""The released demo's table: motion level ML 1..5 → motion-scope value."""


class PerShotLinear(nn.Linear):
    """A Linear over one vector per shot ([B, in] → [B, out]) computed in float64 and rounded
    back. A matrix product's rounding depends on the kernel, and the kernel on the row count
    and on where the weights lie in memory (on a CPU 1 row and 4 rows round differently), so
    the same shot's embedding would differ in its last bits with the batch it is rendered in.
    In float64 those differences are far below the input's precision and vanish in the
    rounding. The layers over tokens (hundreds of rows) need not: their kernel does not change
    with the batch. A quantized weight (a tensor subclass) is multiplied as it is."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if is_tensor_subclass(self.weight.data):
            return super().forward(input)
        bias: torch.Tensor | None = self.bias  # None for a Linear made with bias=False
        exact = nn.functional.linear(input.double(), self.weight.double(),
                                     None if bias is None else bias.double())
        return exact.to(input.dtype)


class TemporalPatchEmbed(CogVideoXPatchEmbed):
    """CogVideoX's patch embedding whose sinusoidal positions count token frames, not latent
    frames, when a token spans `patch_size_t` of them. The stock class pairs `patch_size_t`
    (CogVideoX 1.5) with rotary positions only; its sinusoidal table would hold a row per
    latent frame and no longer match the tokens."""

    def _get_positional_embeddings(self, sample_height: int, sample_width: int,
                                   sample_frames: int, device: torch.device | None = None
                                   ) -> torch.Tensor:
        ratio, frames_per_token = self.temporal_compression_ratio, self.patch_size_t or 1
        token_frames = -(-((sample_frames - 1) // ratio + 1) // frames_per_token)
        return super()._get_positional_embeddings(
            sample_height, sample_width, (token_frames - 1) * ratio + 1, device
        )


class AnimeGamerTransformer3DModel(CogVideoXTransformer3DModel):
    """CogVideoX-2B with AnimeGamer's conditioning.

    * `encoder_hidden_states` are already `inner_dim` wide (the game-state model's 226-vector
      representation), so the text projection is the identity.
    * The motion scope goes through the stock `ofs` argument: sinusoid of width `inner_dim`
      (cos first, shift 0) → Linear(inner_dim, time_embed_dim) → SiLU → Linear, added to the
      timestep embedding. `ofs` holds one value per shot; a batch that repeats its shots (the
      [uncond, cond] halves of classifier-free guidance) repeats it to match, so a cache hook
      that drops the unconditional half (FasterCache) needs nothing split but the batch.
    * `uncond_representation` [226, inner_dim] is the unconditional row of the CFG batch, a
      constant of the released weights.
    * `motion_scopes` (config) maps motion level 1..5 to the scope value fed as `ofs`.
    * The per-shot layers (the timestep and motion-scope embeddings, the blocks' modulations)
      run one shot at a time (`PerShotLinear`), so a shot renders to the same numbers alone or
      in a batch of other players' shots.
    * `patch_size_t` (the release's is None) makes a token span that many latent frames, as in
      CogVideoX 1.5, with sinusoidal positions per token frame (`TemporalPatchEmbed`); a clip
      whose latent frames are not a multiple of it is padded in front with copies of its first
      frame, whose outputs are dropped.

    The config holds this class's arguments only: the parent's own (`text_embed_dim`, ...)
    follow from them and are left out through `ignore_for_config`. `ModelMixin` is imported
    into this module on purpose: diffusers resolves the loading method of a component declared
    as `[<this module>, "AnimeGamerTransformer3DModel"]` in `model_index.json` from the names
    that module holds.
    """

    # `ConfigMixin` declares it unannotated (an instance `list`), so no `ClassVar` matches it.
    ignore_for_config = [  # noqa: RUF012
        "text_embed_dim", "flip_sin_to_cos", "freq_shift", "dropout", "attention_bias",
        "activation_fn", "timestep_activation_fn", "norm_elementwise_affine",
        "use_rotary_positional_embeddings", "use_learned_positional_embeddings", "patch_bias",
        "ofs_embed_dim",
    ]

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
    ):
        if len(motion_scopes) != 5 or any(float(v) <= 0 for v in motion_scopes):
            raise ValueError(f"motion_scopes needs 5 positive values, got {list(motion_scopes)}")
        inner_dim = num_attention_heads * attention_head_dim
        super().__init__(
            num_attention_heads=num_attention_heads,
            attention_head_dim=attention_head_dim,
            in_channels=in_channels,
            out_channels=out_channels,
            time_embed_dim=time_embed_dim,
            text_embed_dim=inner_dim,
            num_layers=num_layers,
            sample_width=sample_width,
            sample_height=sample_height,
            sample_frames=sample_frames,
            patch_size=patch_size,
            patch_size_t=patch_size_t,
            temporal_compression_ratio=temporal_compression_ratio,
            max_text_seq_length=max_text_seq_length,
            norm_eps=norm_eps,
            spatial_interpolation_scale=spatial_interpolation_scale,
            temporal_interpolation_scale=temporal_interpolation_scale,
        )
        # diffusers declares the text projection a Linear; here it is deliberately the identity.
        self.patch_embed.text_proj = nn.Identity()  # type: ignore[assignment]
        self.norm_out.norm.eps = final_norm_eps
        self.ofs_proj = Timesteps(inner_dim, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.ofs_embedding = TimestepEmbedding(inner_dim, time_embed_dim, "silu")
        self.register_buffer(
            "uncond_representation", torch.zeros(max_text_seq_length, inner_dim), persistent=True
        )
        if patch_size_t is not None:
            embed = self.patch_embed
            embed.__class__ = TemporalPatchEmbed
            table = embed._get_positional_embeddings(sample_height, sample_width, sample_frames)
            embed.register_buffer("pos_embedding", table, persistent=False)
        per_shot: list[Any] = [self.time_embedding, self.ofs_embedding, self.norm_out]
        for block in self.transformer_blocks:
            per_shot += [block.norm1, block.norm2]
        for module in per_shot:
            for layer in module.modules():
                if type(layer) is nn.Linear:
                    layer.__class__ = PerShotLinear

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
    ) -> tuple[torch.Tensor] | Transformer2DModelOutput:
        """The parent's forward, with `ofs` repeated over the batch's copies of its shots and
        the clip padded to whole temporal patches."""
        batch = hidden_states.shape[0]
        if isinstance(ofs, torch.Tensor) and ofs.ndim == 1 and ofs.shape[0] != batch:
            if batch % ofs.shape[0]:
                raise ValueError(f"ofs has {ofs.shape[0]} values for a batch of {batch}")
            ofs = ofs.repeat(batch // ofs.shape[0])
        padding = -hidden_states.shape[1] % (self.patch_embed.patch_size_t or 1)
        if padding:
            first = hidden_states[:, :1].expand(-1, padding, -1, -1, -1)
            hidden_states = torch.cat([first, hidden_states], dim=1)
        output = super().forward(hidden_states, encoder_hidden_states, timestep, timestep_cond,
                                 ofs, image_rotary_emb, attention_kwargs, return_dict=False)[0]
        output = output[:, padding:]
        return Transformer2DModelOutput(sample=output) if return_dict else (output,)


def is_tensor_subclass(tensor: torch.Tensor) -> bool:
    """A tensor of a subclass (a quantized weight), not a plain one."""
    return type(tensor) is not torch.Tensor


def is_int(value: object) -> bool:
    """An integral number (numpy's too), not a bool. (`int` is an `Integral` only at run time:
    type checkers do not see the ABC registration, so this is not a type guard.)"""
    return isinstance(value, Integral) and not isinstance(value, bool)


def motion_scope(config_or_model: object, level: int) -> float:
    """The motion-scope value of motion level `level` (1..5) from a transformer or its config."""
    # duck-typed: a model, its config (a dict), or any object with a `motion_scopes` attribute
    config: Any = getattr(config_or_model, "config", config_or_model)
    table = config["motion_scopes"] if isinstance(config, dict) else config.motion_scopes
    if not is_int(level) or not 1 <= level <= len(table):
        raise ValueError(f"motion level must be an int in 1..{len(table)}, got {level!r}")
    return float(table[int(level) - 1])
