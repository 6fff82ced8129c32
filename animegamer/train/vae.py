"""A small video VAE of CogVideoX's family (`AutoencoderKLCogVideoX`), trained on a dataset's clips.

Real characters use CogVideoX-2B's VAE as it is (frozen, docs/design.md §11). A small world whose
clips are tiny (the Nano world: 17 frames of 64×96) needs a VAE of its own with the same layout
(4× in time: 17 frames → 5 latent frames, or 2× → 9 for fast small sprites; 8× in space as the
real one with 4 levels, or 4× with 3, which keeps a 64×96 world's small sprites legible in a
16×24 latent). Loss: L1
reconstruction (moving pixels optionally weighted up, `reconstruction_weights`) + a small KL
term; at the end the latent scaling factor is set to 1/std of the latents (as Stable
Diffusion's and CogVideoX's were), so the decoder sees unit-variance latents.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Sequence
from itertools import zip_longest
from pathlib import Path

import numpy as np
import torch
from diffusers.models.autoencoders.autoencoder_kl_cogvideox import AutoencoderKLCogVideoX

from animegamer.cli.progress import progress
from animegamer.data.dataset import read_rows
from animegamer.data.decode import read_clip
from animegamer.train.recipe import VaeRecipe

PRELOAD_BYTES = 2 * 1024**3


def build_vae(recipe: VaeRecipe, height: int, width: int) -> AutoencoderKLCogVideoX:
    """A fresh VAE for clips of `height`×`width` (multiples of 8)."""
    if height % 8 or width % 8:
        raise ValueError(f"clips of {height}x{width}: the VAE needs multiples of 8")
    levels = len(recipe.block_out_channels)
    return AutoencoderKLCogVideoX(
        down_block_types=("CogVideoXDownBlock3D",) * levels,
        up_block_types=("CogVideoXUpBlock3D",) * levels,
        block_out_channels=recipe.block_out_channels,
        layers_per_block=recipe.layers_per_block,
        norm_num_groups=recipe.norm_num_groups,
        latent_channels=recipe.latent_channels,
        temporal_compression_ratio=recipe.temporal_compression,
        sample_height=height,
        sample_width=width,
    )


def clip_tensor(frames: np.ndarray) -> torch.Tensor:
    """uint8 [F, H, W, 3] → the VAE's input [3, F, H, W] in [-1, 1]."""
    return torch.from_numpy(frames).permute(3, 0, 1, 2).float() / 127.5 - 1.0


def _clip_paths(dataset: Path) -> list[Path]:
    rows = read_rows(dataset).get("train", [])
    if not rows:
        raise ValueError(f"{dataset} has no train split to train a VAE on")
    return [dataset / row["clip_path"] for row in rows]


def interleaved_clip_paths(datasets: Sequence[Path]) -> list[Path]:
    """The train clips of every dataset, taken in turn (one of each, then the next of each),
    so that the first clips, which set the latent scale, come from all of them."""
    columns = zip_longest(*(_clip_paths(Path(dataset)) for dataset in datasets))
    return [path for row in columns for path in row if path is not None]


def train_vae(
    datasets: Sequence[Path],
    out: Path,
    recipe: VaeRecipe,
    max_steps: int | None = None,
    losses: Path | None = None,
    start_from: Path | None = None,
) -> AutoencoderKLCogVideoX:
    """Train on the datasets' train clips (`interleaved_clip_paths`: one VAE for a world's
    characters, each in its own dataset) and save the VAE to `out` (a diffusers model folder,
    `AutoencoderKLCogVideoX.from_pretrained(out)`) every `recipe.save_every` steps and at the
    end; losses go to `losses` (default `out/losses.jsonl`, appended to).

    `start_from`: a VAE folder of the recipe's architecture (a committed or interrupted run) to
    go on training from, so a VAE that needs more steps than one sitting accumulates them;
    the learning rate schedule starts afresh. Fresh random weights without it."""
    paths = interleaved_clip_paths(datasets)
    first = read_clip(paths[0])
    clips = _clip_reader(paths, first.nbytes)
    done = _steps_done(start_from)
    rng = random.Random(recipe.seed + done)
    torch.manual_seed(recipe.seed)
    vae = build_vae(recipe, first.shape[1], first.shape[2])
    if start_from is not None:
        _load_same_architecture(vae, Path(start_from))
    vae.train()
    optimizer = torch.optim.AdamW(vae.parameters(), lr=recipe.lr, weight_decay=0.0)
    steps = min(recipe.steps, max_steps or recipe.steps)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 0.5 * (1 + math.cos(math.pi * step / steps))
    )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    losses = losses or out / "losses.jsonl"
    losses.parent.mkdir(parents=True, exist_ok=True)
    with losses.open("a", encoding="utf-8") as log, progress(
        range(steps), total=steps, desc="vae"
    ) as bar:
        for step in bar:
            picked = rng.sample(range(len(paths)), min(recipe.batch_size, len(paths)))
            batch = torch.stack([_crop(_window(clip_tensor(clips(i)), recipe.train_frames, rng),
                                       recipe.train_crop, rng) for i in picked])
            posterior = vae.encode(batch).latent_dist
            reconstruction = vae.decode(posterior.sample()).sample
            weights = reconstruction_weights(batch, recipe.motion_weight)
            l1 = ((reconstruction - batch).abs() * weights).sum() / (weights.sum() * 3)
            loss = l1 + recipe.kl_weight * posterior.kl().mean()
            loss.backward()
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            if step % recipe.log_every == 0 or step == steps - 1:
                record = {"step": done + step + 1, "loss": loss.item(), "l1": l1.item()}
                log.write(json.dumps(record) + "\n")
                log.flush()
                bar.set_postfix(l1=f"{l1.item():.4f}")
            if (step + 1) % recipe.save_every == 0 and step + 1 < steps:
                _save(vae, out, done + step + 1)
                vae.train()
    vae.eval()
    vae.register_to_config(scaling_factor=latent_scaling_factor(vae, paths[: recipe.scale_samples]))
    _save(vae, out, done + steps)
    return vae


STEPS_FILE = "training.json"
"""Beside a trained VAE's weights: the optimizer steps behind them, which a run that goes on
from the folder counts from."""


def _steps_done(folder: Path | None) -> int:
    if folder is None or not (Path(folder) / STEPS_FILE).is_file():
        return 0
    return int(json.loads((Path(folder) / STEPS_FILE).read_text(encoding="utf-8"))["steps"])


def _save(vae: AutoencoderKLCogVideoX, out: Path, steps: int) -> None:
    """Write the VAE to `out`, and the steps behind it."""
    vae.eval()
    vae.save_pretrained(out, safe_serialization=True)
    (Path(out) / STEPS_FILE).write_text(json.dumps({"steps": steps}) + "\n", encoding="utf-8")


def _load_same_architecture(vae: AutoencoderKLCogVideoX, folder: Path) -> None:
    """Copy the weights of the VAE at `folder` into `vae`, which the recipe built; a VAE of
    another architecture is refused by name (its latent would not be this recipe's)."""
    trained = AutoencoderKLCogVideoX.from_pretrained(folder)
    keys = ("block_out_channels", "latent_channels", "temporal_compression_ratio",
            "layers_per_block", "norm_num_groups")
    differ = [k for k in keys if tuple(_listed(trained.config[k])) != tuple(_listed(vae.config[k]))]
    if differ:
        raise ValueError(f"{folder}: a VAE of another architecture ({', '.join(differ)} differ "
                         "from the recipe's vae section); train afresh or use its recipe")
    vae.load_state_dict(trained.state_dict())


def _listed(value: object) -> list:
    return list(value) if isinstance(value, list | tuple) else [value]


def _clip_reader(paths: list[Path], clip_bytes: int) -> Callable[[int], np.ndarray]:
    """Clip i's frames: all decoded once up front when they fit in `PRELOAD_BYTES` (a tiny
    world's do; decoding costs as much as a training step), else decoded on each use."""
    if len(paths) * clip_bytes > PRELOAD_BYTES:
        return lambda index: read_clip(paths[index])
    decoded = [read_clip(path) for path in paths]
    return decoded.__getitem__


def _window(clip: torch.Tensor, frames: int, rng: random.Random) -> torch.Tensor:
    """A random run of `frames` consecutive frames of a clip [3, F, H, W]."""
    if frames >= clip.shape[1]:
        return clip
    start = rng.randrange(clip.shape[1] - frames + 1)
    return clip[:, start:start + frames]


def reconstruction_weights(clips: torch.Tensor, motion_weight: float) -> torch.Tensor:
    """Per-pixel weights [B, 1, F, H, W] of the L1 for clips [B, 3, F, H, W] in [-1, 1]:
    1 + `motion_weight` × how far the pixel is from its mean over the window (any channel,
    saturating at 0.5, a quarter of the range), so what moves (a character, its limbs) counts
    as much as the static background it stands on. The decoder's diffusion loss weighs latents
    [B, C, F, H, W] the same way (`decoder_model.motion_weights`)."""
    moving = (clips - clips.mean(dim=2, keepdim=True)).abs().amax(dim=1, keepdim=True)
    return 1.0 + motion_weight * (moving / 0.5).clamp(max=1.0)


def _crop(clip: torch.Tensor, size: tuple[int, int] | None, rng: random.Random) -> torch.Tensor:
    """A random `size` [height, width] crop of a clip [3, F, H, W] on the 8-pixel grid (the
    whole clip when `size` is None or not smaller)."""
    if size is None:
        return clip
    height, width = min(size[0], clip.shape[2]), min(size[1], clip.shape[3])
    top = 8 * rng.randrange((clip.shape[2] - height) // 8 + 1)
    left = 8 * rng.randrange((clip.shape[3] - width) // 8 + 1)
    return clip[:, :, top:top + height, left:left + width]


@torch.no_grad()
def latent_scaling_factor(vae: AutoencoderKLCogVideoX, paths: list[Path]) -> float:
    """1 / std of the latent means of `paths`' clips."""
    means = [vae.encode(clip_tensor(read_clip(p))[None]).latent_dist.mean for p in paths]
    return float(1.0 / torch.cat(means).std().clamp_min(1e-6))


@torch.no_grad()
def reconstruction_error(vae: AutoencoderKLCogVideoX, frames: np.ndarray) -> float:
    """Mean absolute error in [0, 255] of a clip through the VAE (the posterior's mean)."""
    clip = clip_tensor(frames)[None]
    decoded = vae.decode(vae.encode(clip).latent_dist.mean).sample
    return float((decoded.clamp(-1, 1) - clip).abs().mean() * 127.5)
