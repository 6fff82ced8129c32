"""How much motion survives a VAE: its reconstructions of a dataset's test clips, measured as the
evaluation measures generated clips.

A decoder's clips are decoded by its VAE, so the motion level of the VAE's reconstruction of a
ground-truth shot bounds what the evaluation's ACC-F / MAE-F can reach with that VAE. Prints
the reconstructions' PSNR, their mean motion scope against the truth's, the correlation of the
two, and ACC-F / MAE-F of their levels (the dataset's `levels.json`) against the annotated level.

    .venv/bin/python benchmarks/vae_motion.py --dataset datasets/nano --vae assets/nano/vae \
        [--split test] [--every 1]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from diffusers import AutoencoderKLCogVideoX

from animegamer.data import layout
from animegamer.data.dataset import read_rows
from animegamer.data.decode import read_clip
from animegamer.data.flow import MotionLevels, motion_scope
from animegamer.evaluate.metrics import level_errors
from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline
from animegamer.train.vae import clip_tensor


@torch.no_grad()
def reconstruct(vae: AutoencoderKLCogVideoX, frames: np.ndarray) -> np.ndarray:
    """uint8 [F, H, W, 3] → the VAE's reconstruction (the posterior's mode), made uint8 as the
    pipeline makes generated clips."""
    decoded = vae.decode(vae.encode(clip_tensor(frames)[None]).latent_dist.mode()).sample
    return AnimeGamerPipeline.postprocess_video(decoded, "np")[0]


def psnr(reconstruction: np.ndarray, truth: np.ndarray) -> float:
    error = float(((reconstruction.astype(np.float64) - truth) ** 2).mean())
    return 10 * np.log10(255**2 / max(error, 1e-12))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--vae", type=Path, required=True, help="an AutoencoderKLCogVideoX folder")
    parser.add_argument("--split", default="test")
    parser.add_argument("--every", type=int, default=1, help="measure every N-th clip")
    args = parser.parse_args()
    rows = read_rows(args.dataset).get(args.split, [])[:: args.every]
    if not rows:
        sys.exit(f"{args.dataset} has no {args.split} rows")
    levels = MotionLevels.from_dict(json.loads((args.dataset / layout.LEVELS).read_text()))
    vae = AutoencoderKLCogVideoX.from_pretrained(args.vae).eval()
    started = time.perf_counter()
    scopes, truths, accuracy, errors, quality = [], [], [], [], []
    for row in rows:
        truth = read_clip(args.dataset / row["clip_path"])
        reconstruction = reconstruct(vae, truth)
        scope = motion_scope(reconstruction)
        acc, mae = level_errors(levels.level(scope), int(row["motion_level"]))
        scopes.append(scope)
        truths.append(float(row["motion_scope"]))
        accuracy.append(acc)
        errors.append(mae)
        quality.append(psnr(reconstruction, truth))
    print(f"{args.vae} on {len(rows)} {args.split} clips of {args.dataset} "
          f"({time.perf_counter() - started:.0f} s)")
    print(f"  PSNR {np.mean(quality):.1f} dB")
    print(f"  motion scope: reconstructions {np.mean(scopes):.2f}, truth {np.mean(truths):.2f}, "
          f"correlation {np.corrcoef(scopes, truths)[0, 1]:.3f}")
    print(f"  ACC-F {np.mean(accuracy):.3f}  MAE-F {np.mean(errors):.3f} "
          "(the reconstructions' levels against the annotated ones)")


if __name__ == "__main__":
    main()
