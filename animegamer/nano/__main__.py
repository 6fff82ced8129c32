"""AnimeGamer-Nano from one command each:

    python -m animegamer.nano world --out DATASETS [--shots N] [--seed S] [--episode-length L]
        [--characters Qiqi Sosuke] [--tower-steps N]
    python -m animegamer.nano train --dataset DATASETS --out RUN [--quick | --recipe R] [--resume]
        [--vae FOLDER | --start-from NANO_FOLDER] [--install]
    python -m animegamer.nano vae --dataset DATASETS --out FOLDER [--recipe R]
        [--start-from FOLDER] [--steps N]

`world` renders one dataset per character, DATASETS/<character>/ (N shots each, in the data
pipeline's format). `train` trains one model set per character, as the release has one per
film: the world's VAE once on every character's clips (RUN/vae/; `--vae` takes a trained one
instead, e.g. the committed folder that `vae` sittings made), then each character's phases
a, b, c on its own dataset only (`animegamer.train.train` with `recipes/nano.yaml`, into
RUN/<character>/). `--install` puts the trained folders where the app plays them without a GPU:
`assets/nano/vae/` once, and `assets/nano/<character>/`, whose manifest names the shared VAE
(`convert.character.vae_folder`). `vae` trains the world's VAE alone, one sitting at a time,
going on from a saved VAE folder (`--start-from`). The functions: `animegamer.nano.make_world`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from animegamer.cli.exit_codes import EXIT_ERROR, EXIT_OK
from animegamer.cli.output import add_verbose_flag, configure_output, hide_progress_bars
from animegamer.data.episodes import TEST_FRACTION
from animegamer.paths import DEFAULT_NANO_DIR


def _add_world(commands: argparse._SubParsersAction) -> None:
    world = commands.add_parser("world", help="render the world as one dataset per character")
    world.add_argument("--out", type=Path, required=True,
                       help="the folder of the datasets (one per character: OUT/<character>/)")
    world.add_argument("--shots", type=int, default=240,
                       help="shots of each character (default 240)")
    world.add_argument("--seed", type=int, default=0, help="the world's seed (default 0)")
    world.add_argument("--episode-length", type=int, default=8,
                       help="shots per episode (default 8)")
    world.add_argument("--characters", nargs="+", default=["Qiqi", "Sosuke"],
                       help="who plays, each in a dataset of its own (default Qiqi Sosuke)")
    world.add_argument("--test-fraction", type=float, default=TEST_FRACTION,
                       help=f"share of the episodes in the test split (default {TEST_FRACTION})")
    world.add_argument("--tower-steps", type=int, default=None,
                       help="training steps of the world's image tower, which the features come "
                            "from (default: `nano.tower.TowerTraining`'s; tests use a few)")
    world.add_argument("--workers", type=int, default=2,
                       help="threads measuring and encoding shots (default 2)")
    add_verbose_flag(world)
    world.set_defaults(run=run_world)


def _add_train(commands: argparse._SubParsersAction) -> None:
    train = commands.add_parser("train", help="train each character's models on its dataset")
    train.add_argument("--dataset", type=Path, required=True,
                       help="a `world` folder: one dataset per character")
    train.add_argument("--out", type=Path, required=True,
                       help="the training folder (RUN/vae/ and one RUN/<character>/ each)")
    train.add_argument("--recipe", type=Path, default=None,
                       help="the training recipe (default recipes/nano.yaml)")
    train.add_argument("--quick", action="store_true",
                       help="recipes/nano-quick.yaml: the same path in about a minute (tests)")
    train.add_argument("--resume", action="store_true", help="continue an interrupted run")
    train.add_argument("--vae", type=Path, default=None,
                       help="a trained VAE folder of the recipe's architecture to use instead of "
                            "training the recipe's `vae` section (e.g. assets/nano/vae)")
    train.add_argument("--start-from", type=Path, default=None,
                       help="an installed Nano folder (e.g. assets/nano) each character goes on "
                            "training from, on its VAE: one sitting of recipes/nano-sitting.yaml")
    train.add_argument("--install", action="store_true",
                       help=f"copy the trained characters to {DEFAULT_NANO_DIR} for the app")
    add_verbose_flag(train)
    train.set_defaults(run=run_train)


def _add_vae(commands: argparse._SubParsersAction) -> None:
    vae = commands.add_parser("vae", help="one sitting of the world's VAE alone")
    vae.add_argument("--dataset", type=Path, required=True,
                     help="a `world` folder: one dataset per character")
    vae.add_argument("--out", type=Path, required=True, help="the VAE folder to write")
    vae.add_argument("--recipe", type=Path, default=None,
                     help="the recipe whose `vae` section trains it (default recipes/nano.yaml)")
    vae.add_argument("--start-from", type=Path, default=None,
                     help="a VAE folder of the recipe's architecture to go on from (may be --out)")
    vae.add_argument("--steps", type=int, default=None,
                     help="at most this many steps in this sitting (default: the recipe's)")
    add_verbose_flag(vae)
    vae.set_defaults(run=run_vae)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m animegamer.nano", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    _add_world(commands)
    _add_train(commands)
    _add_vae(commands)
    return parser


def run_world(args: argparse.Namespace) -> int:
    from animegamer.nano.make_world import build_datasets

    for built in build_datasets(
        args.out, shots=args.shots, seed=args.seed, episode_length=args.episode_length,
        characters=args.characters, test_fraction=args.test_fraction,
        tower_steps=args.tower_steps, workers=args.workers,
    ):
        print(
            f"nano world: {built.character}: {args.shots} shots "
            f"({', '.join(f'{n} {s}' for s, n in built.rows.items())}) in {built.episodes} "
            f"episodes, seed {args.seed}, {built.seconds:.1f} s "
            f"({args.shots / built.seconds:.1f} shots/s) → {built.folder}"
        )
    return EXIT_OK


def run_train(args: argparse.Namespace) -> int:
    from animegamer.nano.make_world import NANO_RECIPE, QUICK_RECIPE, train_world

    recipe = args.recipe or (QUICK_RECIPE if args.quick else NANO_RECIPE)
    trained = train_world(args.dataset, args.out, recipe, args.resume, vae=args.vae,
                          install_to=DEFAULT_NANO_DIR if args.install else None,
                          start_from=args.start_from)
    if trained.installed is not None:
        print(f"installed: {trained.installed} ({', '.join(trained.characters)}; the app plays "
              "them without a GPU)")
    return EXIT_OK


def run_vae(args: argparse.Namespace) -> int:
    from animegamer.nano.make_world import NANO_RECIPE, train_vae_sitting
    from animegamer.train.vae import STEPS_FILE

    folder = train_vae_sitting(args.dataset, args.out, args.recipe or NANO_RECIPE,
                               args.start_from, args.steps)
    print(f"vae: wrote {folder} ({(folder / STEPS_FILE).read_text(encoding='utf-8').strip()})")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_output(args.verbose)
    if not args.verbose:
        hide_progress_bars(datasets=True)
    from animegamer.characters.conversion.errors import ConversionError
    from animegamer.data.errors import DataError

    command: Callable[[argparse.Namespace], int] = args.run
    try:
        return command(args)
    except (DataError, ConversionError, ValueError, OSError, ImportError,
            FloatingPointError) as error:
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
