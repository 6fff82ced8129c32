"""`AnimeGamerPipeline`: the diffusers pipeline that renders an animation shot from the game-state
model's representation and a motion level (docs/design.md §4).

`AnimeGamerPipeline.__call__` runs the sampler of `sampling.py` on its transformer and decodes
the latent with its VAE (`model_index.write_model_index` makes a folder of its components
loadable as the pipeline).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
import torch

# The classes come from their defining modules: to a type checker, diffusers' top-level names
# are its placeholder classes for a missing torch (the same objects at run time either way).
from diffusers.callbacks import MultiPipelineCallbacks, PipelineCallback
from diffusers.models.autoencoders.autoencoder_kl_cogvideox import AutoencoderKLCogVideoX
from diffusers.pipelines.pipeline_utils import DiffusionPipeline
from diffusers.schedulers.scheduling_dpm_cogvideox import CogVideoXDPMScheduler
from diffusers.utils.torch_utils import randn_tensor

# At run time too: diffusers reads the component annotations of `__init__` when it loads.
from transformers import CLIPVisionModel, PreTrainedTokenizerBase, T5EncoderModel

from animegamer.game.representation import REPRESENTATION_TOKENS
from animegamer.models.decoder_defaults import DEFAULT_GUIDANCE, DEFAULT_STEPS
from animegamer.models.noise_prior import FrameCorrelatedNoise
from animegamer.models.scene_latent import noise_levels, scene_latents
from animegamer.models.shot_encoder import (
    AnimeGamerShotEncoder,
    clip_pixel_values,
    image_features,
    text_features,
)

# diffusers loads a component only from a module already imported: a Nano folder's transformer
# names transformer_nano's class, so loading this pipeline imports it.
from animegamer.models.transformers import transformer_nano  # noqa: F401
from animegamer.models.transformers.transformer_animegamer import (
    AnimeGamerTransformer3DModel,
    is_int,
    motion_scope,
)
from animegamer.pipelines.animegamer.pipeline_output import AnimeGamerPipelineOutput
from animegamer.pipelines.animegamer.sampling import PredictFn, sample_latents

OUTPUT_TYPES = ("np", "pt", "latent")


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
            if not is_int(count) or count < 1:
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
        """The diffusion noise the transformer was trained on, and is sampled with: independent
        for the release's transformer, correlated over frames for a Nano one that says so."""
        return FrameCorrelatedNoise(getattr(self.transformer.config, "noise_correlation", 0.0))

    def predict_fn(
        self, representation: torch.Tensor, scopes: Sequence[float], device: torch.device,
        scene: torch.Tensor | None = None,
    ) -> PredictFn:
        """The transformer on the [uncond, cond] batch (diffusers' layout: the halves
        concatenated along the batch, unconditional first), with one motion scope per shot (the
        transformer repeats it over both halves). It records the timestep it runs at
        (`current_timestep`).

        With a scene latent S [B, C, h, w] (`prepare_scene`), the transformer denoises the
        clip's difference from S: it is given x_t − α_t·S and its velocity v_r becomes the whole
        clip's v_r − σ_t·S, so the sampler, its x0 and the callbacks stay in the clip's space.

        Under frame-correlated noise it takes and gives the sampler's whitened latents."""
        transformer = self.transformer
        uncond = transformer.uncond_representation.to(device=device, dtype=transformer.dtype)
        cond = representation.to(uncond)
        context = torch.cat([uncond.expand_as(cond), cond])
        ofs = torch.tensor(list(scopes), device=device, dtype=torch.float32)
        scenes = None if scene is None else torch.cat([scene, scene]).to(device)[:, None]

        def velocity(hidden_states: torch.Tensor, timestep: torch.Tensor,
                     **scene: torch.Tensor) -> torch.Tensor:
            with transformer.cache_context("cond_uncond"):
                return transformer(
                    hidden_states=hidden_states.to(transformer.dtype),
                    encoder_hidden_states=context,
                    timestep=timestep.reshape(1).expand(hidden_states.shape[0]).to(device),
                    ofs=ofs,
                    attention_kwargs=self._attention_kwargs,
                    return_dict=False,
                    **scene,
                )[0]

        def predict(latents: torch.Tensor, timestep: torch.Tensor) -> torch.Tensor:
            self._current_timestep = timestep
            hidden_states = torch.cat([latents, latents])
            if scenes is None:
                return velocity(hidden_states, timestep)
            alpha, sigma = noise_levels(self.scheduler.alphas_cumprod, timestep.reshape(1))
            difference = velocity(hidden_states.float() - alpha * scenes, timestep,
                                  scene=scenes[:, 0].to(transformer.dtype))
            return difference.float() - sigma * scenes

        noise = self.noise_prior
        if noise.is_independent:
            return predict
        return lambda latents, timestep: noise.whiten(predict(noise.color(latents), timestep))

    def prepare_scene(self, scene: np.ndarray | Sequence[np.ndarray] | None,
                      shots: int) -> torch.Tensor | None:
        """The scene latents [shots, C, h, w] of a transformer that draws on a scene
        (`scene_channels`; see `NanoTransformer3DModel`), None for one that does not. Raises
        ValueError when the transformer and `scene` disagree."""
        channels = getattr(self.transformer.config, "scene_channels", 0)
        if channels == 0:
            if scene is not None:
                raise ValueError("this transformer draws no scene: give scene=None")
            return None
        if scene is None or len(scene) != shots:
            got = "none" if scene is None else len(scene)
            raise ValueError(f"this transformer draws on a scene: give {shots} scene images "
                             f"(uint8 [H, W, 3], one per representation); got {got}")
        return scene_latents(self.vae, scene)

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
        scene: np.ndarray | Sequence[np.ndarray] | None = None,
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
            scene: for a transformer with `scene_channels` (Nano), the background each
                representation's instruction names, uint8 [H, W, 3] at the clip's size (see
                `animegamer.models.scene_latent`); None otherwise.

        The transformer runs the [uncond, cond] batch, the halves concatenated along the batch
        as in diffusers' CogVideoX pipeline, with one motion scope (`ofs`) per shot: diffusers'
        cache hooks (First Block Cache, Pyramid Attention Broadcast, FasterCache, which skips
        the unconditional half on some steps) apply with their default settings.

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
        scene_latent = self.prepare_scene(scene, len(representation))
        representation = representation.repeat_interleave(num_videos_per_prompt, dim=0)
        if scene_latent is not None:
            scene_latent = scene_latent.repeat_interleave(num_videos_per_prompt, dim=0)
        scopes = [scope for scope in scopes for _ in range(num_videos_per_prompt)]
        latents = self.prepare_latents(len(scopes), device, generator, latents)
        predict = self.predict_fn(representation.to(device), scopes, device, scene_latent)
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
