"""Instructions in, turns and clips out: the game as a function.

    from animegamer.play import PlayOptions, play

    result = play(PlayOptions(["quickly run, day town", "fly on broomstick"], out=Path("clips")))
    result.session.turns[-1].clip_path  # `say` (default: print) tells each turn as it is played

Every instruction is read first, as the game's command line reads them (each fills its gaps
from the one before): one refused text plays none. The clips land in `out` itself, one
`turn_0001_<seed>.mp4` per turn (the engine writes each game's clips into a folder of its own,
named after the game; they are moved out of it as they are made).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from animegamer.characters.registry import Registry, load_registry
from animegamer.command.parser import ClosedVocabulary, game_context, read_instruction
from animegamer.game.rules import (
    Instruction,
    InstructionError,
    Session,
    Turn,
    new_session,
    turn_note,
)
from animegamer.game.savefile import save_game
from animegamer.serving.settings import EngineKind, Settings


@dataclass(frozen=True)
class PlayOptions:
    """What to play; every None takes the `Settings` value (the environment's, else the
    default)."""

    instructions: Sequence[str]
    out: Path
    """The folder of the clips (`turn_0001_<seed>.mp4`, …), written into directly."""
    character: str | None = None
    """A registry character (default: the registry's first)."""
    save: Path | None = None
    """Also write the saved game here."""
    engine: EngineKind | None = None
    seed: int | None = None
    """The first turn's seed, then +1 per turn (None: random)."""
    window: int | None = None
    steps: int | None = None
    progress_bars: bool = False
    """The decoder's diffusion-step bar on stderr."""


@dataclass(frozen=True)
class PlayResult:
    character: str
    casting: str
    """Which engine plays the character, in one line (`Casting.describe`)."""
    notice: str | None
    """What a stand-in engine says about itself (None for the character's real models)."""
    session: Session
    """The game after the last turn; `session.turns` holds each turn's clip."""
    saved: Path | None
    states_are_noise: bool
    """Whether the engine's state predictions are noise (its notice says so)."""


def settings_for(options: PlayOptions) -> Settings:
    """The environment's settings with the options' overrides (`SettingsError` when invalid)."""
    overrides: dict[str, Any] = {
        "engine": options.engine, "window": options.window, "output_dir": options.out,
        "steps": options.steps, "nano_steps": options.steps, "preview_steps": options.steps,
    }
    settings = dataclasses.replace(
        Settings.from_env(), **{key: value for key, value in overrides.items() if value is not None}
    )
    settings.validate()
    return settings


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


def moved_into(session: Session, out: Path) -> Session:
    """`session` with its last turn's clip moved from the engine's folder for the game into
    `out`, as `turn_<index>_<seed>.mp4` (an older file of that name is replaced)."""
    turn = session.turns[-1]
    clip = Path(turn.clip_path)
    target = out / f"turn_{turn.index:04d}_{turn.seed}{clip.suffix}"
    clip.replace(target)
    if not any(clip.parent.iterdir()):
        clip.parent.rmdir()
    moved = dataclasses.replace(turn, clip_path=str(target))
    return dataclasses.replace(session, turns=(*session.turns[:-1], moved))


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


def play(options: PlayOptions, say: Callable[[str], None] = print) -> PlayResult:
    """Play `options.instructions` as turns, telling `say` who plays and each turn. Raises
    `InstructionError`, `RegistryError`, `SettingsError`, `HubError`, `ConversionError` or
    `EngineError`, each with a one-line message; a refused instruction plays no turn."""
    from animegamer.serving.casting import create_registry_engine

    settings = settings_for(options)
    registry = load_registry(settings.registry_path)
    character = registry.get(options.character or registry.characters[0].name).name
    engine = create_registry_engine(settings, registry, [character])
    instructions = read_all(
        options.instructions, registry, character, engine.vocabulary_for(character)
    )
    if not options.progress_bars:
        engine.models_for(character).decoder.set_progress_bar_config(disable=True)
    casting = engine.casting(character)
    notice = None if casting.kind == EngineKind.REAL else engine.engine_for(character).notice
    say(casting.describe())
    if notice is not None:
        say(notice)
    session = new_session(character, settings.window)
    for offset, instruction in enumerate(instructions):
        seed = None if options.seed is None else options.seed + offset
        session = moved_into(engine.play(session, instruction, seed=seed), settings.output_dir)
        say(describe(session.turns[-1], with_note=not casting.states_are_noise))
    saved = save_game(session, options.save) if options.save else None
    return PlayResult(character, casting.describe(), notice, session, saved,
                      casting.states_are_noise)
