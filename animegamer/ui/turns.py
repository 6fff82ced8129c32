"""Turns: the GPU function that plays one (and the messages its failures become), and the
actions of a turn: read the command line, play, undo, and a turn abandoned before it landed."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
import spaces
import torch

from animegamer.game.rules import (
    Instruction,
    InstructionError,
    SeedError,
    Session,
    check_room_for_turn,
    parse_seed,
    turn_note,
    undo,
)
from animegamer.serving.batching import BatchSettings, TurnBatcher, TurnWithdrawn
from animegamer.serving.engine import EngineError, TurnRequest
from animegamer.serving.memory import release_free_memory
from animegamer.ui import views
from animegamer.ui.contracts import Engine, PreviewCallback, Progress, TurnRunner, gpu_seconds
from animegamer.ui.messages import DISK_FULL, is_disk_full, user_error
from animegamer.ui.state import Player, Sent, Update
from animegamer.ui.story import eta_seconds, progress_text, queue_text
from animegamer.ui.table import GameTable

logger = logging.getLogger(__name__)
TURN_RUNNING = "Your turn is still being played: its clip appears in a moment."


@contextmanager
def turn_errors(folder: Path | None = None) -> Iterator[None]:
    """Turn failures into `gr.Error`s inside the GPU function, so that the message survives
    ZeroGPU's worker process (which reduces any other exception to a generic one). `folder` is
    where the turn writes its clip (to tell a full disk)."""
    try:
        yield
    except (gr.Error, TurnWithdrawn):
        raise
    except InstructionError as error:
        raise user_error(str(error), "Invalid instruction") from error
    except (torch.OutOfMemoryError, MemoryError) as error:
        raise user_error(
            "The GPU ran out of memory during this turn. Your game is unchanged; please try "
            "again in a moment.",
            "Out of memory",
        ) from error
    except TimeoutError as error:
        raise user_error(
            "The turn ran out of time. Your game is unchanged; please try again.", "Time-out"
        ) from error
    except EngineError as error:
        raise user_error(
            f"The models could not play this turn ({error}). Your game is unchanged.",
            "Turn failed",
        ) from error
    except Exception as error:
        if is_disk_full(error, folder):
            raise user_error(f"{DISK_FULL} Your game is unchanged.", "Disk full") from error
        logger.exception("turn failed")
        raise user_error(
            f"Something went wrong while playing this turn ({type(error).__name__}). Your game "
            "is unchanged; please try again.",
            "Turn failed",
        ) from error


def make_turn_runner(engine: Engine, batching: BatchSettings | None = None) -> TurnRunner:
    """The function that plays a turn: it joins the turns of the same character waiting at
    the same moment (`TurnBatcher`, sized by `batching`; one at a time by default), whose
    batch runs in one GPU call, and returns the new session (CPU data only).

    On ZeroGPU `spaces.GPU` reserves `gpu_seconds` for the batch's size and the engine's step
    count per call; elsewhere it is inert and the batch runs in the leading turn's thread.
    """

    def duration(requests: Sequence[TurnRequest]) -> int:
        return gpu_seconds(engine.num_inference_steps, len(requests))

    def play_batch(requests: Sequence[TurnRequest]) -> list[Session | Exception]:
        return engine.play_batch(requests)

    on_gpu = spaces.GPU(duration=duration)(play_batch)

    def play_where_it_plays(requests: Sequence[TurnRequest]) -> list[Session | Exception]:
        """A character that plays on the CPU takes no ZeroGPU reservation: it would only
        spend the visitors' quota. ZeroGPU's worker process cannot call back into this one:
        the turns' callbacks stay here."""
        if engine.casting(requests[0].session.character).on_cpu:
            return engine.play_batch(requests)
        if engine.placement.zero_gpu:
            requests = [dataclasses.replace(r, progress=None, on_preview=None) for r in requests]
        return on_gpu(requests)

    batcher = TurnBatcher(play_where_it_plays, batching or BatchSettings())

    def run_turn(
        session: Session,
        instruction: Instruction,
        seed: int | None,
        progress: Progress | None = None,
        on_preview: PreviewCallback | None = None,
        withdrawn: threading.Event | None = None,
    ) -> Session:
        def report(fraction: float, description: str) -> None:
            if progress is not None:
                progress(fraction, desc=description)

        request = TurnRequest(session, instruction, seed, report, on_preview)
        with turn_errors(engine.clips.root):
            return batcher.play(request, withdrawn, lambda place: report(0.0, queue_text(place)))

    return run_turn


@dataclass(frozen=True)
class StoryProgress:
    """A `Progress` reporting the turn's stage in the game's words, with the time left."""

    report: Progress
    eta_s: float | None

    def __call__(self, progress: float, desc: str | None = None) -> Any:
        return self.report(progress, desc=progress_text(desc, progress, self.eta_s))


def story_progress(progress: Progress | None, eta_s: float | None) -> Progress | None:
    return None if progress is None else StoryProgress(progress, eta_s)


class TurnActions:
    """A game's turns: read, played (`run_turn`, timed by `clock`), undone, abandoned."""

    def __init__(
        self,
        table: GameTable,
        run_turn: TurnRunner | None = None,
        clock: Callable[[], float] = time.perf_counter,
        batching: BatchSettings | None = None,
    ) -> None:
        self.table = table
        self.run_turn = run_turn or make_turn_runner(table.engine, batching)
        self.clock = clock

    def send(self, player: Player | None, text: str | None, running: bool = False) -> Sent:
        """Read the command line before a turn: the fields to play, the command as it will be
        played (gaps filled), and the story with a pending bubble. Changes no game. An empty
        line while a turn is `running` (the line empties when a turn is sent) is refused
        saying so."""
        player = player or self.table.new_player()
        session = player.session
        if running and not (text or "").strip():
            raise user_error(TURN_RUNNING, "Turn running")
        instruction = self.table.read(session, text)
        try:
            check_room_for_turn(session)
        except InstructionError as error:
            raise user_error(str(error), "Invalid instruction") from error
        eta = eta_seconds([turn.timings.total_s for turn in session.turns])
        chat = views.pending_messages(
            session, self.table.short_name(session.character), instruction, eta
        )
        return Sent(text or "", instruction, chat)

    def play(
        self,
        player: Player | None,
        fields: Mapping[str, str | None],
        text: str | None = "",
        seed: str | float | None = "random",
        progress: Progress | None = None,
    ) -> Update:
        """Play one turn from the free text when it is filled in, else from the five fields
        (the API's form of a turn)."""
        player = player or self.table.new_player()
        instruction = self.table.read(player.session, text, fields)
        return self.play_instruction(player, instruction, seed, progress)

    def play_instruction(
        self,
        player: Player | None,
        instruction: Instruction,
        seed: str | float | None = "random",
        progress: Progress | None = None,
        on_preview: PreviewCallback | None = None,
        withdrawn: threading.Event | None = None,
    ) -> Update:
        """Play one turn of `instruction` (already read); `on_preview` sees the clip forming.
        A turn still waiting for its batch when `withdrawn` is set is never played
        (`TurnWithdrawn`)."""
        player = player or self.table.new_player()
        try:
            check_room_for_turn(player.session)
            seed_value = parse_seed(seed)
        except SeedError as error:
            raise user_error(str(error), "Invalid seed") from error
        except InstructionError as error:
            raise user_error(str(error), "Invalid instruction") from error
        self.table.tidy()
        self.table.disk.make_room(player, "no turn was played")
        started = self.clock()
        eta = eta_seconds([turn.timings.total_s for turn in player.session.turns])
        try:
            session = self.run_turn(
                player.session, instruction, seed_value, story_progress(progress, eta),
                on_preview, withdrawn,
            )
        except (gr.Error, TurnWithdrawn):
            raise
        except Exception as error:  # raised outside the GPU function (e.g. by ZeroGPU itself)
            logger.exception("turn failed outside the engine")
            raise user_error(
                f"The turn could not run ({type(error).__name__}). Your game is unchanged; "
                "please try again.",
                "Turn failed",
            ) from error
        elapsed = self.clock() - started
        release_free_memory()
        player = dataclasses.replace(player, session=session, last_elapsed_s=elapsed)
        turn = session.turns[-1]
        self.table.disk.keep_within_budget(
            player, "this turn was not kept",
            lambda: self.table.files.discard_clip(turn.clip_path or "", grace_s=0),
        )
        noise = self.table.engine.casting(session.character).states_are_noise
        message = " ".join(filter(None, [f"Turn {turn.index} played (seed {turn.seed}).",
                                         "" if noise else turn_note(turn)]))
        return Update(player, self.table.screen(player, message), instruction)

    def undo(self, player: Player | None) -> Update:
        player = player or self.table.new_player()
        self.table.tidy()
        try:
            session = undo(player.session)
        except InstructionError as error:
            raise user_error(str(error), "Nothing to undo") from error
        removed = player.session.turns[-1]
        if removed.clip_path:
            self.table.files.discard_clip(removed.clip_path, self.table.delete_grace_s)
        player = dataclasses.replace(player, session=session)
        return Update(
            player, self.table.screen(player, f"Turn {removed.index} undone."), removed.instruction
        )

    def parse(self, player: Player | None, text: str | None) -> tuple[str, ...]:
        """The five fields a text asks for in the player's game, as `play` would play them."""
        player = player or self.table.new_player()
        return tuple(self.table.read(player.session, text).fields().values())

    def abandon(self, update: Update) -> None:
        """A turn played for an event that went away before showing it (a closed tab, a
        cancelled turn): its clip goes now, and the game stays as it was (the caller keeps the
        old player)."""
        clip = update.player.session.turns[-1].clip_path
        if clip:
            self.table.files.discard_clip(clip, grace_s=0)
