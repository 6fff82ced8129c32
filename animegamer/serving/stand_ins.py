"""The stand-in engines: the Nano world's trained models and the preview engine's tiny random
ones, on the CPU, for characters without playable weights here."""

from __future__ import annotations

import dataclasses
import logging
import tempfile
from pathlib import Path

from animegamer.command.parser import ClosedVocabulary
from animegamer.serving.clips import ClipStore
from animegamer.serving.devices import CPU_PLACEMENT, Placement
from animegamer.serving.engine import (
    CharacterModels,
    CharacterModelsLoader,
    EngineError,
    TurnEngine,
)
from animegamer.serving.loading import (
    build_preview_directory,
    load_character_models,
    nano_character_folders,
    shown_path,
)
from animegamer.serving.settings import EngineKind, Settings

logger = logging.getLogger(__name__)

SHARED_MODELS_CHARACTERS = 1 << 16
"""Characters the stand-in engines (Nano, preview) keep loaded: all (their models are small)."""
NANO_NOTICE = (
    "Playing AnimeGamer-Nano: a small anime world (64×96 clips) whose models this project trained "
    "on a CPU. With a GPU and the released checkpoints, the real AnimeGamer models play instead "
    "(see the README: GPU and Hub token)."
)
PREVIEW_NOTICE = (
    "Preview mode: clips come from a tiny, untrained preview model running on the CPU, so they "
    "are noise, and its state tokens are unreadable, so every turn counts as a neutral one "
    "(social and entertainment only decay). To play with the real AnimeGamer models, run on a "
    "GPU with the checkpoints available (see the README: GPU and Hub token)."
)
def create_preview_engine(
    settings: Settings, notice: str = PREVIEW_NOTICE, clips: ClipStore | None = None
) -> TurnEngine:
    """The real pipeline on tiny random weights, on the CPU, shared by every character."""
    with tempfile.TemporaryDirectory(prefix="animegamer-preview-") as folder:
        models = load_character_models(
            build_preview_directory(Path(folder)), CPU_PLACEMENT,
            live_preview=settings.live_preview,
        )
    engine = _cpu_engine(
        lambda character, placement: models, EngineKind.PREVIEW, settings.preview_steps,
        settings.guidance_scale, settings, notice, clips,
    )
    engine.representation_dim = models.game_state.representation_dim
    engine.weights, engine.origin = "tiny untrained models", EngineKind.PREVIEW.value
    return engine


def create_nano_engine(
    settings: Settings, notice: str = NANO_NOTICE, clips: ClipStore | None = None
) -> TurnEngine:
    """AnimeGamer-Nano's trained models on the CPU: each character plays its own folder under
    `settings.nano_dir` (`nano_character_folders`), all loaded now, with the world's closed
    vocabulary; `EngineError` when they are missing or incomplete."""
    from animegamer.nano.vocabulary import closed_vocabulary

    folders = nano_character_folders(settings.nano_dir)

    def load(character: str, placement: Placement) -> CharacterModels:
        if character not in folders:
            raise EngineError(
                f"the Nano world has no model of {character} (it has {', '.join(folders)})"
            )
        return load_character_models(
            folders[character], placement, live_preview=settings.live_preview
        )

    engine = _cpu_engine(
        load, EngineKind.NANO, settings.nano_steps, settings.nano_guidance, settings, notice, clips,
        closed_vocabulary(),
    )
    for character in folders:
        engine.load(character)
    engine.weights, engine.origin = shown_path(settings.nano_dir), "Nano world"
    engine.character_weights = {name: shown_path(folder) for name, folder in folders.items()}
    return engine


def create_cpu_engine(
    settings: Settings, reason: str = "", clips: ClipStore | None = None
) -> TurnEngine:
    """What stands in for characters without playable weights here: the Nano world, or the
    preview engine when Nano's weights are missing; `reason` opens the notice."""
    lead = f"{reason} " if reason else ""
    try:
        return create_nano_engine(settings, lead + NANO_NOTICE, clips)
    except EngineError as error:
        logger.warning("%s; using the preview engine", error)
        return create_preview_engine(settings, lead + PREVIEW_NOTICE, clips)


def _cpu_engine(
    load: CharacterModelsLoader,
    kind: EngineKind,
    steps: int,
    guidance_scale: float,
    settings: Settings,
    notice: str,
    clips: ClipStore | None,
    vocabulary: ClosedVocabulary | None = None,
) -> TurnEngine:
    return TurnEngine(
        load,
        kind=kind,
        placement=dataclasses.replace(CPU_PLACEMENT, resident_characters=SHARED_MODELS_CHARACTERS),
        num_inference_steps=steps,
        guidance_scale=guidance_scale,
        clips=clips or ClipStore(settings.output_dir),
        notice=notice,
        live_preview=settings.live_preview,
        vocabulary=vocabulary,
    )
