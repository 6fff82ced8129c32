"""Turns that wait at the same moment, played as one batch (`TurnBatcher`).

Every player's turn is a call of `TurnBatcher.play` from that player's own thread (a Gradio
event's), which blocks until the turn is played. The oldest waiting turn leads: when no batch
is running, it waits up to `max_wait_s` for company, takes up to `max_batch_size` waiting turns
of its character (oldest first) and plays them with one `play_batch` call in its own thread, so
that ZeroGPU bills the batch to a real request. Every turn gets its progress, its previews and
its result back in its own thread, through its ticket's mailbox: a Gradio progress bar reports
to the event of the thread that calls it. A turn still waiting is withdrawn when its event goes
away; a turn already in a running batch is played, and its caller discards the result.

Gradio's own batched events (`batch=True`) were not used: a batched function gets no
`gr.Progress`, cannot stream previews, and fails every request of the batch with one exception
(docs/serving.md).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import queue
import statistics
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from animegamer.game.rules import Session
from animegamer.serving.devices import Placement
from animegamer.serving.engine import TurnRequest
from animegamer.serving.settings import Settings

logger = logging.getLogger(__name__)
BATCH_LOG = "played"
"""How the log line of a batch of several turns starts (`benchmarks/serving.py` reads it)."""
PlayBatch = Callable[[Sequence[TurnRequest]], list[Session | Exception]]
POLL_S = 0.05
"""How often a waiting turn looks whether it leads now, or was withdrawn."""
RECENT_BATCHES = 20
"""Batch times the queue's estimate is the median of."""


@dataclass(frozen=True)
class BatchSettings:
    """At most `max_batch_size` turns in one batch; a turn that could lead one waits at most
    `max_wait_s` for company."""

    max_batch_size: int = 1
    max_wait_s: float = 0.0

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {self.max_batch_size}")
        if not 0.0 <= self.max_wait_s <= 60.0:
            raise ValueError(f"max_wait_s must be in 0..60, got {self.max_wait_s}")


@dataclass(frozen=True)
class QueuePlace:
    """Where a waiting turn stands: `ahead` turns are played or waiting before it, and its
    batch should start in about `eta_s` seconds (None before any batch was timed)."""

    ahead: int
    eta_s: float | None


def batch_settings(settings: Settings, placement: Placement) -> BatchSettings:
    """The batching of an engine placed as `placement`: the settings' size and wait, one turn
    at a time in low-VRAM mode (the weights are streamed to a GPU without room to spare)."""
    size = 1 if placement.offload else settings.max_batch
    return BatchSettings(max_batch_size=size, max_wait_s=settings.batch_wait_s)


class TurnWithdrawn(Exception):
    """The turn's event went away while the turn waited: it was never played."""


class _Ticket:
    """One waiting turn, and the mailbox through which the leader's thread hands it its
    progress, its previews and its outcome (the leader's own turn reports directly)."""

    def __init__(self, request: TurnRequest, arrived: float) -> None:
        self.request = request
        self.character = request.session.character
        self.arrived = arrived
        self.mailbox: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.outcome: Session | Exception | None = None

    def for_batch(self) -> TurnRequest:
        """The request with callbacks that post into the mailbox."""
        preview = self.post_preview if self.request.on_preview is not None else None
        progress = self.post_progress if self.request.progress is not None else None
        return dataclasses.replace(self.request, progress=progress, on_preview=preview)

    def post_progress(self, fraction: float, description: str) -> None:
        self.mailbox.put(("progress", (fraction, description)))

    def post_preview(self, preview: Any) -> None:
        self.mailbox.put(("preview", preview))

    def deliver(self, wait_s: float) -> None:
        """Hand this thread the mail that has come (waiting up to `wait_s` for the first)."""
        try:
            kind, value = self.mailbox.get(timeout=wait_s)
        except queue.Empty:
            return
        while True:
            if kind == "progress" and self.request.progress is not None:
                self.request.progress(*value)
            elif kind == "preview" and self.request.on_preview is not None:
                self.request.on_preview(value)
            elif kind == "done":
                self.outcome = value
            try:
                kind, value = self.mailbox.get_nowait()
            except queue.Empty:
                return


class TurnBatcher:
    """Plays each `play` call's turn in a batch with the turns of the same character that
    wait at the same moment; one batch at a time. `batch_sizes` counts the batches that ran
    by their size."""

    def __init__(
        self,
        play_batch: PlayBatch,
        settings: BatchSettings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.batch_sizes: Counter[int] = Counter()
        self._play_batch = play_batch
        self._clock = clock
        self._lock = threading.Condition()
        self._waiting: list[_Ticket] = []
        self._running: list[_Ticket] = []
        self._batch_started = 0.0
        self._batch_seconds: deque[float] = deque(maxlen=RECENT_BATCHES)

    def play(
        self,
        request: TurnRequest,
        withdrawn: threading.Event | None = None,
        on_queue: Callable[[QueuePlace], None] | None = None,
    ) -> Session:
        """Play `request`'s turn (blocking) and return its new session, or raise what failed
        it; `TurnWithdrawn` when `withdrawn` is set while it waits. `on_queue` is told where
        the turn stands whenever that changes while it waits."""
        ticket = _Ticket(request, self._clock())
        with self._lock:
            self._waiting.append(ticket)
            self._lock.notify_all()
        shown: QueuePlace | None = None
        try:
            while ticket.outcome is None:
                batch, place = self._lead_or_wait(ticket, withdrawn)
                if batch:
                    self._run(batch, ticket)
                elif place is not None and place != shown and on_queue is not None:
                    on_queue(place)
                    shown = place
                ticket.deliver(0.001 if batch else POLL_S)
        finally:
            with self._lock:
                if ticket in self._waiting:
                    self._waiting.remove(ticket)
                    self._lock.notify_all()
        if isinstance(ticket.outcome, Exception):
            raise ticket.outcome
        return ticket.outcome

    def _lead_or_wait(
        self, ticket: _Ticket, withdrawn: threading.Event | None
    ) -> tuple[list[_Ticket], QueuePlace | None]:
        """The batch this turn leads now, or where it stands (None once it is in a batch)."""
        with self._lock:
            if ticket not in self._waiting:
                return [], None
            if withdrawn is not None and withdrawn.is_set():
                self._waiting.remove(ticket)
                ticket.outcome = TurnWithdrawn("the turn was withdrawn before it was played")
                return [], None
            if not self._running and self._waiting[0] is ticket:
                return self._gather(ticket), None
            return [], self._place(ticket)

    def _gather(self, leader: _Ticket) -> list[_Ticket]:
        """(Lock held.) The leader's batch: it waits for company until the batch is full or
        `max_wait_s` after the leader arrived, then takes the batch off the waiting line."""
        deadline = leader.arrived + self.settings.max_wait_s
        while True:
            company = [t for t in self._waiting if t.character == leader.character]
            company = company[: self.settings.max_batch_size]
            left = deadline - self._clock()
            if len(company) == self.settings.max_batch_size or left <= 0:
                break
            self._lock.wait(left)
        for ticket in company:
            self._waiting.remove(ticket)
        self._running = company
        self._batch_started = self._clock()
        return company

    def _place(self, ticket: _Ticket) -> QueuePlace:
        """(Lock held.) The turns before `ticket`, and when its batch should start: what is
        left of the running batch, then one batch time per full batch ahead of it."""
        index = self._waiting.index(ticket)
        ahead = len(self._running) + index
        if not self._batch_seconds:
            return QueuePlace(ahead, None)
        batch_s = statistics.median(self._batch_seconds)
        running_left = 0.0
        if self._running:
            running_left = max(0.0, batch_s - (self._clock() - self._batch_started))
        batches_ahead = math.floor(index / self.settings.max_batch_size)
        # whole seconds: the place is shown again only when it changes
        return QueuePlace(ahead, float(round(running_left + batches_ahead * batch_s)))

    def _run(self, batch: list[_Ticket], leader: _Ticket) -> None:
        """Play the batch in the leader's thread (which reports its own turn's progress as it
        comes) and post every ticket its outcome."""
        started = self._clock()
        outcomes: list[Session | Exception] = []
        requests = [t.request if t is leader else t.for_batch() for t in batch]
        try:
            outcomes = self._play_batch(requests)
        except Exception as error:
            outcomes = [error for _ in batch]
        finally:
            if len(outcomes) != len(batch):  # raised past `Exception`, or a wrong count
                lost = RuntimeError("the batch this turn was in stopped")
                outcomes = [lost for _ in batch]
            for ticket, outcome in zip(batch, outcomes, strict=True):
                ticket.mailbox.put(("done", outcome))
            seconds = self._clock() - started
            with self._lock:
                self._running = []
                self._batch_seconds.append(seconds)
                self.batch_sizes[len(batch)] += 1
                self._lock.notify_all()
            if len(batch) > 1:
                logger.info("%s %d turns of %s in one batch in %.1f s", BATCH_LOG, len(batch),
                            batch[0].character, seconds)
