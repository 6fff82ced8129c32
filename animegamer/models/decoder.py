"""The animation-shot decoder: a CogVideoX-2B transformer conditioned on the game-state model's
representation and a motion scope, and `AnimeGamerPipeline`, the diffusers pipeline that renders a
shot with it.

The pieces of a turn, in order: `dynamic_guidance_scale` and `guided_prediction` (classifier-free
guidance), `denoising_step` (one `CogVideoXDPMScheduler` step) and `sample_latents` (the loop, with
the network behind a `predict` callable so that recorded network outputs can be replayed through
it); `AnimeGamerPipeline.__call__` runs that loop on its transformer and decodes the latent with
its VAE.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from numbers import Integral
from pathlib import Path
from typing import Any, ClassVar

import diffusers
import numpy as np
import torch

# The classes come from their defining modules: to a type checker, diffusers' top-level names
# are its placeholder classes for a missing torch (the same objects at run time either way).
from diffusers.callbacks import MultiPipelineCallbacks, PipelineCallback
from diffusers.configuration_utils import register_to_config
from diffusers.models.autoencoders.autoencoder_kl_cogvideox import AutoencoderKLCogVideoX
from diffusers.models.embeddings import TimestepEmbedding, Timesteps
from diffusers.models.modeling_utils import ModelMixin  # noqa: F401  (see the pipeline's doc)
from diffusers.models.transformers.cogvideox_transformer_3d import CogVideoXTransformer3DModel
from diffusers.pipelines.pipeline_loading_utils import _fetch_class_library_tuple
from diffusers.pipelines.pipeline_utils import DiffusionPipeline
from diffusers.schedulers.scheduling_dpm_cogvideox import CogVideoXDPMScheduler
from diffusers.utils import BaseOutput
from diffusers.utils.torch_utils import randn_tensor
from torch import nn

# At run time too: diffusers reads the component annotations of `__init__` when it loads.
from transformers import CLIPVisionModel, PreTrainedTokenizerBase, T5EncoderModel

from animegamer.game.representation import IMAGE_TOKENS, REPRESENTATION_TOKENS, TEXT_TOKENS
from animegamer.models.decoder_defaults import (
    DEFAULT_GUIDANCE,
    DEFAULT_LATENT_SIZE,
    DEFAULT_SAMPLE_FRAMES,
    DEFAULT_STEPS,
)
from animegamer.models.noise_prior import FrameCorrelatedNoise
from animegamer.models.shot_encoder import (
    AnimeGamerShotEncoder,
    clip_pixel_values,
    image_features,
    text_features,
)

DEFAULT_MOTION_SCOPES: tuple[float, ...] = (0.5, 1.0, 5.0, 20.0, 40.0)
"""The released demo's table: motion level ML 1..5 → motion-scope value."""

OUTPUT_TYPES = ("np", "pt", "latent")

PredictFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""predict(latents [B, T, C, H, W] fp32, timestep 0-d) → network output [2B, T, C, H, W] for
the [uncond, cond] batch."""

StepEndFn = Callable[
    [int, torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]
]
"""step_end(i, timestep, latents, x0) after denoising step i (0-based), x0 being the step's
clean-latent estimate → the (latents, x0) to go on with."""


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
    * `motion_scope_scale` multiplies the scope before its sinusoid. The release's is 1 (its
      scopes span 0.5–40). A world whose scopes span 1–7 sets it to ~100, so they spread over
      the frequencies as timesteps 0–999 do; at 1 only the few fastest channels tell 1 from 7.
    * `noise_correlation` is the correlation over frames of the diffusion noise the model was
      trained on (`FrameCorrelatedNoise`); the release's is 0, independent noise.
    * `reference_channels` > 0 adds a spatial reference, as CogVideoX's image-to-video model
      concatenates an image's latent to the noisy one: the representation's image tokens (the
      first frame's 14×14 patch grid) are projected to that many channels, resized to the
      latent's height and width and given to every latent frame as extra input channels (the
      background stays where the first frame has it; the positional embedding says which frame
      is the first). Joint attention alone has to learn which of the 196 tokens lies where in
      the latent; a model trained from scratch on a CPU does not learn that in its budget and
      paints an average scene (docs/nano-experiments.md). The release's is 0.
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
    ):
        FrameCorrelatedNoise(noise_correlation)  # checks its range
        if reference_channels < 0:
            raise ValueError(f"reference_channels must be at least 0, got {reference_channels}")
        if motion_scope_scale <= 0:
            raise ValueError(f"motion_scope_scale must be positive, got {motion_scope_scale}")
        if len(motion_scopes) != 5 or any(float(v) <= 0 for v in motion_scopes):
            raise ValueError(f"motion_scopes needs 5 positive values, got {list(motion_scopes)}")
        inner_dim = num_attention_heads * attention_head_dim
        # The parent's own __init__ is wrapped by register_to_config: calling the wrapped one
        # would record the parent's arguments in this model's config.
        CogVideoXTransformer3DModel.__init__.__wrapped__(
            self,
            num_attention_heads=num_attention_heads,
            attention_head_dim=attention_head_dim,
            in_channels=in_channels + reference_channels,
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
        # `Timesteps` annotates `scale` as int; it only multiplies the sinusoid's arguments
        self.ofs_proj = Timesteps(
            inner_dim, flip_sin_to_cos=True, downscale_freq_shift=0,
            scale=motion_scope_scale,  # type: ignore[arg-type]
        )
        self.ofs_embedding = TimestepEmbedding(inner_dim, time_embed_dim, "silu")
        self.register_buffer(
            "uncond_representation", torch.zeros(max_text_seq_length, inner_dim), persistent=True
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

    def forward(self, hidden_states: torch.Tensor, encoder_hidden_states: torch.Tensor,
                *args: Any, **kwargs: Any) -> Any:
        """The parent's forward, with the spatial reference concatenated to the latent's
        channels when the model has one."""
        if self.reference_proj is not None:
            frames, _, height, width = hidden_states.shape[1:]
            reference = self.spatial_reference(encoder_hidden_states, frames, height, width)
            hidden_states = torch.cat([hidden_states, reference.to(hidden_states.dtype)], dim=2)
        return super().forward(hidden_states, encoder_hidden_states, *args, **kwargs)


def _is_int(value: object) -> bool:
    """An integral number (numpy's too), not a bool. (`int` is an `Integral` only at run time:
    type checkers do not see the ABC registration, so this is not a type guard.)"""
    return isinstance(value, Integral) and not isinstance(value, bool)


def motion_scope(config_or_model: object, level: int) -> float:
    """The motion-scope value of motion level `level` (1..5) from a transformer or its config."""
    # duck-typed: a model, its config (a dict), or any object with a `motion_scopes` attribute
    config: Any = getattr(config_or_model, "config", config_or_model)
    table = config["motion_scopes"] if isinstance(config, dict) else config.motion_scopes
    if not _is_int(level) or not 1 <= level <= len(table):
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


@dataclass
class AnimeGamerPipelineOutput(BaseOutput):
    """Output of `AnimeGamerPipeline`.

    Args:
        frames: per `output_type`: `"np"` uint8 [B, F, H, W, 3] (what the game writes to mp4),
            `"pt"` float32 [B, F, 3, H, W] in [0, 1], `"latent"` the fp32 latent [B, T, C, H, W].
    """

    frames: np.ndarray | torch.Tensor


class AnimeGamerPipeline(DiffusionPipeline):
    """Representation + motion level → an animation shot: AnimeGamer's decoder as a diffusers
    pipeline (docs/design.md §4).

    Args:
        transformer: the `AnimeGamerTransformer3DModel` that denoises the latent; it holds the
            unconditional representation and the motion-scope table.
        vae: CogVideoX's 3D VAE (`AutoencoderKLCogVideoX`), decoding latents to frames.
        scheduler: the `CogVideoXDPMScheduler` of the release's sampler (`scheduler_config()`).
        shot_encoder: the trainable part of the animation-shot encoder (docs/design.md §9), for the
            reconstruction path `encode_shot` and for training; optional (play does not need it).
        image_encoder, text_encoder, tokenizer: the shot encoder's frozen towers (CLIP ViT-B-16
            vision model, T5 v1.1 XXL encoder and its tokenizer); optional, passed to
            `from_pretrained` from their Hub repos (`shot_towers` in the character registry).

    `ModelMixin` is imported into this module on purpose: diffusers resolves the loading method
    of a component declared as `["animegamer.models.decoder", ...]` in `model_index.json` from
    the names that module holds.

    A character folder written by the converter or `save_pretrained` loads with
    `AnimeGamerPipeline.from_pretrained(folder, dtype=...)`; low-VRAM mode is
    `enable_model_cpu_offload()`.
    """

    # `DiffusionPipeline` declares these unannotated (inferred: an instance `list` and `None`),
    # so neither a `ClassVar` nor a `str` matches its types; they are class constants here.
    _optional_components = [  # noqa: RUF012
        "shot_encoder", "image_encoder", "text_encoder", "tokenizer"
    ]
    model_cpu_offload_seq = "text_encoder->image_encoder->shot_encoder->transformer->vae"  # type: ignore[assignment]
    _callback_tensor_inputs: ClassVar[list[str]] = ["latents", "pred_original_sample"]

    def __init__(
        self,
        transformer: AnimeGamerTransformer3DModel,
        vae: AutoencoderKLCogVideoX,
        scheduler: CogVideoXDPMScheduler,
        shot_encoder: AnimeGamerShotEncoder | None = None,
        image_encoder: CLIPVisionModel | None = None,
        text_encoder: T5EncoderModel | None = None,
        tokenizer: PreTrainedTokenizerBase | None = None,
    ):
        super().__init__()
        self.register_modules(
            transformer=transformer,
            vae=vae,
            scheduler=scheduler,
            shot_encoder=shot_encoder,
            image_encoder=image_encoder,
            text_encoder=text_encoder,
            tokenizer=tokenizer,
        )
        # The state of the latest (or running) call, read by callbacks and cache hooks, as in
        # diffusers' pipelines. Calls that overlap share it: the engine passes them all the
        # same guidance.
        self._num_timesteps = 0
        self._guidance_scale = DEFAULT_GUIDANCE
        self._attention_kwargs: dict[str, Any] | None = None
        self._current_timestep: torch.Tensor | None = None
        self._interrupt = False

    @property
    def num_timesteps(self) -> int:
        """Denoising steps of the latest call."""
        return self._num_timesteps

    @property
    def guidance_scale(self) -> float:
        """Guidance weight `g` of the running (or latest) call, read before every step: a
        `callback_on_step_end` that sets `pipeline._guidance_scale` changes the next steps."""
        return self._guidance_scale

    @property
    def attention_kwargs(self) -> dict[str, Any] | None:
        """`attention_kwargs` of the running call, passed to the transformer."""
        return self._attention_kwargs

    @property
    def current_timestep(self) -> torch.Tensor | None:
        """The timestep being denoised (None between calls): what cache hooks such as
        Pyramid Attention Broadcast and FasterCache read (`current_timestep_callback`)."""
        return self._current_timestep

    @property
    def interrupt(self) -> bool:
        """Set `pipeline._interrupt = True` (e.g. from a callback) to stop denoising after the
        current step; the call then decodes the latents it has."""
        return self._interrupt

    @property
    def representation_dim(self) -> int:
        """Width of the representation vectors the transformer takes."""
        return self.transformer.uncond_representation.shape[-1]

    def motion_scope(self, level: int) -> float:
        """The motion-scope value of motion level `level` (1..5), from the transformer's table."""
        return motion_scope(self.transformer, level)

    def latent_shape(self, batch_size: int = 1) -> tuple[int, int, int, int, int]:
        """[B, T, C, H, W] of the latent the transformer was configured for."""
        config = self.transformer.config
        frames = (config.sample_frames - 1) // config.temporal_compression_ratio + 1
        return (batch_size, frames, config.in_channels, config.sample_height, config.sample_width)

    @torch.no_grad()
    def encode_shot(
        self, frames: np.ndarray | torch.Tensor, motion_text: str | Sequence[str]
    ) -> torch.Tensor:
        """A shot's representation [B, 226, D] from its frames and motion description: the
        paper's reconstruction path (E_a, then this pipeline renders it).

        Args:
            frames: uint8 [B, F, H, W, 3] (or [B, H, W, 3] first frames), or float
                [B, F, 3, H, W] / [B, 3, H, W] in [0, 1]; only the first frame is used.
            motion_text: the "adverb + verb phrase" of each shot ("softly talk"), or one for all.
        """
        missing = [
            name
            for name in ("shot_encoder", "image_encoder", "text_encoder", "tokenizer")
            if getattr(self, name, None) is None
        ]
        if missing:
            raise ValueError(f"encode_shot needs the pipeline's {', '.join(missing)}")
        first = frames[:, 0] if frames.ndim == 5 else frames
        texts = [motion_text] if isinstance(motion_text, str) else list(motion_text)
        if len(texts) == 1:
            texts *= first.shape[0]
        if len(texts) != first.shape[0]:
            raise ValueError(f"{len(texts)} motion texts for {first.shape[0]} shots")
        image = image_features(self.image_encoder, clip_pixel_values(first))
        text = text_features(self.text_encoder, self.tokenizer, texts)
        device = self.shot_encoder.device
        return self.shot_encoder.project(text.to(device), image.to(device))

    def as_batch(self, representation: object) -> torch.Tensor:
        """The representations as one [B, 226, D] tensor: a tensor as it is, a list of
        [226, D] or [b, 226, D] tensors (e.g. from several calls of the game-state model)
        stacked along the batch, as diffusers' embedding pipelines take lists."""
        if isinstance(representation, torch.Tensor):
            return representation
        if isinstance(representation, Sequence) and representation and all(
            isinstance(item, torch.Tensor) and item.ndim in (2, 3) for item in representation
        ):
            return torch.cat([item.reshape(-1, *item.shape[-2:]) for item in representation])
        got = type(representation).__name__
        raise ValueError(f"representation must be a tensor or a list of tensors, got {got}")

    def check_inputs(
        self,
        representation: torch.Tensor,
        motion_level: int | Sequence[int],
        num_inference_steps: int,
        guidance_scale: float,
        num_videos_per_prompt: int,
        generator: torch.Generator | list[torch.Generator] | None,
        latents: torch.Tensor | None,
        output_type: str,
        callback_on_step_end_tensor_inputs: Sequence[str],
    ) -> list[float]:
        """Raise ValueError on any bad argument, before any work; returns the motion scope of
        every representation (before `num_videos_per_prompt`)."""
        expected = (REPRESENTATION_TOKENS, self.representation_dim)
        if representation.ndim != 3 or tuple(representation.shape[1:]) != expected:
            raise ValueError(f"representation must be [B, {expected[0]}, {expected[1]}], "
                             f"got {tuple(representation.shape)}")
        prompts = representation.shape[0]
        levels = list(motion_level) if isinstance(motion_level, Sequence) else [motion_level]
        if len(levels) == 1:
            levels *= prompts
        if len(levels) != prompts:
            raise ValueError(f"motion_level needs 1 or {prompts} levels, got {len(levels)}")
        scopes = [self.motion_scope(level) for level in levels]
        for name, count in (("num_inference_steps", num_inference_steps),
                            ("num_videos_per_prompt", num_videos_per_prompt)):
            if not _is_int(count) or count < 1:
                raise ValueError(f"{name} must be an int of at least 1, got {count!r}")
        if not math.isfinite(guidance_scale) or guidance_scale < 0:
            raise ValueError(f"guidance_scale must be a finite number >= 0, got {guidance_scale}")
        batch_size = prompts * num_videos_per_prompt
        if isinstance(generator, list) and len(generator) != batch_size:
            raise ValueError(f"{len(generator)} generators for a batch of {batch_size}")
        if latents is not None and tuple(latents.shape) != self.latent_shape(batch_size):
            raise ValueError(
                f"latents must be {self.latent_shape(batch_size)}, got {tuple(latents.shape)}"
            )
        if output_type not in OUTPUT_TYPES:
            raise ValueError(f"output_type must be one of {OUTPUT_TYPES}, got {output_type!r}")
        unknown = [k for k in callback_on_step_end_tensor_inputs
                   if k not in self._callback_tensor_inputs]
        if unknown:
            raise ValueError(
                f"callback_on_step_end_tensor_inputs must be in {self._callback_tensor_inputs}, "
                f"got {unknown}"
            )
        return scopes

    def prepare_latents(
        self,
        batch_size: int,
        device: torch.device,
        generator: torch.Generator | list[torch.Generator] | None,
        latents: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The initial fp32 noise: drawn with `generator` on its own device, then moved."""
        if latents is None:
            shape = self.latent_shape(batch_size)
            latents = randn_tensor(shape, generator=generator, device=device, dtype=torch.float32)
        return latents.to(device=device, dtype=torch.float32) * self.scheduler.init_noise_sigma

    @property
    def noise_prior(self) -> FrameCorrelatedNoise:
        """The diffusion noise the transformer was trained on, and is sampled with."""
        return FrameCorrelatedNoise(self.transformer.config.noise_correlation)

    def predict_fn(
        self, representation: torch.Tensor, scopes: Sequence[float], device: torch.device
    ) -> PredictFn:
        """The transformer on the [uncond, cond] batch; each shot's scope goes to both its rows.
        It records the timestep it runs at (`current_timestep`).

        Under frame-correlated noise it takes and gives the sampler's whitened latents."""
        transformer = self.transformer
        uncond = transformer.uncond_representation.to(device=device, dtype=transformer.dtype)
        cond = representation.to(uncond)
        context = torch.cat([uncond.expand_as(cond), cond])
        ofs = torch.tensor([*scopes, *scopes], device=device, dtype=torch.float32)

        def predict(latents: torch.Tensor, timestep: torch.Tensor) -> torch.Tensor:
            self._current_timestep = timestep
            hidden_states = torch.cat([latents, latents]).to(transformer.dtype)
            with transformer.cache_context("cond_uncond"):
                return transformer(
                    hidden_states=hidden_states,
                    encoder_hidden_states=context,
                    timestep=timestep.reshape(1).expand(hidden_states.shape[0]).to(device),
                    ofs=ofs,
                    attention_kwargs=self._attention_kwargs,
                    return_dict=False,
                )[0]

        noise = self.noise_prior
        if noise.is_independent:
            return predict
        return lambda latents, timestep: noise.whiten(predict(noise.color(latents), timestep))

    def decode_latents(self, latents: torch.Tensor) -> torch.Tensor:
        """Latents [B, T, C, H, W] → video [B, 3, F, H, W] in [-1, 1], in the VAE's dtype.

        The VAE decodes 2 latent frames at a time (the first call takes 3): 5 latent frames → 17.
        """
        z = latents.permute(0, 2, 1, 3, 4) / self.vae.config.scaling_factor
        return self.vae.decode(z.to(device=self._execution_device, dtype=self.vae.dtype)).sample

    @staticmethod
    def postprocess_video(video: torch.Tensor, output_type: str) -> np.ndarray | torch.Tensor:
        """VAE output [B, 3, F, H, W] → `"pt"` float [B, F, 3, H, W] in [0, 1], or `"np"` uint8
        [B, F, H, W, 3] (truncating, as the release did)."""
        video = ((video.float() + 1.0) / 2.0).clamp(0.0, 1.0)
        if output_type == "pt":
            return video.permute(0, 2, 1, 3, 4)
        return (255.0 * video).to(torch.uint8).permute(0, 2, 3, 4, 1).cpu().numpy()

    def denoise(
        self,
        latents: torch.Tensor,
        predict: PredictFn,
        num_inference_steps: int,
        generator: torch.Generator | list[torch.Generator] | None,
        callback_on_step_end: StepEndCallback | None,
        callback_on_step_end_tensor_inputs: Sequence[str],
    ) -> torch.Tensor:
        """`sample_latents` with this call's state: guidance read from `_guidance_scale`,
        stopped by `_interrupt`, the callback given the tensors it asks for after every
        step, and a progress bar."""
        # a scheduler of this call's own: `set_timesteps` mutates it, and turns may overlap
        scheduler = type(self.scheduler).from_config(self.scheduler.config)
        with self.progress_bar(total=num_inference_steps) as progress_bar:

            def step_end(
                i: int, t: torch.Tensor, latents: torch.Tensor, x0: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor]:
                if callback_on_step_end is not None:
                    tensors = {"latents": latents, "pred_original_sample": x0}
                    callback_kwargs = {k: tensors[k] for k in callback_on_step_end_tensor_inputs}
                    outputs = callback_on_step_end(self, i, t, callback_kwargs) or {}
                    latents = outputs.pop("latents", latents)
                    x0 = outputs.pop("pred_original_sample", x0)
                progress_bar.update()
                return latents, x0

            latents = sample_latents(
                scheduler,
                predict,
                latents,
                num_inference_steps=num_inference_steps,
                guidance_scale=lambda: self._guidance_scale,
                generator=generator,
                step_end=step_end,
                interrupted=lambda: self._interrupt,
            )
        self._current_timestep = None
        return latents

    @torch.no_grad()
    def __call__(
        self,
        representation: torch.Tensor | Sequence[torch.Tensor],
        motion_level: int | Sequence[int],
        num_inference_steps: int = DEFAULT_STEPS,
        guidance_scale: float = DEFAULT_GUIDANCE,
        num_videos_per_prompt: int = 1,
        generator: torch.Generator | list[torch.Generator] | None = None,
        latents: torch.Tensor | None = None,
        output_type: str = "np",
        return_dict: bool = True,
        attention_kwargs: dict[str, Any] | None = None,
        callback_on_step_end: StepEndCallback | None = None,
        callback_on_step_end_tensor_inputs: Sequence[str] = ("latents",),
    ) -> AnimeGamerPipelineOutput | tuple[np.ndarray | torch.Tensor]:
        """Render the shots of `representation`.

        Args:
            representation: [B, 226, D] from the game-state model (D: `representation_dim`),
                or a list of [226, D] / [b, 226, D] tensors, rendered as one batch.
            motion_level: the motion level 1..5 of every shot, or one per representation;
                mapped to the motion scope by the transformer's table.
            num_inference_steps: denoising steps (the release: 50).
            guidance_scale: `g` of the dynamic classifier-free guidance
                `1 + g·(1 − cos(π·((N − t)/N)⁵))/2` at timestep t of N steps (the release: 6).
                It is read from `pipeline.guidance_scale` before every step, so a callback
                that sets `pipeline._guidance_scale` changes the steps after it.
            num_videos_per_prompt: shots rendered from each representation (each its noise).
            generator: the noise's torch generator (or one per shot: B·num_videos_per_prompt);
                the initial noise is drawn on its device, fp32, and the scheduler's noise
                comes from it too.
            latents: initial noise [B·num_videos_per_prompt, T, C, H, W] to use instead of
                drawing it. A transformer trained on frame-correlated noise
                (`noise_correlation` > 0) is sampled in the whitened space of
                `FrameCorrelatedNoise`, so these, and the latents and `pred_original_sample`
                that `callback_on_step_end` sees, are in that space (`noise_prior.color` maps
                them back).
            output_type: `"np"` (uint8 frames), `"pt"` (float frames) or `"latent"`; see
                `AnimeGamerPipelineOutput`.
            return_dict: return an `AnimeGamerPipelineOutput` rather than a 1-tuple.
            attention_kwargs: passed to the transformer's attention processors (e.g. a LoRA
                `scale`).
            callback_on_step_end: called after every denoising step as
                `callback_on_step_end(self, i, t, callback_kwargs)` with the tensors named in
                `callback_on_step_end_tensor_inputs`; may return replacements for them. It may
                also set `self._guidance_scale`, or `self._interrupt = True` to stop after
                this step (the call then decodes the latents it has).
            callback_on_step_end_tensor_inputs: tensors passed to the callback: `"latents"`
                and `"pred_original_sample"` (the step's clean-latent estimate x0, from which
                `animegamer.models.latent_preview` draws live previews).

        The transformer runs the [uncond, cond] batch with the motion scope as `ofs`, one per
        row: FasterCache, which skips the unconditional half on some steps, must split `ofs`
        too (add it to its `_unconditional_conditional_input_kwargs_identifiers`).

        Returns:
            `AnimeGamerPipelineOutput` with `frames`, or `(frames,)` if `return_dict` is False.
        """
        if isinstance(callback_on_step_end, PipelineCallback | MultiPipelineCallbacks):
            callback_on_step_end_tensor_inputs = callback_on_step_end.tensor_inputs
        representation = self.as_batch(representation)
        scopes = self.check_inputs(
            representation, motion_level, num_inference_steps, guidance_scale,
            num_videos_per_prompt, generator, latents, output_type,
            callback_on_step_end_tensor_inputs,
        )
        self._num_timesteps = num_inference_steps
        self._guidance_scale = guidance_scale
        self._attention_kwargs = attention_kwargs
        self._interrupt = False
        device = self._execution_device
        representation = representation.repeat_interleave(num_videos_per_prompt, dim=0)
        scopes = [scope for scope in scopes for _ in range(num_videos_per_prompt)]
        latents = self.prepare_latents(len(scopes), device, generator, latents)
        predict = self.predict_fn(representation.to(device), scopes, device)
        latents = self.denoise(latents, predict, num_inference_steps, generator,
                               callback_on_step_end, callback_on_step_end_tensor_inputs)
        latents = self.noise_prior.color(latents)

        frames: np.ndarray | torch.Tensor
        if output_type == "latent":
            frames = latents
        else:
            frames = self.postprocess_video(self.decode_latents(latents), output_type)
        self.maybe_free_model_hooks()
        if not return_dict:
            return (frames,)
        return AnimeGamerPipelineOutput(frames=frames)


StepEndCallback = (
    Callable[[AnimeGamerPipeline, int, torch.Tensor, dict], dict]
    | PipelineCallback
    | MultiPipelineCallbacks
)
"""`callback_on_step_end` of `AnimeGamerPipeline.__call__`: a function
`(pipeline, i, t, callback_kwargs) -> replacements`, or a diffusers `PipelineCallback`."""

_PIPELINE_COMPONENTS: dict[str, type] = {
    "scheduler": CogVideoXDPMScheduler,
    "shot_encoder": AnimeGamerShotEncoder,
    "transformer": AnimeGamerTransformer3DModel,
    "vae": AutoencoderKLCogVideoX,
}
"""The components a character folder holds (the towers come from their own repos)."""


def write_model_index(out: str | Path) -> Path:
    """Write `out/model_index.json`, as `AnimeGamerPipeline.save_pretrained` would, so that a
    folder holding `transformer/`, `vae/` and `scheduler/` (and `shot_encoder/` where it has
    one) loads as the pipeline; returns it. The towers are listed empty: `from_pretrained`
    takes them as arguments."""
    index: dict[str, object] = {
        "_class_name": AnimeGamerPipeline.__name__,
        "_diffusers_version": diffusers.__version__,
    }
    for name in AnimeGamerPipeline._optional_components:
        index[name] = [None, None]
    for name, cls in _PIPELINE_COMPONENTS.items():
        if name not in AnimeGamerPipeline._optional_components or (Path(out) / name).is_dir():
            index[name] = list(_fetch_class_library_tuple(cls))
    target = Path(out) / AnimeGamerPipeline.config_name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return target
