"""Command line: `animegamer COMMAND ...` (installed) or `python -m animegamer COMMAND ...`.

    animegamer play --character Qiqi "quickly run, day town" "Motion: fly; Background: night sky" \
        --out DIR

Each command other than `play` is its package's own command line (`python -m animegamer.train`
is `animegamer train`); `play` is `animegamer.play.play`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from animegamer.cli.exit_codes import EXIT_ERROR, EXIT_OK
from animegamer.cli.output import add_verbose_flag, configure_output, hide_progress_bars
from animegamer.serving.settings import EngineKind

COMMANDS = {
    "create": "animegamer.create.__main__",
    "train": "animegamer.train.__main__",
    "data": "animegamer.data.__main__",
    "nano": "animegamer.nano.__main__",
    "convert": "animegamer.convert.__main__",
    "evaluate": "animegamer.evaluate.__main__",
}
"""The commands that are another package's command line, by name: its module's `main`."""
COMMAND_HELP = {
    "create": "a playable, registered character from a folder of videos",
    "train": "train a character's models on a dataset",
    "data": "videos → an annotated dataset; show a dataset",
    "nano": "the Nano world: render its datasets, train its characters",
    "convert": "convert AnimeGamer release checkpoints",
    "evaluate": "play a benchmark and write the paper's table",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="animegamer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    play = commands.add_parser("play", help="play instructions as turns and write the clips")
    play.add_argument(
        "instructions", nargs="+",
        help="as the game's command line reads them: 'quickly run, day town' or "
        "'Character: …; Motion: …; Background: …'",
    )
    play.add_argument("--character", default=None, help="registry character (default: the first)")
    play.add_argument("--out", type=Path, required=True, help="folder for the clips")
    play.add_argument("--save", type=Path, help="also write the saved game to this file")
    play.add_argument("--engine", choices=[kind.value for kind in EngineKind], type=EngineKind,
                      help="default: ANIMEGAMER_ENGINE or auto (each character's own weights "
                      "where they can play here)")
    play.add_argument("--seed", type=int, help="seed of the first turn (then +1 per turn)")
    play.add_argument("--window", type=int, help="turns the game-state model sees (1..5)")
    play.add_argument("--steps", type=int, help="diffusion steps of the decoder")
    add_verbose_flag(play)
    for name, text in COMMAND_HELP.items():
        commands.add_parser(name, help=f"{text} (animegamer {name} --help)", add_help=False)
    return parser


def run_play(args: argparse.Namespace) -> int:
    from animegamer.characters.conversion.errors import ConversionError
    from animegamer.characters.hub import HubError
    from animegamer.characters.registry import RegistryError
    from animegamer.game.rules import InstructionError
    from animegamer.play import PlayOptions, play
    from animegamer.serving.engine import EngineError
    from animegamer.serving.settings import SettingsError

    if not args.verbose:
        hide_progress_bars()
    options = PlayOptions(
        instructions=args.instructions, out=args.out, character=args.character, save=args.save,
        engine=args.engine, seed=args.seed,
        window=args.window, steps=args.steps, progress_bars=args.verbose,
    )
    try:
        result = play(options, say=lambda line: print(line, flush=True))
    except (InstructionError, RegistryError, SettingsError, HubError, ConversionError,
            EngineError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_ERROR
    if result.saved is not None:
        print(f"saved game: {result.saved}")
    return EXIT_OK


def command_main(name: str) -> Callable[[Sequence[str] | None], int]:
    """The `main` of command `name`'s own command line."""
    main: Callable[[Sequence[str] | None], int] = importlib.import_module(COMMANDS[name]).main
    return main


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] and argv[0] in COMMANDS:
        return command_main(argv[0])(argv[1:])
    args = build_parser().parse_args(argv)
    configure_output(args.verbose)
    return run_play(args)


if __name__ == "__main__":
    sys.exit(main())
