"""The turn engine: instruction → game-state model → decoder → clip → a new session.

`TurnEngine.play` never mutates the session it is given: it returns a new one, or raises and
leaves the caller's session exactly as it was, so a failed turn can simply be retried.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import numpy as np
import torch

from animegamer.characters import Registry
from animegamer.clips import ClipStore
from animegamer.devices import CPU_PLACEMENT, Placement, choose_placement
from animegamer.game import (
    MAX_STEPS,
    GameStates,
    Instruction,
    Session,
    Timings,
    check_seed,
    effective_motion_level,
    new_seed,
    record_turn,
)
from animegamer.hub import log_stage, resolve_character
from animegamer.instruction import ClosedVocabulary
from animegamer.models.cpu_conv import use_onednn_conv3d
from animegamer.models.decoder import AnimeGamerPipeline, AnimeGamerPipelineOutput
from animegamer.models.game_state import GameStateModel
from animegamer.models.latent_preview import ClipPreview, LatentPreview, LatentPreviewCallback
from animegamer.models.tiny_decoder import save_tiny_decoder
from animegamer.models.tiny_game_state import save_tiny_game_state
from animegamer.quantization import NO_QUANTIZATION, Quantization
from animegamer.settings import Settings
from animegamer.speed import apply_preset, get_preset

logger = logging.getLogger(__name__)

EngineKind = Literal["real", "nano", "preview"]
ProgressCallback = Callable[[float, str], None]
PreviewCallback = Callable[[ClipPreview], None]
PREVIEW_REPRESENTATION_DIM = 64
CPU_RESIDENT_CHARACTERS = 1 << 16
"""Characters the CPU engines (Nano, preview) keep loaded: all (their models are small)."""
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


class EngineError(RuntimeError):
    """A turn that failed inside the models; the session it was given is unchanged."""


class CharacterModelsLoader(Protocol):
    def __call__(self, character: str, placement: Placement) -> CharacterModels: ...


@dataclass
class CharacterModels:
    """The two networks that play one character, and the decoder's live-preview map (None
    when live previews are off)."""

    game_state: GameStateModel
    decoder: AnimeGamerPipeline
    preview: LatentPreview | None = None


class TurnEngine:
    """Plays turns for any number of independent sessions on one set of models.

    The engine holds models, never game state: every call takes the session and returns a new one.
    `kind` is `"preview"` when the tiny random-weight models stand in for the real ones, and
    `notice` then says why, for the UI to show.
    """

    def __init__(
        self,
        load_models: CharacterModelsLoader,
        *,
        kind: EngineKind,
        placement: Placement,
        num_inference_steps: int,
        guidance_scale: float,
        output_dir: Path,
        notice: str = "",
        load_on_demand: bool = True,
        shared_prefill: bool = False,
        live_preview: bool = True,
        vocabulary: ClosedVocabulary | None = None,
    ) -> None:
        self.kind = kind
        self.vocabulary = vocabulary
        """The closed vocabulary of a world whose game-state tokenizer knows a fixed set of
        words (Nano): instructions with other words are refused before a turn (see
        `animegamer.instruction`). None where the models read free text (real, preview)."""
        self.placement = placement
        self.num_inference_steps = num_inference_steps
        self.guidance_scale = guidance_scale
        self.clips = ClipStore(output_dir)
        self.notice = notice
        self.load_on_demand = load_on_demand
        self.shared_prefill = shared_prefill
        """The speed preset's switch: the game-state model computes the history prefix once
        (`GameStateModel.predict(..., shared_prefill=True)`)."""
        self.live_preview = live_preview
        """Whether `play` hands previews of the clip forming to its `on_preview` callback."""
        self.representation_dim: int | None = None
        """Width of the representations the models exchange (one for every character), known
        once a character is loaded; a saved game of another width cannot continue here."""
        self._load_models = load_models
        self._models: OrderedDict[str, CharacterModels] = OrderedDict()
        self._lock = threading.Lock()

    def load(self, character: str) -> CharacterModels:
        """Load a character's models now (start-up), evicting the least recently used ones
        beyond `placement.resident_characters`."""
        with self._lock:
            return self._load_locked(character)

    def models_for(self, character: str) -> CharacterModels:
        """The character's models; loaded on first use unless `load_on_demand` is off (ZeroGPU:
        a turn runs in a GPU worker whose loads would be lost, so everything loads at start-up)."""
        with self._lock:
            if character in self._models:
                self._models.move_to_end(character)
                return self._models[character]
            if not self.load_on_demand:
                raise EngineError(f"{character} was not loaded when the Space started.")
            return self._load_locked(character)

    def _load_locked(self, character: str) -> CharacterModels:
        if character in self._models:
            return self._models[character]
        while len(self._models) >= self.placement.resident_characters:
            evicted, _ = self._models.popitem(last=False)
            logger.info("unloading %s to make room for %s", evicted, character)
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        with log_stage("load", f"{character} ({self.kind} engine)", logger):
            models = self._load_models(character, self.placement)
        self._models[character] = models
        self.representation_dim = models.game_state.representation_dim
        return models

    def play(
        self,
        session: Session,
        instruction: Instruction,
        seed: int | None = None,
        progress: ProgressCallback | None = None,
        num_inference_steps: int | None = None,
        on_preview: PreviewCallback | None = None,
    ) -> Session:
        """Play one turn and return the new session.

        Args:
            session: the game so far; never modified.
            instruction: a validated instruction (`game.make_instruction`).
            seed: the decoder's noise seed; a fresh random one when `None`.
            progress: called as `progress(fraction, description)` through the turn.
            num_inference_steps: diffusion steps; the engine's setting when `None`.
            on_preview: called while the clip denoises, every few steps (never after the last:
                the clip follows), with a `ClipPreview` of its first, middle and last frame;
                not called when the engine's `live_preview` is off.
        """
        seed = new_seed() if seed is None else check_seed(seed)
        steps = num_inference_steps or self.num_inference_steps
        if not 1 <= steps <= MAX_STEPS:
            raise ValueError(f"num_inference_steps must be in 1..{MAX_STEPS}, got {steps}")
        report = progress or (lambda fraction, description: None)
        models = self.models_for(session.character)
        started = time.perf_counter()

        report(0.0, "Predicting the next game state")
        history = zip(session.history_turns, session.history_representations, strict=True)
        representation, states = models.game_state.predict(
            history, instruction, shared_prefill=self.shared_prefill
        )
        predicted = time.perf_counter()
        preview = None
        if on_preview is not None and self.live_preview and models.preview is not None:
            preview = LatentPreviewCallback(models.preview, on_preview)
        frames = self._render(models.decoder, representation, states, steps, seed, report,
                              preview)
        report(0.97, "Writing the clip")
        path = self.clips.write_clip(frames, session.session_id, len(session.turns) + 1, seed)
        finished = time.perf_counter()
        try:
            return record_turn(
                session,
                instruction=instruction,
                states=states,
                motion_scope_value=models.decoder.motion_scope(effective_motion_level(states.ml)),
                representation=representation[0].float().cpu(),
                seed=seed,
                clip_path=str(path),
                timings=Timings.between(started, predicted, finished),
            )
        except BaseException:
            path.unlink(missing_ok=True)
            raise

    def _render(
        self,
        decoder: AnimeGamerPipeline,
        representation: torch.Tensor,
        states: GameStates,
        steps: int,
        seed: int,
        report: ProgressCallback,
        preview: LatentPreviewCallback | None,
    ) -> np.ndarray:
        """The shot's uint8 frames [F, H, W, 3], reporting each denoising step (and previewing
        the clip when `preview` is given)."""

        def on_step_end(
            pipeline: AnimeGamerPipeline, step: int, timestep: torch.Tensor, tensors: dict
        ) -> dict:
            report(0.1 + 0.8 * (step + 1) / steps, f"Denoising step {step + 1}/{steps}")
            if preview is not None:
                preview(pipeline, step, timestep, tensors)
            if step + 1 == steps:
                report(0.92, "Decoding the video")
            return tensors

        output = decoder(
            representation,
            motion_level=effective_motion_level(states.ml),
            num_inference_steps=steps,
            guidance_scale=self.guidance_scale,
            generator=torch.Generator("cpu").manual_seed(seed),
            callback_on_step_end=on_step_end,
            callback_on_step_end_tensor_inputs=[
                "latents", *(preview.tensor_inputs if preview is not None else [])
            ],
        )
        assert isinstance(output, AnimeGamerPipelineOutput)  # return_dict=True
        (frames,) = output.frames
        return frames


def load_character_models(
    directory: Path,
    placement: Placement,
    quantization: Quantization = NO_QUANTIZATION,
    live_preview: bool = True,
) -> CharacterModels:
    """Load both networks of a character from a project-layout directory, quantized as
    `quantization` says (a preset's; `animegamer.quantization`), its VAE from the shared folder
    its manifest names, if it names one (`convert.character.shared_components`), and its
    live-preview map when `live_preview` (`LatentPreview.for_folder`: fitted against the placed
    VAE and saved in the folder when it has none)."""
    from animegamer.convert.character import shared_components

    game_state = GameStateModel.from_pretrained(
        directory, device=placement.load_device, dtype=placement.game_state_dtype,
        quantization_config=quantization.language_model_config(placement.game_state_dtype),
    )
    # play renders game-state representations: the shot encoder stays on disk
    decoder = AnimeGamerPipeline.from_pretrained(
        directory, dtype=placement.decoder_dtype, shot_encoder=None,
        **shared_components(directory, placement.decoder_dtype),
        quantization_config=quantization.decoder_config(),
    )
    if placement.offload:
        decoder.enable_model_cpu_offload(device=placement.device)
    else:
        decoder.to(placement.storage_device)
    if placement.device == "cpu":
        use_onednn_conv3d(decoder.vae)
    preview = LatentPreview.for_folder(directory, decoder.vae) if live_preview else None
    if preview is not None and placement.offload:
        decoder.maybe_free_model_hooks()  # a fit ran the VAE on the device: offload it again
    if placement.offload:
        game_state.enable_model_cpu_offload(placement.device)
    elif placement.load_device != placement.storage_device:
        # transformers wraps `.to` in a decorator whose stub mypy reads as unbound
        game_state.to(placement.storage_device)  # type: ignore[arg-type]
    return CharacterModels(game_state=game_state, decoder=decoder, preview=preview)


def build_preview_directory(directory: Path, seed: int = 0) -> Path:
    """Write the tiny random-weight models in the project layout (seconds, no download)."""
    save_tiny_game_state(directory, representation_dim=PREVIEW_REPRESENTATION_DIM, seed=seed)
    save_tiny_decoder(directory, representation_dim=PREVIEW_REPRESENTATION_DIM, seed=seed)
    return directory


def create_preview_engine(settings: Settings, notice: str = PREVIEW_NOTICE) -> TurnEngine:
    """The real pipeline on tiny random weights, on the CPU, shared by every character."""
    with tempfile.TemporaryDirectory(prefix="animegamer-preview-") as folder:
        models = load_character_models(
            build_preview_directory(Path(folder)), CPU_PLACEMENT,
            live_preview=settings.live_preview,
        )
    engine = _cpu_engine(
        lambda character, placement: models, "preview", settings.preview_steps, settings, notice
    )
    engine.representation_dim = models.game_state.representation_dim
    return engine


def nano_character_folders(nano_dir: Path) -> dict[str, Path]:
    """The Nano world's character folders under `nano_dir` (one per character, as the release
    has a model set per character), by the character their manifest names; `EngineError` when
    there is none or one is incomplete."""
    from animegamer.convert.character import MANIFEST_NAME, check_layout, read_manifest
    from animegamer.convert.errors import ConversionError

    manifests = sorted(Path(nano_dir).glob(f"*/{MANIFEST_NAME}"))
    if not manifests:
        raise EngineError(f"the Nano world cannot be played: no character folder in {nano_dir}")
    folders: dict[str, Path] = {}
    try:
        for manifest in manifests:
            check_layout(manifest.parent)
            name = str(read_manifest(manifest.parent)["character"])
            if name in folders:
                raise ConversionError(f"{folders[name]} and {manifest.parent} both hold {name}")
            folders[name] = manifest.parent
    except ConversionError as error:
        raise EngineError(f"the Nano world cannot be played: {error}") from None
    return folders


def create_nano_engine(settings: Settings, notice: str = NANO_NOTICE) -> TurnEngine:
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
        load, "nano", settings.nano_steps, settings, notice, closed_vocabulary()
    )
    for character in folders:
        engine.load(character)
    return engine


def create_cpu_engine(settings: Settings, reason: str = "") -> TurnEngine:
    """What plays without the real models: the Nano world, or the preview engine when Nano's
    weights are missing; `reason` (why the real models do not play) opens the notice."""
    lead = f"{reason} " if reason else ""
    try:
        return create_nano_engine(settings, lead + NANO_NOTICE)
    except EngineError as error:
        logger.warning("%s; using the preview engine", error)
        return create_preview_engine(settings, lead + PREVIEW_NOTICE)


def _cpu_engine(
    load: CharacterModelsLoader,
    kind: EngineKind,
    steps: int,
    settings: Settings,
    notice: str,
    vocabulary: ClosedVocabulary | None = None,
) -> TurnEngine:
    return TurnEngine(
        load,
        kind=kind,
        placement=dataclasses.replace(CPU_PLACEMENT, resident_characters=CPU_RESIDENT_CHARACTERS),
        num_inference_steps=steps,
        guidance_scale=settings.guidance_scale,
        output_dir=settings.output_dir,
        notice=notice,
        live_preview=settings.live_preview,
        vocabulary=vocabulary,
    )


def create_engine(
    settings: Settings,
    resolve_character: Callable[[str], Path],
    characters: Sequence[str],
) -> TurnEngine:
    """The real engine when it can run, the Nano world (or the preview engine) otherwise
    (`settings.engine = auto`).

    Every character's checkpoints are resolved now (downloaded and converted once), so no turn
    ever waits on a download. The first character's models are loaded now too, so the first
    visitor does not wait; on ZeroGPU every character's are, as a GPU worker cannot keep a load.
    A character whose checkpoints cannot be had stays listed but refuses turns with the reason.
    """
    if settings.engine == "preview":
        return create_preview_engine(settings)
    if settings.engine == "nano":
        return create_nano_engine(settings)
    if settings.engine == "auto" and not torch.cuda.is_available():
        return create_cpu_engine(settings, "No GPU was found.")
    preset = get_preset(settings.preset)
    placement = choose_placement(preset.low_vram(settings.low_vram), settings.zero_gpu)
    default, *others = characters
    try:
        directories = {default: resolve_character(default)}
    except Exception as error:
        return _preview_instead(settings, error)
    unavailable: dict[str, str] = {}
    for name in others:
        try:
            directories[name] = resolve_character(name)
        except Exception as error:
            logger.warning("%s cannot be played: %s", name, error)
            unavailable[name] = str(error)

    def load(character: str, placement: Placement) -> CharacterModels:
        if character in unavailable:
            raise EngineError(f"{character} cannot be played here: {unavailable[character]}")
        models = load_character_models(
            directories[character], placement, preset.quantization, settings.live_preview
        )
        if preset.changes_models or settings.compile:
            apply_preset(preset, models.decoder, settings.compile)
        return models

    engine = TurnEngine(
        load,
        kind="real",
        placement=placement,
        num_inference_steps=preset.steps(settings.steps),
        guidance_scale=settings.guidance_scale,
        output_dir=settings.output_dir,
        load_on_demand=not placement.zero_gpu,
        shared_prefill=preset.shared_prefill,
        live_preview=settings.live_preview,
    )
    try:
        engine.load(default)
    except Exception as error:
        return _preview_instead(settings, error)
    if placement.zero_gpu:
        for name in others:
            if name not in unavailable:
                engine.load(name)
    return engine


def _preview_instead(settings: Settings, error: Exception) -> TurnEngine:
    """`auto` falls back to the CPU engines, saying why; `real` fails loudly."""
    if settings.engine == "real":
        raise error
    logger.warning("real engine unavailable, playing on the CPU: %s", error)
    return create_cpu_engine(settings, f"The real models could not be loaded ({error}).")


def create_registry_engine(
    settings: Settings, registry: Registry, characters: Sequence[str] | None = None
) -> TurnEngine:
    """`create_engine` with checkpoints resolved from the character registry (app and CLI).

    `characters` (default: all of the registry, the first one loaded first) limits what is
    resolved, e.g. to the one character the CLI plays.
    """

    def resolve(name: str) -> Path:
        return resolve_character(
            registry.get(name), settings.cache_dir, check_resources=settings.resource_checks
        )

    return create_engine(settings, resolve, characters or registry.names)
