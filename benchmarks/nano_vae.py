"""How well a Nano VAE gives the world's frames back: held-out clips (the test split of each
character's dataset) through the VAE (the posterior's mean) and the app's mp4 writer, against
the clips themselves (the world's render through the same writer).

Prints, per character and for all: SSIM of the reconstruction against the clip (mean over
frames and channels), the share of the sprite's pixels in the character's colours
(`animegamer.nano.fidelity.palette_share`) for the reconstruction and for the clip (the
ceiling), and the mean absolute error. `--strip PNG` writes clip over reconstruction, frames
0/8/16 of the first clips, 3× enlarged.

    .venv/bin/python benchmarks/nano_vae.py --vae assets/nano/vae --dataset datasets/nano \
        [--clips 24] [--strip docs/images/nano-vae.png]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from diffusers.models.autoencoders.autoencoder_kl_cogvideox import AutoencoderKLCogVideoX
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from animegamer.data.dataset import read_rows
from animegamer.data.decode import read_clip
from animegamer.nano.fidelity import palette_share, ssim
from animegamer.nano.scene import render_background
from animegamer.nano.vocabulary import PLACES, TIMES
from animegamer.train.vae import clip_tensor
from animegamer.video.writer import write_mp4

STRIP_FRAMES = (0, 8, 16)


@torch.no_grad()
def reconstruct(vae: AutoencoderKLCogVideoX, frames: np.ndarray) -> np.ndarray:
    """uint8 [F, H, W, 3] through the VAE (the posterior's mean)."""
    decoded = vae.decode(vae.encode(clip_tensor(frames)[None]).latent_dist.mean).sample[0]
    pixels = ((decoded.clamp(-1, 1) + 1) * 127.5).round().byte()
    return pixels.permute(1, 2, 3, 0).numpy()


def through_mp4(frames: np.ndarray, folder: Path) -> np.ndarray:
    return read_clip(write_mp4(frames, folder / "clip.mp4"))


def score(vae: AutoencoderKLCogVideoX, dataset: Path, clips: int,
          folder: Path) -> tuple[dict[str, list[float]], list[tuple[np.ndarray, np.ndarray]]]:
    scores: dict[str, list[float]] = {"ssim": [], "palette": [], "palette_clip": [], "mae": []}
    pairs = []
    times = {t.name: t for t in TIMES}
    places = {word: p for p in PLACES for word in p.words}
    for row in read_rows(dataset)["test"][:clips]:
        clip = read_clip(dataset / row["clip_path"])
        rebuilt = through_mp4(reconstruct(vae, clip), folder)
        time = times[row["time"]]
        background = render_background(places[row["place"]], time)
        scores["ssim"].append(ssim(rebuilt, clip))
        scores["palette"].append(palette_share(rebuilt, background, row["character"], time))
        scores["palette_clip"].append(palette_share(clip, background, row["character"], time))
        scores["mae"].append(float(np.abs(rebuilt.astype(float) - clip).mean()))
        pairs.append((clip, rebuilt))
    return scores, pairs


def write_strip(pairs: list[tuple[np.ndarray, np.ndarray]], path: Path, scale: int = 3) -> None:
    """Each pair as two rows (clip, reconstruction) of frames 0/8/16, side by side."""
    rows = [np.concatenate([frames[i] for i in STRIP_FRAMES], axis=1)
            for pair in pairs for frames in pair]
    image = Image.fromarray(np.concatenate(rows, axis=0))
    image = image.resize((image.width * scale, image.height * scale), Image.NEAREST)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path)


def summary(name: str, scores: dict[str, list[float]]) -> str:
    mean = statistics.mean(scores["ssim"])
    return (f"{name:8} clips {len(scores['ssim']):3}  SSIM mean {mean:.3f} "
            f"min {min(scores['ssim']):.3f}  palette {statistics.mean(scores['palette']):.2f} "
            f"(clip {statistics.mean(scores['palette_clip']):.2f})  "
            f"MAE {statistics.mean(scores['mae']):.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vae", type=Path, required=True)
    parser.add_argument("--dataset", type=Path, required=True,
                        help="a `nano world` folder (one dataset per character)")
    parser.add_argument("--clips", type=int, default=24, help="test clips per character")
    parser.add_argument("--strip", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    vae = AutoencoderKLCogVideoX.from_pretrained(args.vae).eval()
    every: dict[str, list[float]] = {}
    strip = []
    with tempfile.TemporaryDirectory() as folder:
        for dataset in sorted(p.parent for p in args.dataset.glob("*/report.json")):
            scores, pairs = score(vae, dataset, args.clips, Path(folder))
            print(summary(dataset.name, scores), flush=True)
            strip.extend(pairs[:2])
            for key, values in scores.items():
                every.setdefault(key, []).extend(values)
    print(summary("all", every))
    if args.strip:
        write_strip(strip, args.strip)
        print(f"strip: {args.strip}")


if __name__ == "__main__":
    main()
