"""The cost of live previews per turn, on the CPU engines (Nano, the preview engine), and on a
CUDA GPU when there is one.

For each engine it plays `--turns` turns with previews on and as many with them off,
alternating (so that a machine's load drifts over both alike), and prints the median turn time
of each, their difference, and the time spent inside the preview callback per turn (the
direct measure of the overhead: timing the callback itself is immune to the load that moves
the turn times). With a GPU it also times one preview of a release-size clip latent
(16 channels × 5 frames × 60×90) on the GPU, the x0 estimate going there → small RGB images on
the host. The target is under 5 % of a turn.

    .venv/bin/python benchmarks/preview.py [--turns 10] [--engines nano preview]
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

from animegamer.game.rules import make_instruction, new_session
from animegamer.models.latent_preview import ClipPreview, LatentPreview, LatentPreviewCallback
from animegamer.models.noise_prior import FrameCorrelatedNoise
from animegamer.serving.engine import TurnEngine
from animegamer.serving.settings import Settings
from animegamer.serving.stand_ins import create_nano_engine, create_preview_engine

MOTIONS = ("fly on broomstick", "sit on railing", "walk through the town", "lie down on grass")
RELEASE_LATENT = (1, 5, 16, 60, 90)


def play_turns(engine: TurnEngine, turns: int) -> dict[str, list[float]]:
    """Alternate turns with and without previews; turn times and callback time per turn (the
    callback's class is wrapped with a timer meanwhile)."""
    spent: list[float] = []
    callback_fn = LatentPreviewCallback.callback_fn

    def timed(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        try:
            return callback_fn(self, *args, **kwargs)
        finally:
            spent.append(time.perf_counter() - started)

    LatentPreviewCallback.callback_fn = timed  # type: ignore[method-assign]
    results: dict[str, list[float]] = {"on": [], "off": [], "callback": [], "previews": []}
    session = new_session("Qiqi")
    try:
        for index in range(2 * turns + 1):
            instruction = make_instruction({
                "character": "Qiqi", "adverb": "gently", "motion": MOTIONS[index % 4],
                "time": "day", "place": "town",
            })
            shown: list[ClipPreview] = []
            preview_on = index % 2 == 1
            spent.clear()
            started = time.perf_counter()
            engine.play(session, instruction, seed=index,
                        on_preview=shown.append if preview_on else None)
            elapsed = time.perf_counter() - started
            if index == 0:
                continue  # warm-up
            results["on" if preview_on else "off"].append(elapsed)
            if preview_on:
                results["callback"].append(sum(spent))
                results["previews"].append(len(shown))
    finally:
        LatentPreviewCallback.callback_fn = callback_fn  # type: ignore[method-assign]
    return results


def report(name: str, engine: TurnEngine, results: dict[str, list[float]]) -> None:
    on, off = statistics.median(results["on"]), statistics.median(results["off"])
    callback = statistics.median(results["callback"])
    print(f"{name} engine ({engine.num_inference_steps} steps, {len(results['on'])} turns each,"
          f" {statistics.median(results['previews']):.0f} previews per turn)")
    print(f"  median turn, previews off: {off:.3f} s")
    print(f"  median turn, previews on:  {on:.3f} s  ({100 * (on - off) / off:+.1f} %)")
    print(f"  inside the preview callback per turn: {1000 * callback:.2f} ms "
          f"({100 * callback / off:.2f} % of a turn)")


def cuda_preview_cost(repeats: int = 50) -> None:
    """One preview of a release-size latent on the GPU (colouring, decoding, copy to host)."""
    device = torch.device("cuda")
    preview = LatentPreview(torch.rand(3, RELEASE_LATENT[2]), torch.rand(3))
    noise = FrameCorrelatedNoise(0.0)
    x0 = torch.randn(RELEASE_LATENT, device=device, dtype=torch.float16)
    for _ in range(5):
        preview.decode(noise.color(x0)[0])
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(repeats):
        preview.decode(noise.color(x0)[0])  # ends on the host: synchronises
    per_preview = (time.perf_counter() - started) / repeats
    print(f"CUDA ({torch.cuda.get_device_name()}): one preview of a {RELEASE_LATENT} latent "
          f"{1000 * per_preview:.2f} ms; 4 per 50-step turn: {4000 * per_preview:.1f} ms "
          f"({100 * 4 * per_preview / 24:.3f} % of the paper's 24 s turn)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=10, help="turns with and without, each")
    parser.add_argument("--engines", nargs="+", choices=("nano", "preview"),
                        default=["nano", "preview"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as output:
        settings = Settings(output_dir=Path(output))
        for name in args.engines:
            create = create_nano_engine if name == "nano" else create_preview_engine
            engine = create(settings)
            engine.models_for("Qiqi").decoder.set_progress_bar_config(disable=True)
            report(name, engine, play_turns(engine, args.turns))
    if torch.cuda.is_available():
        cuda_preview_cost()
    else:
        print("CUDA: no GPU here (nothing run)")


if __name__ == "__main__":
    main()
