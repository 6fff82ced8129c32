"""The turn engine: instruction → game-state model → decoder → clip → a new session.

`TurnEngine.play` never mutates the session it is given: it returns a new one, or raises and
leaves the caller's session exactly as it was, so a failed turn can simply be retried.
"""

from __future__ import annotations

import logging
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import torch

from animegamer.characters import Registry
from animegamer.devices import CPU_PLACEMENT, Placement, choose_placement
from animegamer.game import (
    Instruction,
    Session,
    Timings,
    effective_motion_level,
    record_turn,
)
from animegamer.hub import log_stage, resolve_character
from animegamer.models.decoder import AnimeGamerDecoder, decode_latents, motion_scope
from animegamer.models.game_state import GameStateModel
from animegamer.models.tiny_decoder import save_tiny_decoder
from animegamer.models.tiny_game_state import save_tiny_game_state
from animegamer.settings import Settings
from animegamer.tokens import HistoryTurn, build_prompt
from animegamer.video import write_mp4

logger = logging.getLogger(__name__)

EngineKind = Literal["real", "preview"]
ProgressCallback = Callable[[float, str], None]
PREVIEW_REPRESENTATION_DIM = 64
MAX_STEPS = 200
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
    """The two networks that play one character."""

    game_state: GameStateModel
    decoder: AnimeGamerDecoder


def _new_seed() -> int:
    return secrets.randbits(31)


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
    ) -> None:
        self.kind = kind
        self.placement = placement
        self.num_inference_steps = num_inference_steps
        self.guidance_scale = guidance_scale
        self.output_dir = Path(output_dir)
        self.notice = notice
        self._load_models = load_models
        self._models: dict[str, CharacterModels] = {}
        self._lock = threading.Lock()

    def models_for(self, character: str) -> CharacterModels:
        """The character's models, loaded on first use (at start-up for the default one).

        In low-VRAM mode only one character stays loaded, to bound CPU memory too.
        """
        with self._lock:
            if character not in self._models:
                if self.placement.offload:
                    self._models.clear()
                with log_stage("load", f"{character} ({self.kind} engine)", logger):
                    self._models[character] = self._load_models(character, self.placement)
            return self._models[character]

    def clip_path(self, session: Session, turn_index: int, seed: int) -> Path:
        folder = self.output_dir / session.session_id
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"turn_{turn_index:04d}_{seed}_{secrets.token_hex(3)}.mp4"

    def play(
        self,
        session: Session,
        instruction: Instruction,
        seed: int | None = None,
        progress: ProgressCallback | None = None,
        num_inference_steps: int | None = None,
    ) -> Session:
        """Play one turn and return the new session.

        Args:
            session: the game so far; never modified.
            instruction: a validated instruction (`game.make_instruction`).
            seed: the decoder's noise seed; a fresh random one when `None`.
            progress: called as `progress(fraction, description)` through the turn.
            num_inference_steps: diffusion steps; the engine's setting when `None`.
        """
        seed = _new_seed() if seed is None else seed
        if not 0 <= seed < 2**63:
            raise ValueError(f"seed must be in 0..2**63-1, got {seed}")
        steps = num_inference_steps or self.num_inference_steps
        if not 1 <= steps <= MAX_STEPS:
            raise ValueError(f"num_inference_steps must be in 1..{MAX_STEPS}, got {steps}")
        report = progress or (lambda fraction, description: None)
        models = self.models_for(session.character)
        started = time.perf_counter()

        report(0.0, "Predicting the next game state")
        history = [
            HistoryTurn(instruction=turn.instruction.text, states=turn.states)
            for turn in session.history_turns
        ]
        history_representations = list(session.history_representations)
        prompt = build_prompt(models.game_state.tokenizer, history, instruction.text)
        with self._on_device(models.game_state):
            representation = models.game_state.represent(prompt.input_ids, history_representations)
            states = models.game_state.predict_states(prompt.input_ids, history_representations)
        predicted = time.perf_counter()

        motion_level = effective_motion_level(states.ml)
        scope = motion_scope(models.decoder.transformer, motion_level)

        def on_step(step: int, total: int) -> None:
            report(0.1 + 0.8 * step / total, f"Denoising step {step}/{total}")

        generator = torch.Generator("cpu").manual_seed(seed)
        with self._on_device(models.decoder):
            latents = models.decoder.sample(
                representation,
                motion_level=motion_level,
                num_inference_steps=steps,
                guidance_scale=self.guidance_scale,
                generator=generator,
                callback=on_step,
            )
            report(0.92, "Decoding the video")
            frames = decode_latents(models.decoder.vae, latents)
        report(0.97, "Writing the clip")
        path = self.clip_path(session, len(session.turns) + 1, seed)
        try:
            write_mp4(frames, path)
            finished = time.perf_counter()
            return record_turn(
                session,
                instruction=instruction,
                states=states,
                motion_scope_value=scope,
                representation=representation[0].float().cpu(),
                seed=seed,
                clip_path=str(path),
                timings=Timings(
                    predict_s=predicted - started,
                    decode_s=finished - predicted,
                    total_s=finished - started,
                ),
            )
        except BaseException:
            path.unlink(missing_ok=True)
            raise

    @contextmanager
    def _on_device(self, model: GameStateModel | AnimeGamerDecoder) -> Iterator[None]:
        """In low-VRAM mode, move a model to the GPU only while it runs."""
        if not self.placement.offload:
            yield
            return
        model.to(self.placement.device)
        try:
            yield
        finally:
            model.to("cpu")
            torch.cuda.empty_cache()


def load_character_models(directory: Path, placement: Placement) -> CharacterModels:
    """Load both networks of a character from a project-layout directory."""
    game_state = GameStateModel.from_pretrained(
        directory, device=placement.load_device, dtype=placement.game_state_dtype
    )
    decoder = AnimeGamerDecoder.from_pretrained(
        directory, device=placement.load_device, dtype=placement.decoder_dtype
    )
    if placement.load_device != placement.storage_device:
        game_state.to(placement.storage_device)
        decoder.to(placement.storage_device)
    return CharacterModels(game_state=game_state, decoder=decoder)


def build_preview_directory(directory: Path, seed: int = 0) -> Path:
    """Write the tiny random-weight models in the project layout (seconds, no download)."""
    save_tiny_game_state(directory, representation_dim=PREVIEW_REPRESENTATION_DIM, seed=seed)
    save_tiny_decoder(directory, representation_dim=PREVIEW_REPRESENTATION_DIM, seed=seed)
    return directory


def create_preview_engine(settings: Settings, notice: str = PREVIEW_NOTICE) -> TurnEngine:
    """The real pipeline on tiny random weights, on the CPU, shared by every character."""
    directory = build_preview_directory(Path(tempfile.mkdtemp(prefix="animegamer-preview-")))
    models = load_character_models(directory, CPU_PLACEMENT)
    return TurnEngine(
        lambda character, placement: models,
        kind="preview",
        placement=CPU_PLACEMENT,
        num_inference_steps=settings.preview_steps,
        guidance_scale=settings.guidance_scale,
        output_dir=settings.output_dir,
        notice=notice,
    )


def create_engine(
    settings: Settings,
    resolve_character: Callable[[str], Path],
    default_character: str,
) -> TurnEngine:
    """The real engine when it can run, the preview engine otherwise (`settings.engine = auto`).

    `resolve_character` turns a character name into a ready project-layout directory
    (downloading and converting on first use). The default character is loaded now, so the first
    visitor does not wait, and so that ZeroGPU sees the weights at start-up.
    """
    if settings.engine == "preview":
        return create_preview_engine(settings)
    if settings.engine == "auto" and not torch.cuda.is_available():
        return create_preview_engine(settings, f"No GPU was found. {PREVIEW_NOTICE}")
    placement = choose_placement(settings.low_vram)

    def load(character: str, placement: Placement) -> CharacterModels:
        return load_character_models(resolve_character(character), placement)

    engine = TurnEngine(
        load,
        kind="real",
        placement=placement,
        num_inference_steps=settings.steps,
        guidance_scale=settings.guidance_scale,
        output_dir=settings.output_dir,
    )
    try:
        engine.models_for(default_character)
    except Exception as error:
        if settings.engine == "real":
            raise
        logger.warning("real engine unavailable, using the preview engine: %s", error)
        return create_preview_engine(
            settings, f"The real models could not be loaded ({error}). {PREVIEW_NOTICE}"
        )
    return engine


def create_registry_engine(settings: Settings, registry: Registry) -> TurnEngine:
    """`create_engine` with checkpoints resolved from the character registry (app and CLI)."""

    def resolve(name: str) -> Path:
        return resolve_character(registry.get(name))

    return create_engine(settings, resolve, registry.characters[0].name)
