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
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from animegamer.characters.hub import log_stage, resolve_character
from animegamer.characters.registry import Character, Registry
from animegamer.command.parser import ClosedVocabulary
from animegamer.game.rules import (
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
from animegamer.models.cpu_conv import use_onednn_conv3d
from animegamer.models.game_state import GameStateModel
from animegamer.models.latent_preview import ClipPreview, LatentPreview, LatentPreviewCallback
from animegamer.models.tiny_game_state import save_tiny_game_state
from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline
from animegamer.pipelines.animegamer.pipeline_output import AnimeGamerPipelineOutput
from animegamer.pipelines.animegamer.tiny import save_tiny_decoder
from animegamer.serving.clips import ClipStore
from animegamer.serving.devices import CPU_PLACEMENT, Placement, choose_placement
from animegamer.serving.presets import apply_preset, get_preset
from animegamer.serving.quantization import NO_QUANTIZATION, Quantization
from animegamer.serving.settings import EngineKind, Settings

logger = logging.getLogger(__name__)

ProgressCallback = Callable[[float, str], None]
PreviewCallback = Callable[[ClipPreview], None]
PREVIEW_REPRESENTATION_DIM = 64
SHARED_MODELS_CHARACTERS = 1 << 16
"""Characters the stand-in engines (Nano, preview) keep loaded: all (their models are small)."""
CPU_CHARACTERS = 8
"""Small character folders the CPU keeps loaded at once (a tiny trained one is ~30 MB)."""
CPU_WEIGHTS_LIMIT_BYTES = 1 << 30
"""A character folder whose weights take at most this plays on the CPU (AnimeGamer-Nano's and
a character trained with the CPU recipe take ~30 MB; the release's take ~20 GB)."""
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


@dataclass(frozen=True)
class Casting:
    """Which weights play one character here, or why it cannot be played.

    `weights`: the folder (or the world) whose models play it; `origin`: where they come from
    (`trained`, `converted`, `Nano world`, `preview`); `device`: `CPU` or `GPU`; `note`: why
    a stand-in plays instead of the character's own weights; `unavailable`: why it cannot be
    played at all (then nothing else matters).
    """

    character: str
    kind: EngineKind
    weights: str = ""
    origin: str = ""
    device: str = "CPU"
    note: str = ""
    unavailable: str = ""

    @property
    def available(self) -> bool:
        return not self.unavailable

    @property
    def on_cpu(self) -> bool:
        return self.device == "CPU"

    @property
    def states_are_noise(self) -> bool:
        """The preview engine's untrained model never writes readable state tokens; its notice
        says so once, so a turn's message need not repeat it every turn."""
        return self.kind is EngineKind.PREVIEW

    def describe(self) -> str:
        """One line for people: `Tux: runs/tux/character (trained, CPU)`."""
        if self.unavailable:
            return f"{self.character}: unavailable ({self.unavailable})"
        note = f"; {self.note}" if self.note else ""
        return f"{self.character}: {self.weights} ({self.origin}, {self.device}{note})"


class TurnEngine:
    """Plays turns for any number of independent sessions on one set of models.

    The engine holds models, never game state: every call takes the session and returns a new one.
    `kind` says which models these are (`EngineKind`); `notice` says why, for the UI to show;
    `weights` and `origin` describe them for `casting`.
    """

    def __init__(
        self,
        load_models: CharacterModelsLoader,
        *,
        kind: EngineKind,
        placement: Placement,
        num_inference_steps: int,
        guidance_scale: float,
        clips: ClipStore,
        notice: str = "",
        load_on_demand: bool = True,
        shared_prefill: bool = False,
        live_preview: bool = True,
        vocabulary: ClosedVocabulary | None = None,
        weights: str = "",
        origin: str = "",
    ) -> None:
        self.kind = kind
        self.vocabulary = vocabulary
        """The closed vocabulary of a world whose game-state tokenizer knows a fixed set of
        words (Nano): instructions with other words are refused before a turn (see
        `animegamer.command.parser`). None where the models read free text (real, preview)."""
        self.placement = placement
        self.num_inference_steps = num_inference_steps
        self.guidance_scale = guidance_scale
        self.clips = clips
        self.notice = notice
        self.weights = weights
        self.origin = origin
        self.character_weights: dict[str, str] = {}
        """The folder `casting` names for a character whose models have their own (each of
        the Nano world's characters); `weights` for the others."""
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

    def vocabulary_for(self, character: str) -> ClosedVocabulary | None:
        """The closed vocabulary of these models (the same for every character), or None."""
        return self.vocabulary

    def casting(self, character: str) -> Casting:
        """What plays `character` here: this engine's models, for every character."""
        device = "CPU" if self.placement.device == "cpu" else "GPU"
        weights = self.character_weights.get(character) or self.weights or self.kind.value
        return Casting(character, self.kind, weights, self.origin or self.kind.value, device)

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
    `quantization` says (a preset's; `animegamer.serving.quantization`), its VAE from the shared
    folder its manifest names, if it names one (`convert.character.shared_components`), and its
    live-preview map when `live_preview` (`LatentPreview.for_folder`: fitted against the placed
    VAE and saved in the folder when it has none)."""
    from animegamer.characters.conversion.character import shared_components

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


def weights_bytes(directory: Path) -> int:
    """What a character folder's weights take on disk."""
    return sum(path.stat().st_size for path in directory.rglob("*.safetensors"))


def folder_origin(directory: Path) -> str:
    """`trained` for a folder made by `animegamer.train` (its manifest names a dataset),
    `converted` for the release's checkpoints converted."""
    from animegamer.characters.conversion.character import read_manifest

    return "trained" if "dataset" in read_manifest(directory).get("sources", {}) else "converted"


def shown_path(directory: Path) -> str:
    """A folder as people typed it: relative to the working folder when inside it."""
    try:
        return str(directory.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(directory)


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
        settings, notice, clips,
    )
    engine.representation_dim = models.game_state.representation_dim
    engine.weights, engine.origin = "tiny untrained models", EngineKind.PREVIEW.value
    return engine


def nano_character_folders(nano_dir: Path) -> dict[str, Path]:
    """The Nano world's character folders under `nano_dir` (one per character, as the release
    has a model set per character), by the character their manifest names; `EngineError` when
    there is none or one is incomplete."""
    from animegamer.characters.conversion.character import (
        MANIFEST_NAME,
        check_layout,
        read_manifest,
    )
    from animegamer.characters.conversion.errors import ConversionError

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
        load, EngineKind.NANO, settings.nano_steps, settings, notice, clips, closed_vocabulary()
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
        guidance_scale=settings.guidance_scale,
        clips=clips or ClipStore(settings.output_dir),
        notice=notice,
        live_preview=settings.live_preview,
        vocabulary=vocabulary,
    )


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

    def replace(self, casting: Casting, engine: TurnEngine | None = None) -> None:
        """Cast `casting.character` anew (start-up only: a load failed)."""
        self.castings[casting.character] = casting
        if engine is not None:
            self._engines[casting.character] = engine


@dataclass
class _Casting:
    """What `create_engine` works out for one character before any model is loaded."""

    name: str
    directory: Path | None = None
    on_cpu: bool = False
    stand_in_note: str = ""
    unavailable: str = ""


def _cast(
    name: str,
    settings: Settings,
    resolve_character: Callable[[str], Path],
    local: bool,
    gpu: bool,
) -> _Casting:
    """Own weights on the CPU (a small folder), on the GPU, a stand-in (`auto` only), or none.

    A folder named in the registry that is missing or damaged makes the character unavailable:
    the Nano world never silently plays in place of a creator's own character.
    """
    if not (gpu or local):
        return _Casting(name, stand_in_note="its weights need a GPU")
    try:
        directory = resolve_character(name)
    except Exception as error:
        logger.warning("%s cannot play its own weights: %s", name, error)
        if local or settings.engine == EngineKind.REAL:
            return _Casting(name, unavailable=str(error))
        return _Casting(name, stand_in_note=f"its weights could not be had: {error}")
    if weights_bytes(directory) <= CPU_WEIGHTS_LIMIT_BYTES:
        return _Casting(name, directory, on_cpu=True)
    if not gpu:
        return _Casting(name, stand_in_note="its weights need a GPU")
    return _Casting(name, directory)


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
        _cast(name, settings, resolve_character, name in local_characters,
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
    settings: Settings, casts: Sequence[_Casting], clips: ClipStore, reason: str
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
