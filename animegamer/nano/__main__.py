"""`python -m animegamer.nano world --out DATASET [--shots N] [--seed S] [--episode-length L]`:
render the Nano world as a dataset in the data pipeline's format."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from animegamer.data.episodes import TEST_FRACTION
from animegamer.data.errors import DataError

EXIT_ERROR = 2


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
    world.add_argument("--workers", type=int, default=2,
                       help="threads measuring and encoding shots (default 2)")
    world.set_defaults(run=run_world)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m animegamer.nano", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    _add_world(commands)
    return parser


def run_world(args: argparse.Namespace) -> int:
    from animegamer.nano.world import WorldOptions, build_world

    if args.shots < 1 or args.episode_length < 1 or args.workers < 1:
        raise DataError("--shots, --episode-length and --workers must be at least 1")
    if not 0 <= args.test_fraction < 1:
        raise DataError("--test-fraction must be in [0, 1)")
    options = WorldOptions(
        out=args.out, shots=args.shots, seed=args.seed, episode_length=args.episode_length,
        characters=tuple(args.characters), test_fraction=args.test_fraction,
        workers=args.workers,
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
