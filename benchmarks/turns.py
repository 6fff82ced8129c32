"""Turn time and memory over a long game on a CPU engine (the Nano world, or the preview engine).

Prints the median turn time of all turns, of the first and of the last 10, the last two's ratio,
and the process's resident memory at turn 10 and at the last turn: a game must not slow down or
grow with its length.

    .venv/bin/python benchmarks/turns.py --turns 200 [--engine nano|preview] [--steps N]
        [--nano-dir FOLDER]
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from animegamer.game.rules import make_instruction, new_session
from animegamer.serving.settings import EngineKind, Settings
from animegamer.serving.stand_ins import create_nano_engine, create_preview_engine

MOTIONS = ("fly on broomstick", "sit on railing", "walk through the town", "lie down on grass")


def rss_mib() -> float:
    """Current resident set size (Linux /proc), falling back to the peak elsewhere."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--window", type=int, default=3)
    parser.add_argument("--engine", choices=(EngineKind.NANO, EngineKind.PREVIEW),
                        type=EngineKind, default=EngineKind.PREVIEW)
    parser.add_argument("--steps", type=int, default=None,
                        help="diffusion steps (default: the engine's, 12 for Nano, 8 preview)")
    parser.add_argument("--nano-dir", type=Path, default=None,
                        help="the Nano world's folders, one per character (default: the shipped "
                        "assets/nano)")
    args = parser.parse_args()
    if args.turns < 20:
        parser.error("--turns must be at least 20 (two sets of 10 are compared)")

    with tempfile.TemporaryDirectory() as output:
        settings = Settings(engine=args.engine, output_dir=Path(output))
        if args.nano_dir:
            settings = dataclasses.replace(settings, nano_dir=args.nano_dir)
        if args.steps:
            settings = dataclasses.replace(settings, nano_steps=args.steps,
                                           preview_steps=args.steps)
        create = create_nano_engine if args.engine == EngineKind.NANO else create_preview_engine
        engine = create(settings)
        engine.models_for("Qiqi").decoder.set_progress_bar_config(disable=True)
        session = new_session("Qiqi", window=args.window)
        times: list[float] = []
        rss_at_10 = 0.0
        for index in range(args.turns):
            instruction = make_instruction(
                {"character": "Qiqi", "adverb": "gently", "motion": MOTIONS[index % len(MOTIONS)],
                 "time": "day", "place": "town"}
            )
            started = time.perf_counter()
            session = engine.play(session, instruction, seed=index)
            times.append(time.perf_counter() - started)
            if index + 1 == 10:
                rss_at_10 = rss_mib()
        rss_at_end = rss_mib()

    first = statistics.median(times[:10])
    last = statistics.median(times[-10:])
    print(f"turns: {args.turns} (window {args.window}, {engine.num_inference_steps} steps, "
          f"{engine.kind} engine)")
    print(f"median turn time, all:      {statistics.median(times):.3f} s")
    print(f"median turn time, first 10: {first:.3f} s")
    print(f"median turn time, last 10:  {last:.3f} s")
    print(f"last/first ratio: {last / first:.3f}")
    print(f"RSS at turn 10: {rss_at_10:.1f} MiB")
    print(f"RSS at turn {args.turns}: {rss_at_end:.1f} MiB")
    print(f"RSS growth: {100 * (rss_at_end - rss_at_10) / rss_at_10:+.2f} %")


if __name__ == "__main__":
    main()
