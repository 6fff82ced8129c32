"""A tiny random-weight `AnimeGamerPipeline` for tests and the preview engine (no download,
CPU-fast), built from `animegamer.models.tiny_decoder`'s parts."""

from __future__ import annotations

from pathlib import Path

import torch

# From its defining module (a typed class, not diffusers' top-level placeholder).
from diffusers.schedulers.scheduling_dpm_cogvideox import CogVideoXDPMScheduler

from animegamer.models.tiny_decoder import tiny_transformer_config, tiny_vae
from animegamer.models.transformers.transformer_animegamer import AnimeGamerTransformer3DModel
from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline
from animegamer.pipelines.animegamer.sampling import scheduler_config


def tiny_pipeline(representation_dim: int = 64, seed: int = 0) -> AnimeGamerPipeline:
    """A random decoder pipeline: 5×8×12 latent → 17 frames of 64×96."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        transformer = AnimeGamerTransformer3DModel(**tiny_transformer_config(representation_dim))
        transformer.uncond_representation.normal_()
        vae = tiny_vae()
    return AnimeGamerPipeline(transformer, vae, CogVideoXDPMScheduler(**scheduler_config()))


def save_tiny_decoder(out: Path, representation_dim: int = 64, seed: int = 0) -> Path:
    """Write `tiny_pipeline` as a pipeline folder: model_index.json, transformer/, vae/ and
    scheduler/ (the project layout's decoder part); returns `out`."""
    out = Path(out)
    tiny_pipeline(representation_dim, seed).save_pretrained(out)
    return out
