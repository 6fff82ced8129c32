"""Tiny random-weight decoder parts for tests and the preview engine (no download, CPU-fast).

`tiny_transformer_config` and `tiny_vae` build `animegamer.pipelines.animegamer.tiny`'s pipeline;
`write_tiny_decoder_release` writes the *release* (SAT/DeepSpeed) layout that the converter
reads, from `sat_decoder_state_dict`, which also builds full-size key lists on the `meta` device.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

# From their defining modules (typed classes, not diffusers' top-level placeholders).
from diffusers.models.autoencoders.autoencoder_kl_cogvideox import AutoencoderKLCogVideoX
from diffusers.models.embeddings import get_3d_sincos_pos_embed

from animegamer.game.representation import REPRESENTATION_TOKENS
from animegamer.models.decoder_defaults import (
    DEFAULT_LATENT_SIZE,
    DEFAULT_SAMPLE_FRAMES,
    RELEASE_CHECKPOINT_NAME,
    SAT_PREFIX,
)
from animegamer.models.transformers.transformer_animegamer import DEFAULT_MOTION_SCOPES

TINY_LATENT_SIZE = (8, 12)
TINY_HEAD_DIM = 32


@dataclass(frozen=True)
class SatDecoderSizes:
    """Sizes of a SAT decoder checkpoint; the defaults are the released CogVideoX-2B ones."""

    num_layers: int = 30
    hidden: int = 1920
    heads: int = 30
    time_embed_dim: int = 512
    latent_size: tuple[int, int] = DEFAULT_LATENT_SIZE
    sample_frames: int = DEFAULT_SAMPLE_FRAMES
    in_channels: int = 16
    patch: int = 2
    lora_r: int = 64
    text_hidden: int = 4096
    image_hidden: int = 768

    @property
    def positions(self) -> int:
        height, width = self.latent_size
        frames = (self.sample_frames - 1) // 4 + 1
        return REPRESENTATION_TOKENS + frames * (height // self.patch) * (width // self.patch)


TINY_SAT_SIZES = SatDecoderSizes(
    num_layers=2, hidden=64, heads=2, time_embed_dim=32, latent_size=TINY_LATENT_SIZE
)


def _sat_shapes(s: SatDecoderSizes) -> dict[str, tuple[int, ...]]:
    """Key → shape of the network part of a release checkpoint (prefix removed)."""
    d, t, head = s.hidden, s.time_embed_dim, s.hidden // s.heads
    shapes: dict[str, tuple[int, ...]] = {
        "mixins.pos_embed.pos_embedding": (1, s.positions, d),
        "mixins.patch_embed.proj.weight": (d, s.in_channels, s.patch, s.patch),
        "mixins.patch_embed.proj.bias": (d,),
        "mixins.patch_embed.text_proj.0.weight": (d, s.text_hidden),
        "mixins.patch_embed.ip_proj.0.weight": (d, s.image_hidden),
        "mixins.final_layer.linear.weight": (s.patch * s.patch * s.in_channels, d),
        "mixins.final_layer.linear.bias": (s.patch * s.patch * s.in_channels,),
        "mixins.final_layer.adaLN_modulation.1.weight": (2 * d, t),
        "mixins.final_layer.adaLN_modulation.1.bias": (2 * d,),
    }
    for name in ("text_proj", "ip_proj"):
        shapes[f"mixins.patch_embed.{name}.0.bias"] = (d,)
        shapes[f"mixins.patch_embed.{name}.2.weight"] = (d, d)
        shapes[f"mixins.patch_embed.{name}.2.bias"] = (d,)
    norms = ["output_mix_layer_norm", "ip_mix_layer_norm", "txt_mix_layer_norm"]
    for name in [f"mixins.patch_embed.{n}" for n in norms] + [
        "mixins.final_layer.norm_final",
        "transformer.final_layernorm",
    ]:
        shapes[f"{name}.weight"] = shapes[f"{name}.bias"] = (d,)
    for name in ("time_embed", "flow_embed"):
        shapes[f"{name}.0.weight"] = (t, d)
        shapes[f"{name}.2.weight"] = (t, t)
        shapes[f"{name}.0.bias"] = shapes[f"{name}.2.bias"] = (t,)
    for i in range(s.num_layers):
        adaln, layer = "mixins.adaln_layer.", f"transformer.layers.{i}."
        shapes[f"{adaln}adaLN_modulations.{i}.1.weight"] = (12 * d, t)
        shapes[f"{adaln}adaLN_modulations.{i}.1.bias"] = (12 * d,)
        for norm in ("query_layernorm_list", "key_layernorm_list"):
            shapes[f"{adaln}{norm}.{i}.weight"] = shapes[f"{adaln}{norm}.{i}.bias"] = (head,)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            shapes[f"{layer}{norm}.weight"] = shapes[f"{layer}{norm}.bias"] = (d,)
        for name, partitions in (("query_key_value", 3), ("dense", 1)):
            lin = f"{layer}attention.{name}."
            shapes[f"{lin}original.weight"] = (partitions * d, d)
            shapes[f"{lin}original.bias"] = (partitions * d,)
            for p in range(partitions):
                shapes[f"{lin}matrix_A.{p}"] = (s.lora_r, d)
                shapes[f"{lin}matrix_B.{p}"] = (d, s.lora_r)
        shapes[f"{layer}mlp.dense_h_to_4h.weight"] = (4 * d, d)
        shapes[f"{layer}mlp.dense_h_to_4h.bias"] = (4 * d,)
        shapes[f"{layer}mlp.dense_4h_to_h.weight"] = (d, 4 * d)
        shapes[f"{layer}mlp.dense_4h_to_h.bias"] = (d,)
    return shapes


def release_position_table(s: SatDecoderSizes) -> torch.Tensor:
    """The fixed position table of the release: zeros for the 226 representation tokens."""
    height, width = s.latent_size
    frames = (s.sample_frames - 1) // 4 + 1
    grid = get_3d_sincos_pos_embed(
        s.hidden, (width // s.patch, height // s.patch), frames, 1.875, 1.0, output_type="pt"
    )
    table = torch.zeros(1, s.positions, s.hidden)
    table[0, REPRESENTATION_TOKENS:] = grid.flatten(0, 1).float()
    return table


def sat_decoder_state_dict(
    sizes: SatDecoderSizes = TINY_SAT_SIZES,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> dict[str, torch.Tensor]:
    """A release-layout decoder state dict (keys with `model.diffusion_model.`).

    On `meta` only the shapes exist (the full-size key list costs no memory); otherwise weights
    are seeded random, norms near 1, and the position table is the real sincos table.
    """
    shapes = _sat_shapes(sizes)
    if torch.device(device).type == "meta":
        return {SAT_PREFIX + k: torch.empty(v, device="meta") for k, v in shapes.items()}
    generator = torch.Generator().manual_seed(seed)
    state = {}
    for key, shape in shapes.items():
        value = torch.randn(shape, generator=generator)
        if "norm" in key and key.endswith(".weight"):
            value = 1.0 + 0.1 * value
        elif len(shape) > 1:
            value = value / shape[-1] ** 0.5
        else:
            value = 0.1 * value
        state[SAT_PREFIX + key] = value
    state[SAT_PREFIX + "mixins.pos_embed.pos_embedding"] = release_position_table(sizes)
    return {k: v.to(device) for k, v in state.items()}


def write_tiny_decoder_release(
    directory: Path, seed: int = 0, sizes: SatDecoderSizes = TINY_SAT_SIZES
) -> Path:
    """Write a SAT/DeepSpeed release layout: `latest` → `1/mp_rank_00_model_states.pt`."""
    directory = Path(directory)
    (directory / "1").mkdir(parents=True, exist_ok=True)
    (directory / "latest").write_text("1")
    checkpoint = {"module": sat_decoder_state_dict(sizes, seed)}
    torch.save(checkpoint, directory / "1" / RELEASE_CHECKPOINT_NAME)
    return directory


def tiny_transformer_config(representation_dim: int = 64) -> dict:
    if representation_dim % TINY_HEAD_DIM:
        raise ValueError(f"representation_dim must be a multiple of {TINY_HEAD_DIM}")
    height, width = TINY_LATENT_SIZE
    return {
        "num_attention_heads": representation_dim // TINY_HEAD_DIM,
        "attention_head_dim": TINY_HEAD_DIM,
        "time_embed_dim": 32,
        "num_layers": 2,
        "sample_height": height,
        "sample_width": width,
        "sample_frames": DEFAULT_SAMPLE_FRAMES,
        "motion_scopes": list(DEFAULT_MOTION_SCOPES),
    }


def tiny_vae() -> AutoencoderKLCogVideoX:
    """A 4-level CogVideoX VAE (8× space, 4× time) with a handful of channels."""
    height, width = TINY_LATENT_SIZE
    return AutoencoderKLCogVideoX(
        block_out_channels=(4, 4, 8, 8),
        layers_per_block=1,
        norm_num_groups=2,
        latent_channels=16,
        sample_height=8 * height,
        sample_width=8 * width,
    )
