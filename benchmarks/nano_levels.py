"""Does the motion level agree with the words? For each shipped Nano character, every adverb ×
motion it may play (day, town, a fresh game): the level the game-state model predicts, and the
level of the world's own motion (the shot the world renders for those words, its motion scope
placed among the decoder's per-level scopes, as the world's dataset labelled its shots).

    .venv/bin/python benchmarks/nano_levels.py [--nano-dir assets/nano] [--threads 2]

Prints one table per character (rows: motions, columns: adverbs, cells `model/world`) and the
agreement; docs/nano.md#motion-levels holds a run.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from animegamer.data.flow import motion_scope
from animegamer.game.rules import Instruction, make_instruction
from animegamer.nano.renderer import NanoRenderer, WorldState
from animegamer.nano.scene import WIDTH
from animegamer.nano.vocabulary import ADVERBS, MOTIONS
from animegamer.serving.settings import Settings
from animegamer.serving.stand_ins import create_nano_engine


def world_level(renderer: NanoRenderer, instruction: Instruction, scopes: Sequence[float]) -> int:
    """The level of the shot the world renders for `instruction`: the decoder's level whose
    scope is nearest (in ratio) to the shot's; a still shot is level 1."""
    start = WorldState(x=WIDTH / 2, altitude=0.0, facing=1, time="day", place="town")
    scope = motion_scope(renderer.render(instruction, start).frames)
    if scope <= 0:
        return 1
    return 1 + min(range(len(scopes)), key=lambda k: abs(math.log(scope / scopes[k])))


def table(character: str, folder: Path, engine, renderer: NanoRenderer) -> tuple[int, int, int]:
    """Print the character's table; (cells, cells agreeing, cells within one level)."""
    config = json.loads((folder / "transformer" / "config.json").read_text())
    scopes = config["motion_scopes"]
    game_state = engine.models_for(character).game_state
    motions = [m for m in MOTIONS if m.allows(character)]
    print(f"\n{character}: model/world level (1 still .. 5 wild)")
    print(f"{'':18}" + "".join(f"{a.name[:9]:>10}" for a in ADVERBS))
    cells = agree = near = 0
    for motion in motions:
        row = []
        for adverb in ADVERBS:
            instruction = make_instruction({
                "character": character, "adverb": adverb.name, "motion": motion.name,
                "time": "day", "place": "town",
            })
            with torch.inference_mode():
                _, states = game_state.predict([], instruction)
            world = world_level(renderer, instruction, scopes)
            cells += 1
            agree += states.ml == world
            near += abs(states.ml - world) <= 1
            row.append(f"{states.ml}/{world}")
        print(f"{motion.name[:18]:18}" + "".join(f"{cell:>10}" for cell in row))
    print(f"agree {agree}/{cells}, within one level {near}/{cells}")
    return cells, agree, near


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nano-dir", type=Path, default=Path("assets/nano"))
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    settings = Settings(engine="nano", nano_dir=args.nano_dir)
    engine = create_nano_engine(settings)
    renderer = NanoRenderer()
    for folder in sorted(path for path in args.nano_dir.iterdir() if path.is_dir()):
        character = json.loads((folder / "animegamer.json").read_text())["character"] \
            if (folder / "animegamer.json").is_file() else None
        if character:
            table(character, folder, engine, renderer)


if __name__ == "__main__":
    main()
