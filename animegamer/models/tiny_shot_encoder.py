"""Tiny random-weight shot-encoder towers for tests and the CPU world: the real architectures
(transformers' `CLIPVisionModel` at ViT-B-16's 224 px / 16 px patches, so 196 patch tokens; a T5
encoder) at toy widths, and the byte-level `ByT5Tokenizer`, which needs no vocabulary file.

The vision tower's position embeddings are a fixed 2-D sine-cosine table as strong as the patch
contents (`spatial_position_table`): at the default random init (std 0.02) they are ~25× weaker
than a patch's embedding, so moving a patch changed its feature by under 5 % and the 196 tokens
were a bag of patches, from which a decoder cannot tell where a character stands. A trained
CLIP's learned positions are strong; this keeps that property at random weights."""

from __future__ import annotations

import math

import torch
from transformers import (
    ByT5Tokenizer,
    CLIPVisionConfig,
    CLIPVisionModel,
    T5Config,
    T5EncoderModel,
)

from animegamer.models.shot_encoder import CLIP_SIZE, AnimeGamerShotEncoder, ShotTowers

BYT5_VOCAB = 259
"""256 bytes after pad (0), eos (1) and unk (2)."""


def spatial_position_table(grid: int, width: int) -> torch.Tensor:
    """[1 + grid², width]: a zero row for the class token, then for each patch (row-major) sines
    and cosines of its row (first half of the width) and its column (second half) at geometric
    frequencies, as in MAE; entries in [-1, 1]."""
    quarter = width // 4
    frequencies = 1.0 / (100.0 ** (torch.arange(quarter, dtype=torch.float64) / max(quarter, 1)))
    rows, columns = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")
    parts = []
    for coordinate in (rows, columns):
        angles = coordinate.reshape(-1, 1).double() * frequencies[None] * math.pi / 2
        parts += [angles.sin(), angles.cos()]
    table = torch.zeros(1 + grid * grid, width, dtype=torch.float64)
    table[1:, : 4 * quarter] = torch.cat(parts, dim=1)
    return table.float()


def tiny_shot_towers(width: int = 32, seed: int = 0, layers: int = 3) -> ShotTowers:
    """Random towers of `width` (fixed `seed`): CLIP vision (224 px, 16 px patches) and a T5
    encoder with the byte-level tokenizer."""
    torch.manual_seed(seed)
    vision = CLIPVisionModel(
        CLIPVisionConfig(
            hidden_size=width,
            intermediate_size=2 * width,
            num_hidden_layers=layers,
            num_attention_heads=2,
            image_size=CLIP_SIZE,
            patch_size=16,
            hidden_act="gelu",
        )
    ).eval()
    grid = CLIP_SIZE // vision.config.patch_size
    with torch.no_grad():
        vision.embeddings.position_embedding.weight.copy_(spatial_position_table(grid, width))
    text = T5EncoderModel(
        T5Config(
            vocab_size=BYT5_VOCAB,
            d_model=width,
            d_kv=width // 4,
            d_ff=2 * width,
            num_layers=layers,
            num_heads=4,
            pad_token_id=0,
            eos_token_id=1,
        )
    ).eval()
    return ShotTowers(image_encoder=vision, text_encoder=text, tokenizer=ByT5Tokenizer())


def tiny_shot_encoder(towers: ShotTowers, width: int = 64, seed: int = 0) -> AnimeGamerShotEncoder:
    """A random shot encoder from `towers`' widths to a representation of `width`."""
    torch.manual_seed(seed)
    return AnimeGamerShotEncoder(
        text_width=towers.text_width, image_width=towers.image_width, width=width
    ).eval()
