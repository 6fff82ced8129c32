"""The animation-shot decoder: a CogVideoX-2B transformer conditioned on the game-state model's
representation and a motion scope, its sampling loop, and the VAE decode to uint8 frames.

The pieces of a turn, in order: `dynamic_guidance_scale` and `guided_prediction` (classifier-free
guidance), `denoising_step` (one `CogVideoXDPMScheduler` step), `sample_latents` (the loop, with the
network behind a `predict` callable so it can be replayed from recorded outputs), then
`decode_latents`. `AnimeGamerDecoder` ties them to the transformer, the VAE and the scheduler.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from numbers import Integral
from pathlib import Path

import numpy as np
import torch
from diffusers import (
    AutoencoderKLCogVideoX,
    CogVideoXDPMScheduler,
    CogVideoXTransformer3DModel,
)
from diffusers.configuration_utils import register_to_config
from diffusers.models.embeddings import TimestepEmbedding, Timesteps
from torch import nn

from animegamer.game import REPRESENTATION_TOKENS

DEFAULT_MOTION_SCOPES: tuple[float, ...] = (0.5, 1.0, 5.0, 20.0, 40.0)
"""The released demo's table: motion level ML 1..5 → motion-scope value."""

DEFAULT_STEPS = 50
DEFAULT_GUIDANCE = 6.0

ProgressCallback = Callable[[int, int], None]
"""callback(steps_done, total_steps), called after every denoising step."""

PredictFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""predict(latents [1, T, C, H, W] fp32, timestep 0-d long) → network output [2, T, C, H, W]
for the [uncond, cond] batch."""


class AnimeGamerTransformer3DModel(CogVideoXTransformer3DModel):
    """CogVideoX-2B with AnimeGamer's conditioning.

    * `encoder_hidden_states` are already `inner_dim` wide (the game-state model's 226-vector
      representation), so the text projection is the identity.
    * The motion scope goes through the stock `ofs` argument: sinusoid of width `inner_dim`
      (cos first, shift 0) → Linear(inner_dim, time_embed_dim) → SiLU → Linear, added to the
      timestep embedding.
    * `uncond_representation` [226, inner_dim] is the unconditional row of the CFG batch, a
      constant of the released weights.
    * `motion_scopes` (config) maps motion level 1..5 to the scope value fed as `ofs`.
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
        sample_width: int = 90,
        sample_height: int = 60,
        sample_frames: int = 17,
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
        # The parent's own __init__ is wrapped by register_to_config: calling the wrapped one
        # would record the parent's arguments in this model's config.
        CogVideoXTransformer3DModel.__init__.__wrapped__(
            self,
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
        self.patch_embed.text_proj = nn.Identity()
        self.norm_out.norm.eps = final_norm_eps
        self.ofs_proj = Timesteps(inner_dim, flip_sin_to_cos=True, downscale_freq_shift=0)
        self.ofs_embedding = TimestepEmbedding(inner_dim, time_embed_dim, "silu")
        self.register_buffer(
            "uncond_representation", torch.zeros(max_text_seq_length, inner_dim), persistent=True
        )


def motion_scope(config_or_model: object, level: int) -> float:
    """The motion-scope value of motion level `level` (1..5) from a transformer or its config."""
    config = getattr(config_or_model, "config", config_or_model)
    table = config["motion_scopes"] if isinstance(config, dict) else config.motion_scopes
    if isinstance(level, bool) or not isinstance(level, Integral) or not 1 <= level <= len(table):
        raise ValueError(f"motion level must be an int in 1..{len(table)}, got {level!r}")
    return float(table[int(level) - 1])


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
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One DPM-Solver++(2M) SDE step from the guided v-prediction; returns (latents, x0).

    `previous_x0` is the x0 of the previous step (None at step 0). Noise comes from the
    scheduler's own `randn_tensor` draws with `generator`.
    """
    timesteps = scheduler.timesteps.tolist()
    timestep_back = timesteps[step_index - 1] if step_index > 0 else None
    latents, x0 = scheduler.step(
        noise_pred,
        previous_x0,
        timesteps[step_index],
        timestep_back,
        latents,
        generator=generator,
        return_dict=False,
    )
    return latents, x0


def sample_latents(
    scheduler: CogVideoXDPMScheduler,
    predict: PredictFn,
    latents: torch.Tensor,
    num_inference_steps: int = DEFAULT_STEPS,
    guidance_scale: float = DEFAULT_GUIDANCE,
    generator: torch.Generator | None = None,
    callback: ProgressCallback | None = None,
) -> torch.Tensor:
    """Denoise `latents` (the initial noise, [1, T, C, H, W]) in fp32 between steps.

    Step counts that divide 1000 (50, 25, 10, 8, ...) keep the scheduler's "previous timestep"
    on the trailing grid; others work but are slightly off it (a limit of the stock scheduler).
    """
    scheduler.set_timesteps(num_inference_steps, device=latents.device)
    latents = latents.float()
    x0 = None
    for i, t in enumerate(scheduler.timesteps):
        scale = dynamic_guidance_scale(int(t), num_inference_steps, guidance_scale)
        noise_pred = guided_prediction(predict(latents, t), scale)
        latents, x0 = denoising_step(scheduler, noise_pred, i, latents, x0, generator)
        if callback is not None:
            callback(i + 1, num_inference_steps)
    return latents


def frames_to_uint8(video: torch.Tensor) -> np.ndarray:
    """VAE output [1, 3, F, H, W] in [-1, 1] → uint8 [F, H, W, 3] (truncating, as the release)."""
    video = ((video[0].float() + 1.0) / 2.0).clamp(0.0, 1.0)
    return (255.0 * video).to(torch.uint8).permute(1, 2, 3, 0).cpu().numpy()


@torch.no_grad()
def decode_latents(vae: AutoencoderKLCogVideoX, latents: torch.Tensor) -> np.ndarray:
    """Latents [1, T, C, H, W] → uint8 frames [F, H, W, 3].

    The VAE decodes 2 latent frames at a time (the first call takes 3): 5 latent frames → 17.
    """
    z = latents.permute(0, 2, 1, 3, 4) / vae.config.scaling_factor
    video = vae.decode(z.to(device=vae.device, dtype=vae.dtype)).sample
    return frames_to_uint8(video)


def default_dtype(device: str | torch.device) -> torch.dtype:
    """fp16 on a GPU (what the release ran), fp32 on CPU."""
    return torch.float16 if torch.device(device).type == "cuda" else torch.float32


class AnimeGamerDecoder:
    """Representation + motion level → an animation shot (uint8 frames)."""

    def __init__(
        self,
        transformer: AnimeGamerTransformer3DModel,
        vae: AutoencoderKLCogVideoX,
        scheduler: CogVideoXDPMScheduler,
    ):
        self.transformer = transformer.eval()
        self.vae = vae.eval()
        self.scheduler = scheduler

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | None = None,
    ) -> AnimeGamerDecoder:
        """Load `path/transformer`, `path/vae` and `path/scheduler`."""
        path = Path(path)
        dtype = dtype or default_dtype(device)
        transformer = AnimeGamerTransformer3DModel.from_pretrained(
            path / "transformer", torch_dtype=dtype
        )
        vae = AutoencoderKLCogVideoX.from_pretrained(path / "vae", torch_dtype=dtype)
        scheduler = CogVideoXDPMScheduler.from_pretrained(path / "scheduler")
        return cls(transformer, vae, scheduler).to(device)

    def to(self, device: str | torch.device) -> AnimeGamerDecoder:
        self.transformer.to(device)
        self.vae.to(device)
        return self

    @property
    def device(self) -> torch.device:
        return self.transformer.device

    @property
    def dtype(self) -> torch.dtype:
        return self.transformer.dtype

    @property
    def representation_dim(self) -> int:
        return self.transformer.uncond_representation.shape[-1]

    def latent_shape(self) -> tuple[int, int, int, int, int]:
        """[1, T, C, H, W] of the latent the transformer was configured for."""
        config = self.transformer.config
        frames = (config.sample_frames - 1) // config.temporal_compression_ratio + 1
        return (1, frames, config.in_channels, config.sample_height, config.sample_width)

    def initial_latents(self, generator: torch.Generator) -> torch.Tensor:
        """fp32 standard normal noise, drawn on the generator's device then moved."""
        noise = torch.randn(self.latent_shape(), generator=generator, device=generator.device)
        return noise.to(self.device)

    def predict_fn(self, representation: torch.Tensor, scope: float) -> PredictFn:
        """The network on the [uncond, cond] batch, both rows at motion scope `scope`."""
        uncond = self.transformer.uncond_representation[None]
        context = torch.cat([uncond, representation.to(uncond)], dim=0)
        ofs = torch.full((2,), scope, device=self.device, dtype=torch.float32)

        def predict(latents: torch.Tensor, timestep: torch.Tensor) -> torch.Tensor:
            return self.transformer(
                hidden_states=latents.to(self.dtype).expand(2, -1, -1, -1, -1),
                encoder_hidden_states=context,
                timestep=timestep.reshape(1).expand(2).to(self.device),
                ofs=ofs,
                return_dict=False,
            )[0]

        return predict

    @torch.no_grad()
    def sample(
        self,
        representation: torch.Tensor,
        motion_level: int,
        num_inference_steps: int = DEFAULT_STEPS,
        guidance_scale: float = DEFAULT_GUIDANCE,
        generator: torch.Generator | int | None = None,
        callback: ProgressCallback | None = None,
    ) -> torch.Tensor:
        """The denoised fp32 latent [1, T, C, H, W] (before the VAE)."""
        expected = (1, REPRESENTATION_TOKENS, self.representation_dim)
        if tuple(representation.shape) != expected:
            got = tuple(representation.shape)
            raise ValueError(f"representation must be {expected}, got {got}")
        if not isinstance(generator, torch.Generator):
            seeded = torch.Generator("cpu")
            if generator is None:
                seeded.seed()
            else:
                seeded.manual_seed(int(generator))
            generator = seeded
        scope = motion_scope(self.transformer, motion_level)
        # a scheduler of its own: `set_timesteps` mutates it, and turns may run concurrently
        scheduler = CogVideoXDPMScheduler.from_config(self.scheduler.config)
        return sample_latents(
            scheduler,
            self.predict_fn(representation.to(self.device), scope),
            self.initial_latents(generator),
            num_inference_steps=num_inference_steps,
            guidance_scale=guidance_scale,
            generator=generator,
            callback=callback,
        )

    def __call__(
        self,
        representation: torch.Tensor,
        motion_level: int,
        num_inference_steps: int = DEFAULT_STEPS,
        guidance_scale: float = DEFAULT_GUIDANCE,
        generator: torch.Generator | int | None = None,
        callback: ProgressCallback | None = None,
    ) -> np.ndarray:
        """uint8 frames [F, H, W, 3] of the shot for `representation` [1, 226, D]."""
        latents = self.sample(
            representation,
            motion_level,
            num_inference_steps=num_inference_steps,
            guidance_scale=guidance_scale,
            generator=generator,
            callback=callback,
        )
        return decode_latents(self.vae, latents)
