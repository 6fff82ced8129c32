"""FLOPs of one turn of the real decoder, and what they mean for batching on a GPU.

Counts the transformer's matrix products from the release's shapes (the defaults of
`AnimeGamerTransformer3DModel`: 30 layers of width 1920, 5 latent frames of 60×90 in 2×2
patches, 226 representation tokens), per denoising step with classifier-free guidance (two
halves) and per turn of `--steps`. Prints the tokens one forward call multiplies, the FLOPs, and
the time a turn takes at a GPU's dense bf16 peak and at `--mfu` of it. A forward call over
~14,000 tokens already fills a GPU's matrix units, so a batch of turns can gain at most what
batch 1 leaves unused.

    .venv/bin/python benchmarks/decoder_flops.py [--steps 50] [--mfu 0.5]
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from animegamer.game.representation import REPRESENTATION_TOKENS
from animegamer.models.transformers.transformer_animegamer import (
    AnimeGamerTransformer3DModel,
)

PEAK_BF16_TFLOPS = {"A100": 312.0, "H100 SXM": 989.0}
"""Dense bf16 tensor-core peaks from the vendor's data sheets."""


def release_shapes() -> dict[str, int]:
    """The defaults of the transformer's constructor: the release's shapes."""
    signature = inspect.signature(AnimeGamerTransformer3DModel.__init__)
    return {name: p.default for name, p in signature.parameters.items()
            if isinstance(p.default, int) and not isinstance(p.default, bool)}


def step_flops(shapes: dict[str, int]) -> tuple[int, float]:
    """(tokens of one half, FLOPs of one guided step: both halves)."""
    width = shapes["num_attention_heads"] * shapes["attention_head_dim"]
    frames = (shapes["sample_frames"] - 1) // shapes["temporal_compression_ratio"] + 1
    patches = (shapes["sample_height"] // shapes["patch_size"]) * (
        shapes["sample_width"] // shapes["patch_size"])
    tokens = frames * patches + REPRESENTATION_TOKENS
    projections = 4 * width * width  # q, k, v, out
    feed_forward = 2 * width * 4 * width  # CogVideoX's GELU MLP, 4× wide
    linear = 2 * tokens * (projections + feed_forward)
    attention = 2 * 2 * tokens * tokens * width  # QKᵀ and AV
    per_half = shapes["num_layers"] * (linear + attention)
    return tokens, 2.0 * per_half


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--mfu", type=float, default=0.5,
                        help="share of the peak a good kernel reaches at batch 1")
    args = parser.parse_args()
    tokens, flops = step_flops(release_shapes())
    turn = flops * args.steps
    print(f"tokens per half {tokens} · per forward call (both halves) {2 * tokens}")
    print(f"TFLOP per step {flops / 1e12:.1f} · per turn of {args.steps} steps "
          f"{turn / 1e15:.2f} PFLOP")
    for gpu, peak in PEAK_BF16_TFLOPS.items():
        at_peak = turn / (peak * 1e12)
        print(f"{gpu}: {at_peak:.1f} s a turn at peak, {at_peak / args.mfu:.1f} s at "
              f"{args.mfu:.0%} of it; a batch of B turns takes about B × that")


if __name__ == "__main__":
    main()
