"""What a finer token grid costs a Nano turn: the decoder's render time on random weights at
Nano's sizes, for each VAE latent (channels, spatial and temporal compression) and patch size
(latent pixels a side, and latent frames a token spans: `patch_size_t`).

Random weights are as fast as trained ones, so this measures the grid before anything is
trained; the shot encoder and the game-state model (tens of milliseconds a turn) are left out.

    .venv/bin/python benchmarks/nano_grid.py [--steps 12] [--repeats 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from animegamer.data.flow import MotionLevels
from animegamer.game.representation import REPRESENTATION_TOKENS
from animegamer.models.decoder_defaults import DEFAULT_SAMPLE_FRAMES
from animegamer.nano.scene import HEIGHT, WIDTH
from animegamer.train.decoder_phase import tiny_training_pipeline
from animegamer.train.recipe import TinyInit, VaeRecipe
from animegamer.train.vae import build_vae

GRIDS = (
    # (label, VAE levels' widths, latent channels, temporal compression, patch, patch_t)
    ("v15: 4 ch, 4x, patch 4", (16, 32, 64), 4, 1, 4, None),
    ("16 ch, 4x, patch 4", (16, 32, 64), 16, 1, 4, None),
    ("16 ch, 4x, patch 2", (16, 32, 64), 16, 1, 2, None),
    ("16 ch, 4x, 2x time, patch 2", (16, 32, 64), 16, 2, 2, None),
    ("v16: 16 ch, 4x, patch 2, 2 frames", (16, 32, 64), 16, 1, 2, 2),
    ("16 ch, 8x, patch 1", (16, 32, 64, 64), 16, 1, 1, None),
)
REPRESENTATION_DIM = 128
LEVELS = MotionLevels(boundaries=(1.0, 2.0, 3.0, 4.0), values=(0.5, 1.5, 2.5, 3.5, 4.5))


def render_seconds(levels: tuple[int, ...], channels: int, temporal: int, patch: int,
                   patch_t: int | None, steps: int, repeats: int) -> tuple[float, int]:
    """Median seconds of one 12-step render (batch 1, guidance on) and tokens per clip."""
    recipe = VaeRecipe(block_out_channels=levels, latent_channels=channels,
                       temporal_compression=temporal, norm_num_groups=8, train_frames=5)
    with tempfile.TemporaryDirectory() as folder:
        build_vae(recipe, HEIGHT, WIDTH).save_pretrained(folder)
        init = TinyInit(representation_dim=REPRESENTATION_DIM, num_layers=4, patch_size=patch,
                        patch_size_t=patch_t, vae=Path(folder))
        pipeline = tiny_training_pipeline(init, 64, 64, LEVELS)
    pipeline.set_progress_bar_config(disable=True)
    config = pipeline.transformer.config
    frames = -(-((DEFAULT_SAMPLE_FRAMES - 1) // temporal + 1) // (patch_t or 1))
    tokens = frames * (config.sample_height // patch) * (config.sample_width // patch)
    representation = torch.randn(1, REPRESENTATION_TOKENS, REPRESENTATION_DIM)
    times = []
    for repeat in range(repeats + 1):
        started = time.perf_counter()
        with torch.inference_mode():
            pipeline(representation, 3, num_inference_steps=steps,
                     generator=torch.Generator().manual_seed(repeat))
        times.append(time.perf_counter() - started)
    return statistics.median(times[1:]), tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    print(f"{'grid':34} {'tokens/clip':>11} {'s/render':>9}  ({args.steps} steps, "
          f"{args.threads} threads)")
    for label, levels, channels, temporal, patch, patch_t in GRIDS:
        seconds, tokens = render_seconds(levels, channels, temporal, patch, patch_t, args.steps,
                                         args.repeats)
        print(f"{label:34} {tokens:>11} {seconds:>9.2f}", flush=True)


if __name__ == "__main__":
    main()
