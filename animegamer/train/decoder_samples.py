"""The shots of a dataset split as training samples of the decoder (phases a and c).

A sample holds the clip's VAE latent distribution, the shot's cached tower features and its
motion-scope value. Clips are encoded by the frozen VAE once: each shot's latent mean and std go
to `LatentCache.root/<video>/<shot>.safetensors`, under a folder named after the VAE's
fingerprint (its config and weights), so a later epoch, phase or run reuses them and another VAE
never does. Latents are [T, C, H, W] (the transformer's layout), unscaled; `draw_latents` samples
and scales them for a training step, as the VAE's `latent_dist.sample() * scaling_factor`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import imageio_ffmpeg
import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch.utils.data import Dataset

from animegamer.data.flow import MotionLevels
from animegamer.data.scenes import SceneKey, scene_key
from animegamer.data.store import write_atomic
from animegamer.models.cpu_conv import use_onednn_conv3d
from animegamer.models.scene_latent import SceneSource, scene_latents

CLIP_FRAMES = 17
"""Frames of a training clip (the VAE needs 4k + 1)."""


class ShotDataError(ValueError):
    """A dataset file training cannot use; the message names it."""


def read_clip(path: Path) -> np.ndarray:
    """An mp4's frames, uint8 [F, H, W, 3]."""
    if not path.is_file():
        raise ShotDataError(f"{path}: no such clip")
    reader = imageio_ffmpeg.read_frames(str(path), input_params=["-protocol_whitelist", "file"])
    try:
        meta = next(reader)
        width, height = meta["size"]
        frames = [np.frombuffer(frame, np.uint8).reshape(height, width, 3) for frame in reader]
    finally:
        reader.close()
    return np.stack(frames)


def clip_video(frames: np.ndarray) -> torch.Tensor:
    """uint8 frames [F, H, W, 3] → the VAE's input [3, F, H, W] in [-1, 1] (fp32)."""
    return torch.from_numpy(np.ascontiguousarray(frames)).permute(3, 0, 1, 2).float() / 127.5 - 1


def vae_fingerprint(vae: torch.nn.Module) -> str:
    """16 hex digits of the VAE's config and weights: the latent cache's folder name."""
    digest = hashlib.sha256()
    # private keys (diffusers' `_use_default_values`, a list in set order) vary between runs
    config = {k: v for k, v in dict(getattr(vae, "config", {})).items() if not k.startswith("_")}
    digest.update(json.dumps(config, sort_keys=True, default=str).encode())
    for name, tensor in sorted(vae.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def levels_of(dataset: Path) -> MotionLevels:
    """The dataset's fitted motion levels (`levels.json`)."""
    path = dataset / "levels.json"
    try:
        return MotionLevels.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except OSError:
        raise ShotDataError(f"{path}: missing (the dataset's motion levels)") from None
    except (ValueError, TypeError) as error:
        raise ShotDataError(f"{path}: {error}") from None


def read_features(dataset: Path, row: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """A shot's cached (text [30, Wt], image [196, Wi]) features, fp32."""
    path = dataset / row["features_path"]
    try:
        tensors = load_file(str(path))
        return tensors["text_features"].float(), tensors["image_features"].float()
    except (OSError, KeyError) as error:
        raise ShotDataError(f"{path}: cannot read the shot's features ({error})") from None


class LatentCache:
    """Per-shot latent distributions (mean and std, [T, C, H, W] fp32) of one VAE."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def for_vae(cls, folder: Path, vae: torch.nn.Module) -> LatentCache:
        return cls(folder / vae_fingerprint(vae))

    def path(self, row: dict[str, Any]) -> Path:
        return self.root / row["video"] / f"{row['shot_id']}.safetensors"

    def missing(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return [row for row in rows if not self.path(row).is_file()]

    @torch.no_grad()
    def fill(self, rows: Sequence[dict[str, Any]], dataset: Path, vae: Any) -> int:
        """Encode the clips of `rows` that have no cached latent; returns how many it encoded.
        One clip at a time, so on the CPU the VAE's convolutions go through oneDNN
        (`use_onednn_conv3d`)."""
        todo = self.missing(rows)
        if todo:
            use_onednn_conv3d(vae)
        for row in todo:
            frames = read_clip(dataset / row["clip_path"])
            if len(frames) != CLIP_FRAMES:
                raise ShotDataError(
                    f"{dataset / row['clip_path']}: {len(frames)} frames, training needs "
                    f"{CLIP_FRAMES}"
                )
            video = clip_video(frames)[None].to(vae.device, vae.dtype)
            distribution = vae.encode(video).latent_dist
            tensors = {
                "mean": distribution.mean[0].permute(1, 0, 2, 3).float().cpu().contiguous(),
                "std": distribution.std[0].permute(1, 0, 2, 3).float().cpu().contiguous(),
            }

            def write(part: Path, tensors: dict[str, torch.Tensor] = tensors) -> None:
                save_file(tensors, str(part))

            write_atomic(self.path(row), write)
        return len(todo)

    def load(self, row: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        tensors = load_file(str(self.path(row)))
        return tensors["mean"], tensors["std"]


def draw_latents(
    mean: torch.Tensor, std: torch.Tensor, scaling_factor: float, generator: torch.Generator
) -> torch.Tensor:
    """A latent sample `(mean + std·ε)·scaling_factor`, ε from `generator` (on the CPU)."""
    noise = torch.randn(mean.shape, generator=generator).to(mean.device)
    return (mean + std * noise) * scaling_factor


def encoded_scenes(vae: Any, rows: Sequence[dict[str, Any]],
                   source: SceneSource) -> dict[SceneKey, torch.Tensor]:
    """The scaled latent [C, h, w] (CPU) of every (time, place) the rows name, each encoded
    once."""
    keys = sorted({scene_key(row) for row in rows})
    latents = scene_latents(vae, [source(time, place) for time, place in keys]).cpu()
    return dict(zip(keys, latents, strict=True))


class ShotDataset(Dataset):
    """Rows of a split → samples: `latent_mean`, `latent_std` [T, C, H, W], `text_features`
    [30, Wt], `image_features` [196, Wi], `motion_scope` (the level's representative value,
    what play feeds for that level), and with `scenes` (`encoded_scenes`) the `scene` latent its
    row's time and place name."""

    def __init__(
        self,
        rows: Sequence[dict[str, Any]],
        dataset: Path,
        cache: LatentCache,
        levels: MotionLevels,
        scenes: Mapping[SceneKey, torch.Tensor] | None = None,
    ) -> None:
        self.rows = list(rows)
        self.dataset = dataset
        self.cache = cache
        self.levels = levels
        self.scenes = scenes

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        row = self.rows[index]
        mean, std = self.cache.load(row)
        text, image = read_features(self.dataset, row)
        scope = self.levels.value(int(row["motion_level"]))
        sample = {
            "latent_mean": mean,
            "latent_std": std,
            "text_features": text,
            "image_features": image,
            "motion_scope": torch.tensor(scope, dtype=torch.float32),
        }
        if self.scenes is not None:
            sample["scene"] = self.scenes[scene_key(row)]
        return sample


def collate(samples: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Stack samples' tensors key by key."""
    return {key: torch.stack([s[key] for s in samples]) for key in samples[0]}
