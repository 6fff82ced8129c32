"""AnimeGamer-Nano from one command each:

    python -m animegamer.nano world --out DATASET [--shots N] [--seed S] [--episode-length L]
        [--tower-steps N] [--tower-token-weight W]
    python -m animegamer.nano train --dataset DATASET --out RUN [--quick | --recipe R] [--resume]
        [--install]

`world` renders the Nano world as a dataset in the data pipeline's format; `train` runs every
training phase on it (`python -m animegamer.train all` with `recipes/nano.yaml`: the VAE, then
phases a, b, c) and, with `--install`, puts the trained character folder where the app plays it
without a GPU (`assets/nano/`).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from animegamer.data.episodes import TEST_FRACTION
from animegamer.data.errors import DataError
from animegamer.nano import NANO_NAME
from animegamer.nano.tower import TowerTraining
from animegamer.settings import DEFAULT_NANO_DIR, PACKAGE_ROOT

EXIT_ERROR = 2
NANO_RECIPE = PACKAGE_ROOT.parent / "recipes" / "nano.yaml"
QUICK_RECIPE = PACKAGE_ROOT.parent / "recipes" / "nano-quick.yaml"
NANO_MAX_BYTES = 40 * 1024**2
"""What the repository ships of Nano's weights, at most."""


def _add_world(commands: argparse._SubParsersAction) -> None:
    world = commands.add_parser("world", help="render the world as a dataset")
    world.add_argument("--out", type=Path, required=True, help="the dataset folder")
    world.add_argument("--shots", type=int, default=240, help="shots in all (default 240)")
    world.add_argument("--seed", type=int, default=0, help="the world's seed (default 0)")
    world.add_argument("--episode-length", type=int, default=8,
                       help="shots per episode (default 8)")
    world.add_argument("--characters", nargs="+", default=["Qiqi", "Sosuke"],
                       help="who plays, one episode each in turn (default Qiqi Sosuke)")
    world.add_argument("--test-fraction", type=float, default=TEST_FRACTION,
                       help=f"share of the episodes in the test split (default {TEST_FRACTION})")
    world.add_argument("--tower-steps", type=int, default=TowerTraining().steps,
                       help="training steps of the world's image tower, which the features come "
                            f"from (default {TowerTraining().steps}; tests use a few)")
    world.add_argument("--tower-token-weight", type=float, default=TowerTraining().token_weight,
                       help="weight of the image tower's term asking every token to name the "
                            "character, place and time (default 0: only the best token)")
    world.add_argument("--workers", type=int, default=2,
                       help="threads measuring and encoding shots (default 2)")
    world.set_defaults(run=run_world)


def _add_train(commands: argparse._SubParsersAction) -> None:
    train = commands.add_parser("train", help="train every model on a Nano dataset")
    train.add_argument("--dataset", type=Path, required=True, help="a `world` dataset folder")
    train.add_argument("--out", type=Path, required=True, help="the training folder")
    train.add_argument("--recipe", type=Path, default=None,
                       help="the training recipe (default recipes/nano.yaml)")
    train.add_argument("--quick", action="store_true",
                       help="recipes/nano-quick.yaml: the same path in about a minute (tests)")
    train.add_argument("--resume", action="store_true", help="continue an interrupted run")
    train.add_argument("--install", action="store_true",
                       help=f"copy the trained character to {DEFAULT_NANO_DIR} for the app")
    train.set_defaults(run=run_train)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m animegamer.nano", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    _add_world(commands)
    _add_train(commands)
    return parser


def run_world(args: argparse.Namespace) -> int:
    from animegamer.nano.world import WorldOptions, build_world

    if min(args.shots, args.episode_length, args.workers, args.tower_steps) < 1:
        raise DataError("--shots, --episode-length, --workers and --tower-steps must be at least 1")
    if not 0 <= args.test_fraction < 1:
        raise DataError("--test-fraction must be in [0, 1)")
    if args.tower_token_weight < 0:
        raise DataError("--tower-token-weight must be at least 0")
    options = WorldOptions(
        out=args.out, shots=args.shots, seed=args.seed, episode_length=args.episode_length,
        characters=tuple(args.characters), test_fraction=args.test_fraction,
        workers=args.workers, tower=TowerTraining(
            steps=args.tower_steps, seed=args.seed, token_weight=args.tower_token_weight
        ),
    )
    started = time.perf_counter()
    try:
        report = build_world(options)
    except (ValueError, FileExistsError) as error:
        raise DataError(str(error)) from None
    seconds = time.perf_counter() - started
    rows = report["stages"]["rows"]
    print(
        f"nano world: {args.shots} shots ({', '.join(f'{n} {s}' for s, n in rows.items())}) in "
        f"{report['episodes']['count']} episodes, seed {args.seed}, {seconds:.1f} s "
        f"({args.shots / seconds:.1f} shots/s) → {args.out}"
    )
    return 0


def run_train(args: argparse.Namespace) -> int:
    from animegamer.train.__main__ import CHARACTER
    from animegamer.train.__main__ import main as train

    recipe = args.recipe or (QUICK_RECIPE if args.quick else NANO_RECIPE)
    command = ["all", "--dataset", str(args.dataset), "--out", str(args.out),
               "--config", str(recipe), "--name", NANO_NAME]
    code = train([*command, "--resume"] if args.resume else command)
    if code or not args.install:
        return code
    install(args.out / CHARACTER, DEFAULT_NANO_DIR)
    print(f"installed: {DEFAULT_NANO_DIR} (the app plays it without a GPU)")
    return 0


def install(character: Path, target: Path) -> Path:
    """Copy a trained character folder to `target`, within the repository's size budget."""
    import shutil

    from animegamer.convert.character import check_layout

    check_layout(character)
    size = sum(p.stat().st_size for p in character.rglob("*") if p.is_file())
    if size > NANO_MAX_BYTES:
        raise DataError(f"{character} holds {size / 1024**2:.1f} MiB; the repository ships at "
                        f"most {NANO_MAX_BYTES / 1024**2:.0f} MiB of Nano weights")
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(character, staging)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command: Callable[[argparse.Namespace], int] = args.run
    try:
        return command(args)
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
