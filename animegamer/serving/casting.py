"""Which engine plays which character: `GameEngine` over the registry's characters, each cast
to its own weights (on the CPU when small, on a GPU otherwise) or to a stand-in, and
`create_engine`, which works that out before loading anything."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from animegamer.characters.hub import resolve_character
from animegamer.characters.registry import Character, Registry
from animegamer.command.parser import ClosedVocabulary
from animegamer.game.rules import Instruction, Session
from animegamer.serving.clips import ClipStore
from animegamer.serving.devices import CPU_PLACEMENT, Placement, choose_placement
from animegamer.serving.engine import (
    Casting,
    CharacterModels,
    EngineError,
    PreviewCallback,
    ProgressCallback,
    TurnEngine,
    TurnRequest,
)
from animegamer.serving.loading import (
    folder_origin,
    load_character_models,
    shown_path,
    weights_bytes,
)
from animegamer.serving.presets import apply_preset, get_preset
from animegamer.serving.quantization import NO_QUANTIZATION
from animegamer.serving.settings import EngineKind, Settings
from animegamer.serving.stand_ins import (
    create_cpu_engine,
    create_nano_engine,
    create_preview_engine,
)

logger = logging.getLogger(__name__)

CPU_CHARACTERS = 8
"""Small character folders the CPU keeps loaded at once (a tiny trained one is ~30 MB)."""
CPU_WEIGHTS_LIMIT_BYTES = 1 << 30
"""A character folder whose weights take at most this plays on the CPU (AnimeGamer-Nano's and
a character trained with the CPU recipe take ~30 MB; the release's take ~20 GB)."""


class GameEngine:
    """Every character of the registry, each played by the `TurnEngine` its `Casting` names
    (its own weights on a GPU or on the CPU, or a stand-in), all writing to one `ClipStore`.

    It offers `TurnEngine`'s interface for the character a session plays; `kind`, `notice`,
    `num_inference_steps`, `placement` and `representation_dim` are the default character's
    (the first one that can be played).
    """

    def __init__(
        self,
        castings: Sequence[Casting],
        engines: dict[str, TurnEngine],
        clips: ClipStore,
        notice: str = "",
    ) -> None:
        self.castings = {casting.character: casting for casting in castings}
        self.clips = clips
        self.notice = notice
        self._engines = engines

    @property
    def available(self) -> list[str]:
        return [name for name, casting in self.castings.items() if casting.available]

    @property
    def default_character(self) -> str:
        """The first character that can be played (the registry's order)."""
        available = self.available
        if not available:
            raise EngineError("no character can be played here")
        return available[0]

    @property
    def _default(self) -> TurnEngine:
        return self._engines[self.default_character]

    @property
    def kind(self) -> EngineKind:
        return self.casting(self.default_character).kind

    @property
    def num_inference_steps(self) -> int:
        return self._default.num_inference_steps

    @property
    def placement(self) -> Placement:
        return self._default.placement

    @property
    def representation_dim(self) -> int | None:
        return self._default.representation_dim

    @property
    def live_preview(self) -> bool:
        return self._default.live_preview

    def vocabulary_for(self, character: str) -> ClosedVocabulary | None:
        """The closed vocabulary of the models playing `character` (Nano's), or None."""
        casting = self.casting(character)
        return self._engines[character].vocabulary if casting.available else None

    def casting(self, character: str) -> Casting:
        return self.castings.get(character) or Casting(
            character, EngineKind.PREVIEW, unavailable="not a character of this registry"
        )

    def casting_lines(self) -> list[str]:
        """Which weights each character plays: `Tux: runs/tux/character (trained, CPU)`."""
        return [casting.describe() for casting in self.castings.values()]

    def engine_for(self, character: str) -> TurnEngine:
        """The engine playing `character`; `EngineError` with the reason when none can."""
        casting = self.casting(character)
        if not casting.available:
            raise EngineError(f"{character} cannot be played here: {casting.unavailable}")
        return self._engines[character]

    def load(self, character: str) -> CharacterModels:
        return self.engine_for(character).load(character)

    def models_for(self, character: str) -> CharacterModels:
        return self.engine_for(character).models_for(character)

    def play(
        self,
        session: Session,
        instruction: Instruction,
        seed: int | None = None,
        progress: ProgressCallback | None = None,
        num_inference_steps: int | None = None,
        on_preview: PreviewCallback | None = None,
    ) -> Session:
        """`TurnEngine.play` on the engine that plays the session's character."""
        engine = self.engine_for(session.character)
        return engine.play(session, instruction, seed, progress, num_inference_steps, on_preview)

    def play_batch(
        self, requests: Sequence[TurnRequest], num_inference_steps: int | None = None
    ) -> list[Session | Exception]:
        """`TurnEngine.play_batch` on the engine that plays the requests' character (one for
        all: a batch plays one character); each request fails alone when none can."""
        if not requests:
            return []
        try:
            engine = self.engine_for(requests[0].session.character)
        except EngineError as error:
            return [error for _ in requests]
        return engine.play_batch(requests, num_inference_steps)

    def replace(self, casting: Casting, engine: TurnEngine | None = None) -> None:
        """Cast `casting.character` anew (start-up only: a load failed)."""
        self.castings[casting.character] = casting
        if engine is not None:
            self._engines[casting.character] = engine


@dataclass
class CastPlan:
    """What `create_engine` works out for one character before any model is loaded; the
    `Casting` it becomes once the engines exist."""

    name: str
    directory: Path | None = None
    on_cpu: bool = False
    stand_in_note: str = ""
    unavailable: str = ""


def plan_cast(
    name: str,
    settings: Settings,
    resolve_character: Callable[[str], Path],
    local: bool,
    gpu: bool,
) -> CastPlan:
    """Own weights on the CPU (a small folder), on the GPU, a stand-in (`auto` only), or none.

    A folder named in the registry that is missing or damaged makes the character unavailable:
    the Nano world never silently plays in place of a creator's own character.
    """
    if not (gpu or local):
        return CastPlan(name, stand_in_note=f"{name}'s own weights need a GPU")
    try:
        directory = resolve_character(name)
    except Exception as error:
        logger.warning("%s cannot play its own weights: %s", name, error)
        if local or settings.engine == EngineKind.REAL:
            return CastPlan(name, unavailable=str(error))
        return CastPlan(name, stand_in_note=f"{name}'s own weights could not be had: {error}")
    if weights_bytes(directory) <= CPU_WEIGHTS_LIMIT_BYTES:
        return CastPlan(name, directory, on_cpu=True)
    if not gpu:
        return CastPlan(name, stand_in_note=f"{name}'s own weights need a GPU")
    return CastPlan(name, directory)


def _own_weights_engine(
    settings: Settings, directories: dict[str, Path], on_cpu: bool, clips: ClipStore
) -> TurnEngine:
    """The engine playing characters' own weights: small folders on the CPU (all resident),
    the others on the GPU under the speed preset."""
    preset = get_preset(settings.preset)
    if on_cpu:
        placement = dataclasses.replace(CPU_PLACEMENT, resident_characters=CPU_CHARACTERS)
        steps = settings.nano_steps
    else:
        placement = choose_placement(preset.low_vram(settings.low_vram), settings.zero_gpu)
        steps = preset.steps(settings.steps)

    quantization = NO_QUANTIZATION if on_cpu else preset.quantization

    def load(character: str, placement: Placement) -> CharacterModels:
        models = load_character_models(
            directories[character], placement, quantization, settings.live_preview
        )
        if not on_cpu and (preset.changes_models or settings.compile):
            apply_preset(preset, models.decoder, settings.compile)
        return models

    return TurnEngine(
        load,
        kind=EngineKind.REAL,
        placement=placement,
        num_inference_steps=steps,
        guidance_scale=settings.guidance_scale,
        clips=clips,
        load_on_demand=not placement.zero_gpu,
        shared_prefill=not on_cpu and preset.shared_prefill,
        live_preview=settings.live_preview,
    )


def create_engine(
    settings: Settings,
    resolve_character: Callable[[str], Path],
    characters: Sequence[str],
    local_characters: Collection[str] = frozenset(),
) -> GameEngine:
    """Each character played by its own weights where they can play here, by a stand-in
    otherwise (`settings.engine = auto`); `nano` or `preview` force a stand-in for all.

    `local_characters` name the characters whose weights are a local folder: they are checked
    even without a GPU, and one that is small enough plays on the CPU. With a GPU every
    character's checkpoints are resolved now (downloaded and converted once), so no turn waits
    on a download. The first playable character's models are loaded now too; on ZeroGPU every
    GPU character's are. A character that cannot be played stays listed with the reason;
    `EngineError` when none can.
    """
    clips = ClipStore(settings.output_dir)
    if settings.engine in (EngineKind.NANO, EngineKind.PREVIEW):
        create = create_nano_engine if settings.engine == EngineKind.NANO else create_preview_engine
        shared = create(settings, clips=clips)
        castings = [shared.casting(name) for name in characters]
        return GameEngine(castings, dict.fromkeys(characters, shared), clips, shared.notice)
    gpu = torch.cuda.is_available()
    casts = [
        plan_cast(name, settings, resolve_character, name in local_characters,
              gpu or settings.engine == EngineKind.REAL)
        for name in characters
    ]
    engine = _assemble(settings, casts, clips, "" if gpu else "No GPU was found.")
    _load_first_playable(engine, settings)
    if engine.placement.zero_gpu:
        for name in engine.available:
            if not engine.casting(name).on_cpu:
                engine.load(name)
    return engine


def _assemble(
    settings: Settings, casts: Sequence[CastPlan], clips: ClipStore, reason: str
) -> GameEngine:
    """The engines the casts need, each built once, and the `GameEngine` over them."""
    engines: dict[str, TurnEngine] = {}
    castings: list[Casting] = []
    for on_cpu in (True, False):
        own: dict[str, Path] = {}
        for cast in casts:
            if cast.directory is not None and cast.on_cpu == on_cpu:
                own[cast.name] = cast.directory
        if own:
            shared = _own_weights_engine(settings, own, on_cpu, clips)
            engines |= dict.fromkeys(own, shared)
    stand_ins = [c for c in casts if c.stand_in_note]
    stand_in = create_cpu_engine(settings, reason, clips) if stand_ins else None
    for cast in casts:
        if cast.unavailable:
            castings.append(Casting(cast.name, EngineKind.REAL, unavailable=cast.unavailable))
        elif cast.directory is not None:
            castings.append(dataclasses.replace(
                engines[cast.name].casting(cast.name),
                weights=shown_path(cast.directory), origin=folder_origin(cast.directory),
            ))
        else:
            assert stand_in is not None
            engines[cast.name] = stand_in
            castings.append(dataclasses.replace(
                stand_in.casting(cast.name), note=cast.stand_in_note
            ))
    engine = GameEngine(castings, engines, clips)
    engine.notice = _notice(engine, stand_in, reason)
    return engine


def _notice(engine: GameEngine, stand_in: TurnEngine | None, reason: str) -> str:
    """What the banner's details say: why a stand-in plays, then who plays what."""
    lead = stand_in.notice if stand_in is not None else reason
    return " ".join(filter(None, [lead, "Characters: " + "; ".join(engine.casting_lines()) + "."]))


def _load_first_playable(engine: GameEngine, settings: Settings) -> None:
    """Load the default character now, so the first visitor does not wait; one whose models
    fail to load becomes unavailable with the reason, and the next one is tried. `EngineError`,
    naming every character's reason, when none loads."""
    while engine.available:
        name = engine.default_character
        try:
            engine.load(name)
            return
        except Exception as error:
            logger.warning("%s cannot be loaded: %s", name, error)
            engine.replace(dataclasses.replace(engine.casting(name), unavailable=str(error)))
    raise EngineError("no character can be played here: " + "; ".join(engine.casting_lines()))


def create_registry_engine(
    settings: Settings, registry: Registry, characters: Sequence[str] | None = None
) -> GameEngine:
    """`create_engine` with checkpoints resolved from the character registry (app and CLI).

    `characters` (default: all of the registry, the first one loaded first) limits what is
    resolved, e.g. to the one character the CLI plays.
    """

    def resolve(name: str) -> Path:
        return resolve_character(
            registry.get(name), settings.cache_dir, check_resources=settings.resource_checks
        )

    names = characters or registry.names
    local = {name for name in names if _has_local_weights(registry.get(name))}
    return create_engine(settings, resolve, names, local)


def _has_local_weights(character: Character) -> bool:
    return character.converted is not None and character.converted.is_local
