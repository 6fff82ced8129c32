"""The frozen networks the metrics look through: CLIP (transformers), DreamSim (optional
package), and a cache of their features on disk.

`ClipBackbone` turns uint8 frames and texts into unit-length CLIP embeddings. Images are resized
straight to the vision tower's size (bicubic, antialiased, no centre crop: a 2:3 shot keeps all
of its content) and normalised with CLIP's mean and std, as the shot encoder does. `tiny_clip`
builds a random CLIP of toy width offline, with the byte-level `ByT5Tokenizer` (no vocabulary
file; its end-of-sequence id is the text tower's `eos_token_id`, where CLIP pools), so every
metric runs in tests without the Hub.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import (
    AutoTokenizer,
    ByT5Tokenizer,
    CLIPConfig,
    CLIPModel,
    CLIPTextConfig,
    CLIPVisionConfig,
    PreTrainedTokenizerBase,
)

from animegamer.models.shot_encoder import CLIP_MEAN, CLIP_STD

DEFAULT_CLIP = "openai/clip-vit-base-patch32"
TINY_CLIP = "tiny"
"""`--clip tiny`: random weights of toy width (tests, and a dry run where the Hub is out of reach;
the numbers then mean nothing)."""
MAX_TEXT_TOKENS = 77
BYT5_VOCAB = 259
DistanceFn = Callable[[np.ndarray, np.ndarray], torch.Tensor]
"""DreamSim: uint8 images [N, H, W, 3] twice → distances [N] (0 = the same picture)."""


def _pixels(images: np.ndarray, size: int) -> torch.Tensor:
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] != 3:
        raise ValueError(f"images must be uint8 [N, H, W, 3], got {images.dtype} {images.shape}")
    pixels = torch.from_numpy(np.array(images)).permute(0, 3, 1, 2).float() / 255  # a copy
    pixels = F.interpolate(pixels, size=(size, size), mode="bicubic", antialias=True)
    mean = torch.tensor(CLIP_MEAN)[:, None, None]
    std = torch.tensor(CLIP_STD)[:, None, None]
    return (pixels.clamp(0, 1) - mean) / std


@dataclass
class ClipBackbone:
    """A CLIP model and its tokenizer; `name` keys the feature cache."""

    model: CLIPModel
    tokenizer: PreTrainedTokenizerBase
    name: str
    batch_size: int = 64

    @property
    def device(self) -> torch.device:
        return self.model.device

    @torch.no_grad()
    def image_embeds(self, images: np.ndarray) -> torch.Tensor:
        """uint8 images [N, H, W, 3] → unit-length embeddings [N, P] (fp32, CPU), in batches."""
        vision: Any = self.model.config.vision_config
        size = int(vision.image_size)
        chunks = []
        for start in range(0, len(images), self.batch_size):
            pixels = _pixels(images[start : start + self.batch_size], size)
            output = self.model.get_image_features(
                pixel_values=pixels.to(self.device, self.model.dtype)
            )
            chunks.append(_embedding(output))
        return F.normalize(torch.cat(chunks), dim=-1)

    @torch.no_grad()
    def text_embeds(self, texts: Sequence[str]) -> torch.Tensor:
        """Texts → unit-length embeddings [N, P] (fp32, CPU), truncated to 77 tokens."""
        tokens = self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=MAX_TEXT_TOKENS,
            return_tensors="pt",
        )
        output = self.model.get_text_features(
            input_ids=tokens["input_ids"].to(self.device),
            attention_mask=tokens["attention_mask"].to(self.device),
        )
        return F.normalize(_embedding(output), dim=-1)


def _embedding(output: Any) -> torch.Tensor:
    """transformers ≥ 5 may return a model output whose pooled projection is `pooler_output`."""
    tensor = output if isinstance(output, torch.Tensor) else output.pooler_output
    return tensor.float().cpu()


def tiny_clip(seed: int = 0, width: int = 32) -> ClipBackbone:
    """A random CLIP of `width` (224 px images, 32 px patches) with the byte-level tokenizer."""
    torch.manual_seed(seed)
    text = CLIPTextConfig(
        vocab_size=BYT5_VOCAB, hidden_size=width, intermediate_size=2 * width,
        num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=MAX_TEXT_TOKENS,
        pad_token_id=0, bos_token_id=1, eos_token_id=1,
    )
    vision = CLIPVisionConfig(
        hidden_size=width, intermediate_size=2 * width, num_hidden_layers=2,
        num_attention_heads=2, image_size=224, patch_size=32,
    )
    config = CLIPConfig(
        text_config=text.to_dict(), vision_config=vision.to_dict(), projection_dim=width
    )
    return ClipBackbone(CLIPModel(config).eval(), ByT5Tokenizer(), f"{TINY_CLIP}-{seed}-{width}")


def load_clip(name: str, device: str | None = None) -> ClipBackbone:
    """`tiny`, or a CLIP checkpoint (Hub id or folder) through `CLIPModel.from_pretrained`."""
    if name == TINY_CLIP:
        return tiny_clip()
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.float16 if device.startswith("cuda") else torch.float32
    try:
        model = CLIPModel.from_pretrained(name, dtype=dtype)
        model.to(device)  # type: ignore[arg-type]
        tokenizer = AutoTokenizer.from_pretrained(name)
    except OSError as error:
        raise OSError(
            f"CLIP {name!r} could not be loaded ({error}); pass a local folder, or --clip tiny "
            "to run offline on random weights (numbers then mean nothing)"
        ) from error
    return ClipBackbone(model.eval(), tokenizer, name)


def load_dreamsim(cache_dir: Path, device: str | None = None) -> tuple[DistanceFn | None, str]:
    """DreamSim's distance through the `dreamsim` package, or `(None, why it is skipped)`."""
    if importlib.util.find_spec("dreamsim") is None:
        return None, "skipped: the dreamsim package is not installed (pip install dreamsim)"
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dreamsim = importlib.import_module("dreamsim").dreamsim
        model, preprocess = dreamsim(pretrained=True, cache_dir=str(cache_dir), device=device)
    except Exception as error:
        return None, f"skipped: DreamSim's weights could not be loaded ({error})"

    @torch.no_grad()
    def distance(first: np.ndarray, second: np.ndarray) -> torch.Tensor:
        from PIL import Image

        def batch(images: np.ndarray) -> torch.Tensor:
            return torch.cat([preprocess(Image.fromarray(image)) for image in images]).to(device)

        return model(batch(first), batch(second)).float().cpu().reshape(-1)

    return distance, "dreamsim (ensemble, 1 - distance)"


class FeatureCache:
    """Embeddings of fixed inputs (reference images, ground-truth frames, texts) on disk, keyed
    by the backbone's name and a digest of the input, so a rerun and every turn that shows the
    same reference reuse them."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _path(self, backbone: str, kind: str, payload: bytes) -> Path:
        digest = hashlib.sha1(backbone.encode() + b"\0" + kind.encode() + b"\0" + payload)
        return self.folder / f"{digest.hexdigest()}.safetensors"

    def get(self, backbone: str, kind: str, payload: bytes,
            compute: Callable[[], torch.Tensor]) -> torch.Tensor:
        path = self._path(backbone, kind, payload)
        if path.is_file():
            return load_file(str(path))["embeds"]
        value = compute().contiguous()
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        save_file({"embeds": value}, str(partial))
        partial.replace(path)
        return value

    def images(self, backbone: ClipBackbone, images: np.ndarray) -> torch.Tensor:
        payload = str(images.shape).encode() + np.ascontiguousarray(images).tobytes()
        return self.get(backbone.name, "images", payload, lambda: backbone.image_embeds(images))

    def texts(self, backbone: ClipBackbone, texts: Sequence[str]) -> torch.Tensor:
        payload = "\0".join(texts).encode()
        return self.get(backbone.name, "texts", payload, lambda: backbone.text_embeds(texts))


def load_judge(name: str, device: str | None = None,
               max_new_tokens: int = 96) -> Callable[[np.ndarray, str], str]:
    """An open vision-language model (e.g. a Qwen2-VL or LLaVA checkpoint) as a judge through
    transformers' `AutoModelForImageTextToText` and its processor's chat template: frames
    uint8 [K, H, W, 3] and a prompt → the greedy answer text."""
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    processor = AutoProcessor.from_pretrained(name)
    model = AutoModelForImageTextToText.from_pretrained(name, dtype=dtype)
    model.to(device)  # type: ignore[arg-type]
    model.eval()

    @torch.no_grad()
    def judge(frames: np.ndarray, prompt: str) -> str:
        images = [Image.fromarray(frame) for frame in frames]
        content = [*({"type": "image"} for _ in images), {"type": "text", "text": prompt}]
        text = processor.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True
        )
        inputs = processor(text=text, images=images, return_tensors="pt").to(device)
        # transformers types generate's `self` with a Protocol its own models fail under mypy
        output = model.generate(  # type: ignore[misc]
            **inputs, do_sample=False, max_new_tokens=max_new_tokens
        )
        answer = output[0, inputs["input_ids"].shape[1]:]
        return processor.decode(answer, skip_special_tokens=True)

    return judge
