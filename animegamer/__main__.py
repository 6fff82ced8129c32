"""Command line: `python -m animegamer {play,convert} ...`.

    play     --character Qiqi "quickly run, day town" "Character: Qiqi; Motion: ...; ..." --out DIR
    convert  the converters (`python -m animegamer convert --help`)
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from animegamer.characters.conversion.errors import ConversionError
from animegamer.characters.hub import HubError
from animegamer.characters.registry import Registry, RegistryError, load_registry
from animegamer.command.parser import ClosedVocabulary, game_context, read_instruction
from animegamer.game.rules import Instruction, InstructionError, Turn, new_session, turn_note
from animegamer.game.savefile import save_game
from animegamer.serving.engine import EngineError, create_registry_engine
from animegamer.serving.settings import EngineKind, Settings, SettingsError

EXIT_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m animegamer", description=__doc__)
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
    play.add_argument("--engine", choices=[kind.value for kind in EngineKind],
                      help="default: ANIMEGAMER_ENGINE or auto (each character's own weights "
                      "where they can play here)")
    play.add_argument("--seed", type=int, help="seed of the first turn (then +1 per turn)")
    play.add_argument("--window", type=int, help="turns the game-state model sees (1..5)")
    play.add_argument("--steps", type=int, help="diffusion steps of the decoder")
    commands.add_parser("convert", help="see python -m animegamer.convert --help", add_help=False)
    return parser


def describe(turn: Turn, *, with_note: bool = True) -> str:
    """A played turn in four lines, and the turn's note when `with_note` (off where the
    engine's notice already explains it)."""
    s, g = turn.states, turn.gauges
    note = turn_note(turn) if with_note else ""
    return (
        f"turn {turn.index}: {turn.instruction.text}\n"
        f"  states ML={s.ml} SC={s.sc:+d} ET={s.et:+d} ST={s.st:+d} (motion scope "
        f"{turn.motion_scope:g}, seed {turn.seed})\n"
        f"  gauges stamina={g.stamina} social={g.social} entertainment={g.entertainment}\n"
        f"  clip {turn.clip_path} ({turn.timings.total_s:.1f} s)"
    ) + (f"\n  note: {note}" if note else "")


def read_all(
    texts: Sequence[str], registry: Registry, character: str, vocabulary: ClosedVocabulary | None
) -> list[Instruction]:
    """Every instruction, read as the game's command line reads them (each fills its gaps from
    the one before), before any turn is played: one refused text plays none."""
    instructions: list[Instruction] = []
    for number, text in enumerate(texts, start=1):
        last = instructions[-1] if instructions else None
        context = game_context(registry, character, last, vocabulary)
        try:
            instructions.append(read_instruction(text, context))
        except InstructionError as error:
            raise InstructionError(f"instruction {number}: {error}") from error
    return instructions


def play(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    overrides = {
        "engine": args.engine, "window": args.window, "output_dir": args.out,
        "steps": args.steps, "nano_steps": args.steps, "preview_steps": args.steps,
    }
    settings = dataclasses.replace(
        settings, **{key: value for key, value in overrides.items() if value is not None}
    )
    settings.validate()
    registry = load_registry(settings.registry_path)
    character = registry.get(args.character or registry.characters[0].name).name
    engine = create_registry_engine(settings, registry, [character])
    instructions = read_all(
        args.instructions, registry, character, engine.vocabulary_for(character)
    )
    casting = engine.casting(character)
    print(casting.describe())
    if casting.kind != EngineKind.REAL:
        print(engine.engine_for(character).notice)
    session = new_session(character, settings.window)
    for offset, instruction in enumerate(instructions):
        seed = None if args.seed is None else args.seed + offset
        session = engine.play(session, instruction, seed=seed)
        print(describe(session.turns[-1], with_note=not casting.states_are_noise), flush=True)
    if args.save:
        print(f"saved game: {save_game(session, args.save)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["convert"]:
        from animegamer.convert.__main__ import main as convert_main

        return convert_main(argv[1:])
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return play(args)
    except (InstructionError, RegistryError, SettingsError, HubError, ConversionError,
            EngineError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
