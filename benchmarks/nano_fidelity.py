"""How faithfully Nano draws the world: its clips against the world's own render, per character.

For `--turns` instructions per character drawn at random from the world's words (seed
`--seed`; none stored in the project), plays each as the first turn of a fresh game on the Nano
engine and renders the world's own shot for the same words (the character in the middle of the
instructed place and time). Both go through the app's mp4 writer. Prints per character the
issue's measures, Nano against the world through mp4 (the ceiling):

- scene SSIM: the clip's temporal median frame (the still scene) against the instructed place
  and time's background;
- palette: the share of the sprite's pixels in the character's colours;
- sprite size: Nano's sprite pixels over the world's, and the share of clips within [0.5, 2]×;
- movement: how far the sprite's centroid travels, Nano over the world, for walk/run/fly;
- character: the share of clips the world's character probe reads as the character;
- the median turn time.

`--strip PNG` writes the world over Nano, frames 0/8/16, for the first clips, 3× enlarged.

    .venv/bin/python benchmarks/nano_fidelity.py [--nano-dir assets/nano] [--turns 12]
        [--seed 2026] [--guidance G] [--steps N] [--strip docs/images/nano-fidelity.png]

`--guidance` is the classifier-free guidance's `g` and `--steps` the decoder's diffusion steps
(defaults: what the app plays Nano at).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from nano_vae import through_mp4, write_strip

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from animegamer.data.decode import read_clip
from animegamer.game.rules import Instruction, make_instruction, new_session
from animegamer.nano.fidelity import (
    centroid_travel,
    median_frame,
    palette_share,
    sprite_pixels,
    ssim,
)
from animegamer.nano.probes import probe_clip
from animegamer.nano.renderer import NanoRenderer, WorldState, lookup
from animegamer.nano.scene import WIDTH, render_background
from animegamer.nano.vocabulary import ADVERBS, MOTIONS, PLACES, TIMES
from animegamer.serving.settings import Settings
from animegamer.serving.stand_ins import create_nano_engine

MOVING = ("walk", "run", "fly")
"""Motions whose sprite travels: the movement ratio is measured on these."""
SIZE_RANGE = (0.5, 2.0)


@dataclass
class Scores:
    scene: list[float] = field(default_factory=list)
    scene_ceiling: list[float] = field(default_factory=list)
    palette: list[float] = field(default_factory=list)
    palette_world: list[float] = field(default_factory=list)
    size_ratio: list[float] = field(default_factory=list)
    movement_ratio: list[float] = field(default_factory=list)
    character_read: list[bool] = field(default_factory=list)
    turn_s: list[float] = field(default_factory=list)


def instructions(character: str, count: int, rng: random.Random) -> list[Instruction]:
    motions = [m.name for m in MOTIONS if m.allows(character)]
    return [
        make_instruction({
            "character": character, "adverb": rng.choice(ADVERBS).name,
            "motion": rng.choice(motions), "time": rng.choice(TIMES).name,
            "place": rng.choice(PLACES).words[0],
        })
        for _ in range(count)
    ]


def measure(scores: Scores, instruction: Instruction, nano: np.ndarray, world: np.ndarray,
            world_mp4: np.ndarray) -> None:
    _, _, time, place = lookup(instruction)
    background = render_background(place, time)
    character = instruction.character
    scores.scene.append(ssim(median_frame(nano), background))
    scores.scene_ceiling.append(ssim(median_frame(world_mp4), background))
    scores.palette.append(palette_share(nano, background, character, time))
    scores.palette_world.append(palette_share(world_mp4, background, character, time))
    world_size = sprite_pixels(world_mp4, background)
    if world_size > 0:
        scores.size_ratio.append(sprite_pixels(nano, background) / world_size)
    world_travel = centroid_travel(world_mp4, background)
    if any(word in instruction.motion for word in MOVING) and world_travel > 0:
        scores.movement_ratio.append(centroid_travel(nano, background) / world_travel)
    scores.character_read.append(probe_clip(nano).labels()["character"] == character)


def report(name: str, scores: Scores) -> None:
    sizes = scores.size_ratio
    within = sum(SIZE_RANGE[0] <= r <= SIZE_RANGE[1] for r in sizes) / max(1, len(sizes))
    movement = (f"{statistics.median(scores.movement_ratio):.2f} "
                f"({len(scores.movement_ratio)} clips)" if scores.movement_ratio else "-")
    palette, world = statistics.mean(scores.palette), statistics.mean(scores.palette_world)
    print(f"{name:8} scene SSIM {statistics.mean(scores.scene):.3f} "
          f"(ceiling {statistics.mean(scores.scene_ceiling):.3f}) · palette "
          f"{palette:.2f} (world {world:.2f})"
          f" · sprite size {statistics.median(sizes) if sizes else float('nan'):.2f}×, "
          f"{within:.0%} within [0.5, 2] · movement {movement} · character read "
          f"{statistics.mean(scores.character_read):.0%} · turn "
          f"{statistics.median(scores.turn_s) if scores.turn_s else float('nan'):.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nano-dir", type=Path, default=Path("assets/nano"))
    parser.add_argument("--turns", type=int, default=12, help="instructions per character")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--guidance", type=float, default=Settings().nano_guidance)
    parser.add_argument("--steps", type=int, default=Settings().nano_steps,
                        help="the decoder's diffusion steps (default: the app's)")
    parser.add_argument("--strip", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rng = random.Random(args.seed)
    renderer = NanoRenderer()
    strip: list[tuple[np.ndarray, np.ndarray]] = []
    every = Scores()
    with tempfile.TemporaryDirectory() as folder:
        engine = create_nano_engine(Settings(engine="nano", nano_dir=args.nano_dir,
                                             nano_guidance=args.guidance,
                                             nano_steps=args.steps,
                                             output_dir=Path(folder) / "clips"))
        for character in ("Qiqi", "Sosuke"):
            scores = Scores()
            for index, instruction in enumerate(instructions(character, args.turns, rng)):
                session = engine.play(new_session(character), instruction, seed=index)
                turn = session.turns[-1]
                nano = read_clip(Path(turn.clip_path))
                start = WorldState(x=WIDTH / 2, altitude=0.0, facing=1, time="day", place="town")
                world = renderer.render(instruction, start).frames
                world_mp4 = through_mp4(world, Path(folder))
                measure(scores, instruction, nano, world, world_mp4)
                scores.turn_s.append(turn.timings.total_s)
                if index < 2:
                    strip.append((world_mp4, nano))
            report(character, scores)
            for name in vars(every):
                getattr(every, name).extend(getattr(scores, name))
    report("all", every)
    if args.strip:
        write_strip(strip, args.strip)
        print(f"strip: {args.strip}")


if __name__ == "__main__":
    main()
