"""Tiny random-weight shot-encoder towers for tests and the CPU world: the real architectures
(transformers' `CLIPVisionModel` at ViT-B-16's 224 px / 16 px patches, so 196 patch tokens; a T5
encoder) at toy widths, and the byte-level `ByT5Tokenizer`, which needs no vocabulary file."""

from __future__ import annotations

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
