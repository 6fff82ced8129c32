"""A long game's playthrough download: how long it takes, and what it costs other players.

Prints the build time of an N-turn playthrough (synthetic 64×96 clips, 17 frames each, as the
Nano world writes them), then a bystander's turn time on the preview engine alone and while two
playthroughs are built in other threads (as two players downloading at once would), and the
ratio of the two medians (target: within 1.2).

    .venv/bin/python benchmarks/playthrough.py [--turns 1000] [--bystander-turns 6] [--steps 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from animegamer.game.rules import make_instruction, new_session
from animegamer.serving.settings import EngineKind, Settings
from animegamer.serving.stand_ins import create_preview_engine
from animegamer.video.playthrough import concat_mp4
from animegamer.video.writer import write_mp4

FRAMES, HEIGHT, WIDTH = 17, 64, 96


def synthetic_clips(folder: Path, turns: int) -> list[Path]:
    """`turns` clips in a game's layout: one encoded clip, hard-linked under each turn's name."""
    pixels = np.random.default_rng(0).integers(0, 255, (FRAMES, HEIGHT, WIDTH, 3), np.uint8)
    first = write_mp4(pixels, folder / "turn_0001.mp4")
    clips = [first]
    for index in range(2, turns + 1):
        clip = folder / f"turn_{index:04d}.mp4"
        os.link(first, clip)
        clips.append(clip)
    return clips


def bystander_turns(settings: Settings, turns: int) -> list[float]:
    """Seconds of each of `turns` preview-engine turns (one game)."""
    engine = create_preview_engine(settings)
    instruction = make_instruction({"character": "Qiqi", "adverb": "gently", "motion": "walk",
                                    "time": "day", "place": "town"})
    session = new_session("Qiqi")
    engine.play(session, instruction, seed=0)  # warm-up
    times = []
    for index in range(turns):
        started = time.perf_counter()
        session = engine.play(session, instruction, seed=index + 1)
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000, help="turns of the playthrough")
    parser.add_argument("--bystander-turns", type=int, default=6)
    parser.add_argument("--steps", type=int, default=4, help="the bystander's diffusion steps")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="playthrough-bench-") as folder:
        root = Path(folder)
        (root / "game").mkdir()
        clips = synthetic_clips(root / "game", args.turns)
        started = time.perf_counter()
        out = concat_mp4(clips, root / "playthrough.mp4")
        built = time.perf_counter() - started
        print(f"{args.turns}-turn playthrough: built in {built:.2f} s "
              f"({out.stat().st_size / 2**20:.1f} MiB)")

        settings = Settings(engine=EngineKind.PREVIEW, preview_steps=args.steps,
                            output_dir=root / "out")
        alone = bystander_turns(settings, args.bystander_turns)
        stop = threading.Event()

        def build_until_stopped(index: int) -> None:
            while not stop.is_set():
                concat_mp4(clips, root / f"download-{index}.mp4")

        builders = [threading.Thread(target=build_until_stopped, args=(i,)) for i in range(2)]
        for builder in builders:
            builder.start()
        try:
            during = bystander_turns(settings, args.bystander_turns)
        finally:
            stop.set()
            for builder in builders:
                builder.join()
    usual, loaded = statistics.median(alone), statistics.median(during)
    print(f"bystander turn: {usual:.3f} s median alone, {loaded:.3f} s while two playthroughs "
          f"are built ({loaded / usual:.2f}×; target ≤ 1.20×)")


if __name__ == "__main__":
    main()
