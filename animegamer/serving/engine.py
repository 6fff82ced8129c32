"""The turn engine: instruction → game-state model → decoder → clip → a new session.

`TurnEngine.play` never mutates the session it is given: it returns a new one, or raises and
leaves the caller's session exactly as it was, so a failed turn can simply be retried. `Casting`
is what an engine says of a character it plays. Loading a character's models is
`animegamer.serving.loading`; the stand-in engines are `animegamer.serving.stand_ins`; which
engine plays which character, `animegamer.serving.casting`.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from animegamer.characters.hub import log_stage
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
from animegamer.models.game_state import GameStateModel
from animegamer.models.latent_preview import ClipPreview, LatentPreview, LatentPreviewCallback
from animegamer.models.scene_latent import SceneSource
from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline
from animegamer.pipelines.animegamer.pipeline_output import AnimeGamerPipelineOutput
from animegamer.serving.clips import ClipStore
from animegamer.serving.devices import Placement
from animegamer.serving.settings import EngineKind

logger = logging.getLogger(__name__)

ProgressCallback = Callable[[float, str], None]
PreviewCallback = Callable[[ClipPreview], None]


class EngineError(RuntimeError):
    """A turn that failed inside the models; the session it was given is unchanged."""


class CharacterModelsLoader(Protocol):
    def __call__(self, character: str, placement: Placement) -> CharacterModels: ...


@dataclass
class CharacterModels:
    """The two networks that play one character, the decoder's live-preview map (None when
    live previews are off), the world's scenes for a decoder that draws on them (None for
    one that does not), and the guidance its folder says the decoder plays at (None: the
    engine's)."""

    game_state: GameStateModel
    decoder: AnimeGamerPipeline
    preview: LatentPreview | None = None
    scenes: SceneSource | None = None
    guidance_scale: float | None = None


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


@dataclass(frozen=True)
class TurnRequest:
    """One player's turn, as `TurnEngine.play_batch` takes it: the game so far (never
    modified), the validated instruction, the noise seed (fresh when None), and the callbacks
    that see this turn's progress and its clip forming (`TurnEngine.play`'s arguments)."""

    session: Session
    instruction: Instruction
    seed: int | None = None
    progress: ProgressCallback | None = None
    on_preview: PreviewCallback | None = None

    def report(self, fraction: float, description: str) -> None:
        if self.progress is not None:
            self.progress(fraction, description)


@dataclass(frozen=True)
class _PlannedTurn:
    """A turn whose game state is predicted, waiting for its clip."""

    request: TurnRequest
    seed: int
    representation: torch.Tensor
    states: GameStates
    started: float
    predicted: float


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
        request = TurnRequest(session, instruction, seed, progress, on_preview)
        (outcome,) = self.play_batch([request], num_inference_steps)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def play_batch(
        self, requests: Sequence[TurnRequest], num_inference_steps: int | None = None
    ) -> list[Session | Exception]:
        """Play one turn for each request (all of one character), their clips rendered as one
        decoder batch, and return each request's new session or the error that failed it.

        Each turn predicts its game state alone, draws its noise from its own seed and keeps
        its own motion scope, so a request gets the same clip alone or in any batch. A request
        that fails (its seed, its prediction, its clip) fails alone; when the batched render
        fails, each shot is rendered again on its own, so only the one at fault fails.
        """
        steps = num_inference_steps or self.num_inference_steps
        if not 1 <= steps <= MAX_STEPS:
            raise ValueError(f"num_inference_steps must be in 1..{MAX_STEPS}, got {steps}")
        characters = {request.session.character for request in requests}
        if len(characters) > 1:
            raise ValueError(f"a batch plays one character, got {sorted(characters)}")
        if not requests:
            return []
        try:
            models = self.models_for(requests[0].session.character)
        except Exception as error:
            return [error for _ in requests]
        outcomes: list[_PlannedTurn | Session | Exception] = [
            self._predict(models, request) for request in requests
        ]
        planned = [outcome for outcome in outcomes if isinstance(outcome, _PlannedTurn)]
        clips = iter(self._render_all(models, planned, steps))  # in the order of `planned`
        return [
            self._land(models, outcome, next(clips))
            if isinstance(outcome, _PlannedTurn) else outcome
            for outcome in outcomes
        ]

    def _predict(self, models: CharacterModels, request: TurnRequest) -> _PlannedTurn | Exception:
        """The request's seed and game state, ready for its clip (or the error)."""
        try:
            seed = new_seed() if request.seed is None else check_seed(request.seed)
            started = time.perf_counter()
            request.report(0.0, "Predicting the next game state")
            session = request.session
            history = zip(session.history_turns, session.history_representations, strict=True)
            representation, states = models.game_state.predict(
                history, request.instruction, shared_prefill=self.shared_prefill
            )
        except Exception as error:
            return error
        return _PlannedTurn(request, seed, representation, states, started,
                            time.perf_counter())

    def _render_all(
        self, models: CharacterModels, planned: Sequence[_PlannedTurn], steps: int
    ) -> list[np.ndarray | Exception]:
        """Every planned turn's frames, rendered together; one at a time when that fails."""
        if not planned:
            return []
        try:
            return list(self._render(models, planned, steps))
        except Exception as error:
            if len(planned) == 1:
                return [error]
            logger.warning("a batch of %d clips failed (%s); rendering each alone",
                           len(planned), error)
        return [self._render_one(models, turn, steps) for turn in planned]

    def _render_one(
        self, models: CharacterModels, turn: _PlannedTurn, steps: int
    ) -> np.ndarray | Exception:
        try:
            (frames,) = self._render(models, [turn], steps)
        except Exception as error:
            return error
        return frames

    def _land(
        self, models: CharacterModels, turn: _PlannedTurn, frames: np.ndarray | Exception
    ) -> Session | Exception:
        """The turn's clip written and the turn recorded in a new session (or the error)."""
        if isinstance(frames, Exception):
            return frames
        request, session = turn.request, turn.request.session
        path = None
        try:
            request.report(0.97, "Writing the clip")
            path = self.clips.write_clip(frames, session.session_id, len(session.turns) + 1,
                                         turn.seed)
            return record_turn(
                session,
                instruction=request.instruction,
                states=turn.states,
                motion_scope_value=models.decoder.motion_scope(
                    effective_motion_level(turn.states.ml)
                ),
                representation=turn.representation[0].float().cpu(),
                seed=turn.seed,
                clip_path=str(path),
                timings=Timings.between(turn.started, turn.predicted, time.perf_counter()),
            )
        except Exception as error:
            if path is not None:
                path.unlink(missing_ok=True)
            return error

    def _render(
        self, models: CharacterModels, turns: Sequence[_PlannedTurn], steps: int
    ) -> np.ndarray:
        """The shots' uint8 frames [B, F, H, W, 3], reporting each denoising step to every
        turn (and previewing each turn's clip that asked for it)."""
        previews = []
        if self.live_preview and models.preview is not None:
            previews = [
                LatentPreviewCallback(models.preview, turn.request.on_preview, shot)
                for shot, turn in enumerate(turns) if turn.request.on_preview is not None
            ]

        def report(fraction: float, description: str) -> None:
            for turn in turns:
                turn.request.report(fraction, description)

        def on_step_end(
            pipeline: AnimeGamerPipeline, step: int, timestep: torch.Tensor, tensors: dict
        ) -> dict:
            report(0.1 + 0.8 * (step + 1) / steps, f"Denoising step {step + 1}/{steps}")
            for preview in previews:
                preview(pipeline, step, timestep, tensors)
            if step + 1 == steps:
                report(0.92, "Decoding the video")
            return tensors

        levels = [effective_motion_level(turn.states.ml) for turn in turns]
        scenes = models.scenes
        output = models.decoder(
            [turn.representation for turn in turns],
            motion_level=levels,
            num_inference_steps=steps,
            guidance_scale=(self.guidance_scale if models.guidance_scale is None
                            else models.guidance_scale),
            generator=[torch.Generator("cpu").manual_seed(turn.seed) for turn in turns],
            callback_on_step_end=on_step_end,
            callback_on_step_end_tensor_inputs=[
                "latents", *(["pred_original_sample"] if previews else [])
            ],
            scene=None if scenes is None else [
                scenes(turn.request.instruction.time, turn.request.instruction.place)
                for turn in turns
            ],
        )
        assert isinstance(output, AnimeGamerPipelineOutput)  # return_dict=True
        assert isinstance(output.frames, np.ndarray)  # output_type="np"
        return output.frames
