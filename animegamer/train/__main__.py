"""`python -m animegamer.train {vae,decoder,game-state,adapt,all} --dataset DIR --out DIR --config
RECIPE.yaml [--config MORE.yaml ...] [--resume] [--max-steps N] [--name NAME]`, also under
`accelerate launch -m animegamer.train ...` or `torchrun -m animegamer.train ...`. `--vae DIR`
(decoder, all) takes a trained VAE instead of training the recipe's `vae` section.

The command line of `animegamer.train.train` (`run`: what it checks and writes).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from animegamer.cli.exit_codes import EXIT_ERROR, EXIT_OK
from animegamer.cli.output import add_verbose_flag, configure_output, hide_progress_bars


def parser() -> argparse.ArgumentParser:
    from animegamer.train.run import COMMANDS

    parser = argparse.ArgumentParser(
        prog="python -m animegamer.train", description="Train a character's models."
    )
    parser.add_argument("command", choices=COMMANDS, help="the phase to run, or all of them")
    parser.add_argument("--dataset", type=Path, required=True, help="a dataset folder")
    parser.add_argument("--out", type=Path, required=True, help="the training folder")
    parser.add_argument(
        "--config", type=Path, action="append", required=True,
        help="the recipe (YAML); repeat it to combine files of one phase each",
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue each phase from its latest checkpoint"
    )
    parser.add_argument(
        "--max-steps", type=int, default=None,
        help="stop each phase at this optimizer step (checkpointed; --resume continues)",
    )
    parser.add_argument(
        "--game-state", type=Path, default=None,
        help="adapt: the game-state model folder (default OUT/game_state)",
    )
    parser.add_argument(
        "--vae", type=Path, default=None,
        help="decoder, all: a trained VAE folder for the recipe's tiny decoder, instead of "
        "training the recipe's 'vae' section (the VAE a world's characters share)",
    )
    parser.add_argument(
        "--name", default=None,
        help="all: the trained character's name in its folder (default: the dataset's first "
        "character; a world of several characters, like Nano, names itself)",
    )
    parser.add_argument(
        "--push-to-hub", metavar="REPO", default=None,
        help="all: publish the character folder to this Hub model repo (HF_TOKEN)",
    )
    parser.add_argument("--private", action="store_true", help="with --push-to-hub")
    parser.add_argument(
        "--report-to", default=None,
        help="accelerate trackers for the losses (tensorboard, wandb, all); default none",
    )
    add_verbose_flag(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    configure_output(args.verbose)
    if not args.verbose:
        hide_progress_bars()
    from animegamer.train.run import TRAINING_ERRORS, TrainOptions, train

    options = TrainOptions(
        resume=args.resume, max_steps=args.max_steps, game_state=args.game_state, vae=args.vae,
        name=args.name, push_to_hub=args.push_to_hub, private=args.private,
        report_to=args.report_to,
    )
    try:
        train(args.config, args.dataset, args.out, args.command, options)
    except TRAINING_ERRORS as error:
        message = " ".join(str(error).split()) or type(error).__name__
        print(f"error: {message}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
