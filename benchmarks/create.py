"""What `python -m animegamer.create` with the CPU recipe makes of README's worked example (the
example's 20 shots), and what it costs.

Writes the example video set (`python -m animegamer.create example`) into `--out` (default: a
temporary folder), runs `create` on it with the recipe (default recipes/cpu.yaml; a finished run
in `--out` is reused, as `create` continues one) and prints its wall time per stage and the CPU
time of the whole benchmark (on a busy machine the CPU time bounds what an idle one would take;
`taskset -c 0,1` holds it to two cores). Then plays every example shot's words as a turn of the new
character (window 1, the default steps) and reads each clip as the Nano world's probes read the
world's own (Kiki is drawn with Qiqi's sprite, so a recognisable Kiki reads as Qiqi), with the
scene SSIM of the clip's median frame against the instructed background. Prints per-stage
seconds, the share read as Qiqi (all shots; shots without a close-up) and the median turn.

`--strip PNG` writes the world's render over the character's clip, frames 0/8/16, for the first
shots of each video, 3× enlarged.

    .venv/bin/python benchmarks/create.py [--out DIR] [--recipe R] [--strip PNG]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from nano_vae import through_mp4, write_strip

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from animegamer.create.example import EXAMPLE_CHARACTER, SHOTS, SPRITE, write_example
from animegamer.create.pipeline import DEFAULT_RECIPE, CreateOptions, create_character
from animegamer.data.decode import read_clip
from animegamer.game.rules import make_instruction
from animegamer.nano.fidelity import median_frame, ssim
from animegamer.nano.probes import probe_clip
from animegamer.nano.renderer import NanoRenderer, WorldState, lookup
from animegamer.nano.scene import WIDTH, render_background
from animegamer.paths import PACKAGE_ROOT
from animegamer.play.headless import PlayOptions, play

REGISTRY = PACKAGE_ROOT.parent / "assets" / "characters.yaml"


def create(out: Path, recipe: Path) -> float:
    """The example footage and `create` on it, registered in a copy of the registry; seconds."""
    paths = write_example(out / "example")
    registry = out / "characters.yaml"
    if not registry.exists():
        shutil.copy(REGISTRY, registry)
        shutil.copytree(REGISTRY.parent / "avatars", out / "avatars", dirs_exist_ok=True)
    started = time.perf_counter()
    result = create_character(CreateOptions(
        videos=paths["videos"], character=EXAMPLE_CHARACTER, reference_image=paths["reference"],
        annotations=paths["answers"], out=out / "kiki", recipes=(recipe,), registry=registry,
    ))
    seconds = time.perf_counter() - started
    stages = ", ".join(f"{name} {value:.0f} s" for name, value in result.seconds.items())
    cores = len(os.sched_getaffinity(0))
    print(f"create ({recipe.name}, {cores} cores): {seconds / 60:.1f} min ({stages}); phases: "
          + ", ".join(f"{phase} {steps} steps {first:.3f}→{last:.3f}"
                      for phase, (steps, first, last) in result.losses.items()))
    os.environ["ANIMEGAMER_CHARACTERS"] = str(registry)
    return seconds


def turn_words() -> list[tuple[str, bool, str, str]]:
    """Each example shot as (instruction, close-up, time, place)."""
    return [(f"Character: {EXAMPLE_CHARACTER}; Motion: {adverb} {motion}; "
             f"Background: {when} {place}.", close_up, when, place)
            for _, adverb, motion, when, place, close_up in SHOTS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="work folder (default: a temp)")
    parser.add_argument("--recipe", type=Path, default=DEFAULT_RECIPE)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--strip", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    args.out = args.out or Path(tempfile.mkdtemp(prefix="create-bench-"))
    create(args.out, args.recipe)
    shots = turn_words()
    result = play(PlayOptions(instructions=[words for words, *_ in shots],
                              out=args.out / "play", character=EXAMPLE_CHARACTER, seed=0,
                              window=1), say=lambda line: None)
    renderer, reads, scenes, strip = NanoRenderer(), [], [], []
    for turn, (_, close_up, when, place) in zip(result.session.turns, shots, strict=True):
        clip = read_clip(Path(turn.clip_path))
        read = probe_clip(clip).labels()["character"] == SPRITE
        reads.append((read, close_up))
        instruction = make_instruction({**turn.instruction.fields(), "character": SPRITE})
        _, _, world_time, world_place = lookup(instruction)
        scenes.append(ssim(median_frame(clip), render_background(world_place, world_time)))
        if len(strip) < 4 and not close_up:
            start = WorldState(x=WIDTH / 2, altitude=0.0, facing=1, time=when, place=place)
            world = through_mp4(renderer.render(instruction, start).frames, args.out)
            strip.append((world, clip))
    wide = [read for read, close_up in reads if not close_up]
    print(f"{result.casting}: read as {SPRITE} {np.mean([r for r, _ in reads]):.0%} of "
          f"{len(reads)} clips ({np.mean(wide):.0%} of the {len(wide)} without a close-up) · "
          f"scene SSIM {statistics.mean(scenes):.3f} · turn "
          f"{statistics.median(t.timings.total_s for t in result.session.turns):.2f} s")
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    print(f"CPU time of the whole benchmark: {sum(u.ru_utime + u.ru_stime for u in usage):.0f} s")
    if args.strip:
        write_strip(strip, args.strip)
        print(f"strip: {args.strip}")


if __name__ == "__main__":
    main()
