"""What the UI needs of the engine and of Gradio: the engine's protocol, a turn's progress and
live-preview callbacks, the function that plays a turn, and the ZeroGPU time a turn reserves."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from animegamer.command.parser import ClosedVocabulary
from animegamer.game.rules import Instruction, Session
from animegamer.serving.clips import ClipStore
from animegamer.serving.devices import Placement
from animegamer.serving.engine import Casting, TurnRequest

GPU_BASE_SECONDS = 20
GPU_SECONDS_PER_STEP = 1.0
GPU_MAX_SECONDS = 300


class Progress(Protocol):
    """`gr.Progress`: called as `progress(fraction, desc=...)`."""

    def __call__(self, progress: float, desc: str | None = None) -> Any: ...


class ClipPreview(Protocol):
    """What a turn hands to its `on_preview` while the clip denoises (the engine's
    `animegamer.models.latent_preview.ClipPreview`): small uint8 frames [n, h, w, 3] of the
    clip's current estimate (its first, middle and last frame), after `step` of `num_steps`
    denoising steps."""

    @property
    def frames(self) -> np.ndarray: ...

    @property
    def step(self) -> int: ...

    @property
    def num_steps(self) -> int: ...


PreviewCallback = Callable[[ClipPreview], None]


class TurnRunner(Protocol):
    """Plays one turn (with the others waiting at the same moment) and returns the new
    session; a turn still waiting when `withdrawn` is set is not played."""

    def __call__(
        self,
        session: Session,
        instruction: Instruction,
        seed: int | None,
        progress: Progress | None = None,
        on_preview: PreviewCallback | None = None,
        withdrawn: threading.Event | None = None,
    ) -> Session: ...


class Engine(Protocol):
    """What the UI needs of `animegamer.serving.engine.GameEngine` (or of one `TurnEngine`)."""

    @property
    def kind(self) -> str: ...

    def casting(self, character: str) -> Casting: ...

    @property
    def notice(self) -> str: ...
    @property
    def num_inference_steps(self) -> int: ...
    @property
    def clips(self) -> ClipStore: ...
    @property
    def placement(self) -> Placement: ...
    @property
    def representation_dim(self) -> int | None: ...
    @property
    def live_preview(self) -> bool: ...

    def vocabulary_for(self, character: str) -> ClosedVocabulary | None: ...

    def play(
        self,
        session: Session,
        instruction: Instruction,
        seed: int | None = None,
        progress: Callable[[float, str], None] | None = None,
        num_inference_steps: int | None = None,
        on_preview: PreviewCallback | None = None,
    ) -> Session: ...

    def play_batch(
        self, requests: Sequence[TurnRequest], num_inference_steps: int | None = None
    ) -> list[Session | Exception]: ...


def shows_live_preview(engine: Engine) -> bool:
    """Whether the engine's turns report the clip as it forms (`engine.play(...,
    on_preview=...)`), with its live-preview setting on. ZeroGPU plays a turn in another
    process, where a callback into this one cannot reach."""
    return engine.live_preview and not engine.placement.zero_gpu


def gpu_seconds(steps: int, batch_size: int = 1) -> int:
    """ZeroGPU time to reserve for a batch of `batch_size` turns of `steps` diffusion steps:
    the load and decode once, the steps once per turn (a batched step costs about as much as
    its turns' steps one after another when the GPU is full; less when it is not)."""
    seconds = GPU_BASE_SECONDS + GPU_SECONDS_PER_STEP * steps * batch_size
    return int(min(GPU_MAX_SECONDS, seconds))
