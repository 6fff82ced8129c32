"""Speed presets (`ANIMEGAMER_PRESET`) and applying them to loaded models.

A preset trades quality for time or memory on the models of one character:

* `quality`: today's turn, the release's sampler (the configured steps, 50 by default).
* `fast`: at most `FAST_STEPS` denoising steps, diffusers' First Block Cache on the decoder's
  transformer (a step whose first block changed little reuses the other blocks' residual), and
  the game-state model's shared prefill.
* `low-vram`: model CPU offload (`Placement.offload`), VAE tiling and slicing, shared prefill.
* `consumer`: both large networks in int8 (`animegamer.serving.quantization`), whole on the GPU, VAE
  tiling and slicing (an untiled 480×720 decode alone peaks near 12 GiB), shared prefill:
  for a 12 GB card.
* `tiny-vram`: the language model in 4-bit NF4, the transformer in int8, model CPU offload,
  VAE tiling and slicing, shared prefill: for an 8 GB card.

First Block Cache is the cache hook chosen among diffusers 0.42's: it needs only the pipeline's
`cache_context("cond_uncond")` and treats the CFG batch of 2 as one input. FasterCache and
Pyramid Attention Broadcast work too (their `current_timestep_callback` reads the pipeline's
`current_timestep`), but are not part of a preset.

The shared prefill is the engine's to pass to `GameStateModel.predict` (`TurnEngine`'s
`shared_prefill`); `apply_preset` sets only what lives on the decoder.
`ANIMEGAMER_COMPILE=1` adds regional `torch.compile` of the transformer blocks to any preset.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from diffusers.hooks import FirstBlockCacheConfig
from diffusers.models.autoencoders.autoencoder_kl_cogvideox import AutoencoderKLCogVideoX
from torch import nn

from animegamer.models.game_state import GameStateModel
from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline
from animegamer.serving.quantization import NO_QUANTIZATION, PRESET_QUANTIZATION, Quantization
from animegamer.serving.settings import PRESET_CHOICES

PRESET_NAMES = PRESET_CHOICES
FAST_STEPS = 20
"""Divides 1000, so the scheduler stays on its trailing grid (see `sample_latents`)."""
FIRST_BLOCK_CACHE_THRESHOLD = 0.05
"""diffusers' default: relative change of the first block's residual below which a step reuses
the cached residual of the other blocks."""
SDPA_PROCESSORS = frozenset({"CogVideoXAttnProcessor2_0", "FusedCogVideoXAttnProcessor2_0"})
"""The decoder's attention processors that call `scaled_dot_product_attention`."""


@dataclass(frozen=True)
class SpeedPreset:
    """What a preset changes. `max_steps`: cap on the denoising steps (None: as configured);
    `first_block_cache`: First Block Cache threshold (None: off); `quantization`: how the
    networks load (applied by `load_character_models`, not by `apply_preset`)."""

    name: str
    max_steps: int | None = None
    first_block_cache: float | None = None
    shared_prefill: bool = False
    offload: bool = False
    vae_tiling: bool = False
    quantization: Quantization = NO_QUANTIZATION

    @property
    def changes_models(self) -> bool:
        """Whether `apply_preset` has anything to set on freshly loaded models."""
        return self.first_block_cache is not None or self.vae_tiling

    def low_vram(self, configured: str) -> str:
        """`ANIMEGAMER_LOW_VRAM` under this preset: an offloading preset turns it on; a
        quantized one that keeps its models whole turns it off (the `auto` budget of
        `choose_placement` counts unquantized weights); the others keep `configured`."""
        if self.offload:
            return "on"
        return "off" if self.quantization.enabled else configured

    def steps(self, configured: int) -> int:
        """Denoising steps of a turn under this preset."""
        return configured if self.max_steps is None else min(configured, self.max_steps)


PRESETS: Mapping[str, SpeedPreset] = MappingProxyType({
    "quality": SpeedPreset("quality"),
    "fast": SpeedPreset(
        "fast", max_steps=FAST_STEPS, first_block_cache=FIRST_BLOCK_CACHE_THRESHOLD,
        shared_prefill=True,
    ),
    "low-vram": SpeedPreset("low-vram", shared_prefill=True, offload=True, vae_tiling=True),
    "consumer": SpeedPreset(
        "consumer", shared_prefill=True, vae_tiling=True,
        quantization=PRESET_QUANTIZATION["consumer"],
    ),
    "tiny-vram": SpeedPreset(
        "tiny-vram", shared_prefill=True, offload=True, vae_tiling=True,
        quantization=PRESET_QUANTIZATION["tiny-vram"],
    ),
})


def get_preset(name: str) -> SpeedPreset:
    """The preset called `name`; ValueError for an unknown one."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"preset must be one of {PRESET_NAMES}, got {name!r}") from None


def apply_preset(
    preset: SpeedPreset, decoder: AnimeGamerPipeline, compile_blocks: bool = False
) -> None:
    """Set a preset's switches on a loaded decoder (in place; any earlier preset is undone),
    and compile the transformer blocks if `compile_blocks` (`ANIMEGAMER_COMPILE`).

    Offload is not set here: it is part of the placement the models are loaded with; nor is
    the shared prefill, an argument of each `GameStateModel.predict`.
    """
    transformer = decoder.transformer
    if transformer.is_cache_enabled:
        transformer.disable_cache()
    if preset.first_block_cache is not None:
        transformer.enable_cache(FirstBlockCacheConfig(threshold=preset.first_block_cache))
    if preset.vae_tiling:
        enable_vae_tiling(decoder.vae)
        decoder.vae.enable_slicing()
    else:
        decoder.vae.disable_tiling()
        decoder.vae.disable_slicing()
    if compile_blocks:
        compile_transformer_blocks(decoder.transformer)


def enable_vae_tiling(vae: AutoencoderKLCogVideoX) -> None:
    """diffusers' VAE tiling (tiles of half the sample size), with overlaps rounded to whole
    latent pixels: the stock factors (1/6, 1/5) are whole at 480×720, but at other sizes the
    tiles' stride and their kept rows disagree and the video comes out the wrong size."""
    vae.enable_tiling()
    vae.enable_tiling(
        tile_overlap_factor_height=_whole_overlap(
            vae.tile_latent_min_height, vae.tile_overlap_factor_height
        ),
        tile_overlap_factor_width=_whole_overlap(
            vae.tile_latent_min_width, vae.tile_overlap_factor_width
        ),
    )


def _whole_overlap(latent_tile: int, factor: float) -> float:
    return max(1, round(latent_tile * factor)) / latent_tile


def compile_transformer_blocks(transformer: nn.Module, **compile_kwargs: Any) -> int:
    """Regional compilation: `torch.compile` each repeated transformer block in place (one
    graph, compiled once, reused by every block of the same shape); returns how many.

    diffusers' `compile_repeated_blocks` does this for models that declare `_repeated_blocks`;
    CogVideoX does not, so its `transformer_blocks` are compiled directly.
    """
    if getattr(transformer, "_repeated_blocks", None):
        transformer.compile_repeated_blocks(**compile_kwargs)  # type: ignore[operator]
        names = set(transformer._repeated_blocks)  # type: ignore[arg-type]
        return sum(type(m).__name__ in names for m in transformer.modules())
    blocks = list(transformer.transformer_blocks)  # type: ignore[arg-type]
    for block in blocks:
        block.compile(**compile_kwargs)
    return len(blocks)


def attention_backends(game_state: GameStateModel, decoder: AnimeGamerPipeline) -> dict:
    """The attention implementations in use: the language model's (`sdpa` expected) and the
    decoder's processor classes, with `all_sdpa` saying whether both use SDPA."""
    language = str(game_state.language_model.config._attn_implementation)
    processors = sorted({type(p).__name__ for p in decoder.transformer.attn_processors.values()})
    return {
        "game_state": language,
        "decoder": processors,
        "all_sdpa": language in {"sdpa", "flash_attention_2", "flash_attention_3"}
        and set(processors) <= SDPA_PROCESSORS,
    }
