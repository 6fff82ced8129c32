"""The animation-shot encoder E_a (docs/design.md §9): a shot's first frame and motion
description → the 226×1920 representation the decoder renders.

Two frozen towers make features: the first frame through OpenCLIP ViT-B-16 (transformers'
`CLIPVisionModel`, penultimate layer, CLS dropped → 196×768), the motion description through the
T5 v1.1 XXL encoder (CogVideoX-2B's `text_encoder`, 30 tokens → 30×4096). The trainable part,
`AnimeGamerShotEncoder`, projects each with `LayerNorm(Linear → GELU → Linear)` and concatenates
them, text first. Its weights are in every released decoder checkpoint (`text_proj`, `ip_proj`,
`txt_mix_layer_norm`, `ip_mix_layer_norm`); the converter keeps them.

The tower helpers here are plain functions of the towers, so the pipeline (`encode_shot`), the
data pipeline's feature cache and training all make features the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.modeling_utils import ModelMixin
from torch import nn

from animegamer.game.representation import REPRESENTATION_TOKENS, TEXT_TOKENS

if TYPE_CHECKING:
    from transformers import CLIPVisionModel, PreTrainedTokenizerBase, T5EncoderModel

CLIP_SIZE = 224
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


# diffusers types `config_name` differently in its two bases (a str in ModelMixin, None in
# ConfigMixin); every diffusers model has the same pair
class AnimeGamerShotEncoder(ModelMixin, ConfigMixin):  # type: ignore[misc]
    """The trainable part of E_a: text and image features → one shot representation.

    Args:
        text_width: width of the text tower's tokens (4096 for T5 v1.1 XXL).
        image_width: width of the image tower's tokens (768 for ViT-B-16).
        width: width of the representation (the decoder's hidden size, 1920 for CogVideoX-2B).
        text_tokens: rows of the representation that come from the text (30); the remaining
            `REPRESENTATION_TOKENS - text_tokens` rows (196) are image patches.
        norm_eps: epsilon of the two LayerNorms.
    """

    @register_to_config
    def __init__(
        self,
        text_width: int = 4096,
        image_width: int = 768,
        width: int = 1920,
        text_tokens: int = TEXT_TOKENS,
        norm_eps: float = 1e-5,
    ):
        super().__init__()
        if not 0 < text_tokens < REPRESENTATION_TOKENS:
            raise ValueError(f"text_tokens must lie in 1..{REPRESENTATION_TOKENS - 1}")
        self.text_proj = _projection(text_width, width)
        self.image_proj = _projection(image_width, width)
        self.text_norm = nn.LayerNorm(width, eps=norm_eps)
        self.image_norm = nn.LayerNorm(width, eps=norm_eps)

    @property
    def image_tokens(self) -> int:
        config: Any = self.config
        return REPRESENTATION_TOKENS - config.text_tokens

    def project(self, text_features: torch.Tensor, image_features: torch.Tensor) -> torch.Tensor:
        """[B, 30, text_width] and [B, 196, image_width] → the representation [B, 226, width].

        Runs in the module's dtype; features of another dtype are cast.
        """
        config: Any = self.config
        expected = {
            "text_features": (text_features, config.text_tokens, config.text_width),
            "image_features": (image_features, self.image_tokens, config.image_width),
        }
        for name, (tensor, rows, width) in expected.items():
            if tensor.ndim != 3 or tuple(tensor.shape[1:]) != (rows, width):
                raise ValueError(
                    f"{name} must be [B, {rows}, {width}], got {list(tensor.shape)}"
                )
        if text_features.shape[0] != image_features.shape[0]:
            raise ValueError(
                f"text and image features hold {text_features.shape[0]} and "
                f"{image_features.shape[0]} shots"
            )
        dtype = self.text_norm.weight.dtype
        text = self.text_norm(self.text_proj(text_features.to(dtype)))
        image = self.image_norm(self.image_proj(image_features.to(dtype)))
        return torch.cat([text, image], dim=1)

    def forward(self, text_features: torch.Tensor, image_features: torch.Tensor) -> torch.Tensor:
        return self.project(text_features, image_features)

    def unconditional(self) -> torch.Tensor:
        """[226, width]: the representation of all-zero features (what CFG's empty row is)."""
        config: Any = self.config
        weight = self.text_norm.weight
        text = torch.zeros(1, config.text_tokens, config.text_width, dtype=weight.dtype,
                           device=weight.device)
        image = torch.zeros(1, self.image_tokens, config.image_width, dtype=weight.dtype,
                            device=weight.device)
        return self.project(text, image)[0]


@dataclass
class ShotTowers:
    """The frozen feature towers of the shot encoder and the text tower's tokenizer."""

    image_encoder: CLIPVisionModel
    text_encoder: T5EncoderModel
    tokenizer: PreTrainedTokenizerBase

    @property
    def image_width(self) -> int:
        return self.image_encoder.config.hidden_size

    @property
    def text_width(self) -> int:
        return self.text_encoder.config.d_model

    @classmethod
    def from_pretrained(
        cls,
        image_encoder: str | Path,
        text_encoder: str | Path,
        tokenizer: str | Path,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ) -> ShotTowers:
        """Load the towers from local folders (each a transformers folder; the Hub resolver
        fetches them at the registry's pinned revisions)."""
        from transformers import AutoTokenizer, CLIPVisionModel, T5EncoderModel

        vision = CLIPVisionModel.from_pretrained(image_encoder, dtype=dtype).eval()
        text = T5EncoderModel.from_pretrained(text_encoder, dtype=dtype).eval()
        # nn.Module.to directly: transformers' decorated `.to` has a stub mypy reads as unbound
        nn.Module.to(vision, device)
        nn.Module.to(text, device)
        tokens = AutoTokenizer.from_pretrained(tokenizer)
        return cls(image_encoder=vision, text_encoder=text, tokenizer=tokens)

    def image_features(self, first_frames: np.ndarray | torch.Tensor) -> torch.Tensor:
        """First frames (see `clip_pixel_values`) → image tokens [B, 196, image_width] (fp32)."""
        return image_features(self.image_encoder, clip_pixel_values(first_frames))

    def text_features(self, motion_texts: list[str]) -> torch.Tensor:
        """Motion descriptions → text tokens [B, 30, text_width] (fp32)."""
        return text_features(self.text_encoder, self.tokenizer, motion_texts)


def _projection(in_width: int, width: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(in_width, width), nn.GELU(), nn.Linear(width, width))


def clip_pixel_values(frames: np.ndarray | torch.Tensor) -> torch.Tensor:
    """First frames → the image tower's input [B, 3, 224, 224] (fp32).

    `frames` are uint8 [B, H, W, 3] (what videos decode to) or float [B, 3, H, W] in [0, 1]. As
    the original: resized straight to 224×224 (bicubic, antialiased; the aspect is not kept) and
    normalised with CLIP's mean and std.
    """
    if isinstance(frames, np.ndarray):
        if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
            raise ValueError(
                f"frames must be uint8 [B, H, W, 3], got {frames.dtype} {list(frames.shape)}"
            )
        pixels = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float() / 255
    else:
        if frames.ndim != 4 or frames.shape[1] != 3:
            raise ValueError(f"frames must be [B, 3, H, W] in [0, 1], got {list(frames.shape)}")
        pixels = frames.float()
    pixels = F.interpolate(pixels, size=(CLIP_SIZE, CLIP_SIZE), mode="bicubic", antialias=True)
    mean = torch.tensor(CLIP_MEAN, device=pixels.device)[:, None, None]
    std = torch.tensor(CLIP_STD, device=pixels.device)[:, None, None]
    return (pixels - mean) / std


@torch.no_grad()
def image_features(image_encoder: CLIPVisionModel, pixel_values: torch.Tensor) -> torch.Tensor:
    """The penultimate layer's patch tokens [B, 196, 768]: 11 of ViT-B-16's 12 blocks, no
    `ln_post`, CLS dropped (fp32)."""
    pixel_values = pixel_values.to(image_encoder.device, image_encoder.dtype)
    output = image_encoder(pixel_values=pixel_values, output_hidden_states=True)
    return output.hidden_states[-2][:, 1:].float()


@torch.no_grad()
def text_features(
    text_encoder: T5EncoderModel,
    tokenizer: PreTrainedTokenizerBase,
    motion_texts: list[str],
    max_length: int = TEXT_TOKENS,
) -> torch.Tensor:
    """Motion descriptions ("softly talk") → T5's last hidden state [B, 30, 4096] (fp32), padded
    or truncated to `max_length` tokens as CogVideoX's text conditioning."""
    tokens = tokenizer(
        motion_texts,
        padding="max_length",
        max_length=max_length,
        truncation=True,
        add_special_tokens=True,
        return_tensors="pt",
    )
    ids = tokens.input_ids.to(text_encoder.device)
    return text_encoder(input_ids=ids).last_hidden_state.float()
