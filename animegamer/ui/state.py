"""What one browser session holds: its `Player` (the game, and the game to go back to), the
`GameSlot` that plays its actions one at a time, and what an action returns (`Update`, `Sent`,
the `Screen`)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from animegamer.game.rules import Instruction, Session
from animegamer.serving.clips import ClipStore
from animegamer.ui.contracts import GPU_MAX_SECONDS
from animegamer.ui.messages import user_error

SESSION_TTL_S = 3 * 3600
"""A browser session's game is forgotten after this long without an action."""
SESSION_FILES_MAX_AGE_S = SESSION_TTL_S + 3600
"""Files untouched this long belong to no live game (Gradio keeps a closed tab's state 1 h)."""
ACTION_WAIT_S = GPU_MAX_SECONDS + 60
"""How long an action waits for the same game's running action (at most a whole turn)."""


@dataclass(frozen=True, eq=False)
class Player:
    """One browser session: its game, and the folder holding its saves and exports.

    `previous_game` is the game a restart, a character switch or a load replaced, kept (with its
    clips) so that one step back is possible; the next replacement discards it.
    """

    session: Session
    player_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    last_elapsed_s: float | None = None
    previous_game: Session | None = None


class Screen(NamedTuple):
    """Every output that shows the game, in the order of the layout's `screen` components."""

    summary: dict[str, Any]
    chat: list[dict[str, Any]]
    clip: str | None
    gallery: list[tuple[str, str]]
    gauges: str
    history: pd.DataFrame
    status: str


@dataclass(frozen=True)
class Update:
    """The result of an action: the new player state, the screen, and (when the action sets
    one) the instruction to offer next: the one played, undone or last played in a game that
    returns, or the character's default."""

    player: Player
    screen: Screen
    instruction: Instruction | None = None
    toast: str | None = None

    @property
    def fields(self) -> tuple[str, ...] | None:
        """The instruction's five fields in `INSTRUCTION_FIELDS` order (as the API returns)."""
        return None if self.instruction is None else instruction_values(self.instruction)


@dataclass(frozen=True)
class Sent:
    """A command read and about to be played: what the player typed, the instruction it asks
    for, and the story with the pending bubble."""

    text: str
    instruction: Instruction
    chat: list[dict[str, Any]]

    @property
    def fields(self) -> tuple[str, ...]:
        return instruction_values(self.instruction)


def instruction_values(instruction: Instruction) -> tuple[str, ...]:
    return tuple(instruction.fields().values())


class GameSlot:
    """What one browser session's `gr.State` holds: its current `Player`, and the lock that plays
    that game's actions one at a time.

    Gradio hands every event of a session the same state object, so an undo that arrives while a
    turn is running waits for the turn and then undoes it, instead of racing it (last writer
    wins, clips deleted under a turn about to land). The slot holds no engine and no model: Gradio
    copies what its components hold on every page load.

    A slot `kept` by the `GameShelf` (a browser's game, found again after a reload) outlives its
    Gradio session: the shelf, not Gradio's delete callback, ends its files (`forget`).
    """

    def __init__(
        self,
        root: str | Path,
        player: Player | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.root = Path(root)
        self.player = player
        self.kept = False
        self.clock = clock
        self.last_used = clock()
        self._turn_sent_at: float | None = None
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict[int, Any]) -> GameSlot:
        """A slot of its own with the same (immutable) player: what Gradio makes of the initial
        value for each new browser session."""
        return GameSlot(self.root, self.player, self.clock)

    @property
    def idle_s(self) -> float:
        """Seconds since the game's last action ended (or the slot was made); 0 while one runs."""
        return 0.0 if self.busy else self.clock() - self.last_used

    @property
    def busy(self) -> bool:
        """Whether an action (a turn, most often) is running on this game now."""
        return self._lock.locked()

    def turn_sent(self, sent: bool = True) -> None:
        """A turn was read and is on its way to the GPU queue (or, `sent=False`, is over)."""
        self._turn_sent_at = self.clock() if sent else None

    @property
    def turn_running(self) -> bool:
        """Whether a turn of this game is running or waiting in the queue (for at most
        `ACTION_WAIT_S`: a turn whose event never started is not waited for forever)."""
        sent = self._turn_sent_at
        return self.busy or (sent is not None and self.clock() - sent < ACTION_WAIT_S)

    @contextmanager
    def _turn(self, wait_s: float) -> Iterator[None]:
        if not self._lock.acquire(timeout=wait_s):
            raise user_error(
                "This game is still busy with an earlier action; please try again in a moment.",
                "Busy",
            )
        try:
            yield
        finally:
            self.last_used = self.clock()
            self._lock.release()

    def run(
        self, action: Callable[[Player | None], Update], wait_s: float = ACTION_WAIT_S
    ) -> Update:
        """Run `action` on the current player once the game's previous action has finished, and
        keep the player it returns. An action that raises leaves the player as it was."""
        with self._turn(wait_s):
            update = action(self.player)
            self.player = update.player
            return update

    def read(self, action: Callable[[Player | None], Any], wait_s: float = ACTION_WAIT_S) -> Any:
        """Run `action` (save, export) on the player between the game's other actions."""
        with self._turn(wait_s):
            return action(self.player)


    def forget(self) -> bool:
        """End the game unless an action is running on it: its files go, and the slot holds
        no game (a tab still showing it starts a new one). False when it was busy."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            player, self.player = self.player, None
            if player is not None:
                ClipStore(self.root).end_player(
                    player.player_id, (player.session, player.previous_game)
                )
            return True
        finally:
            self._lock.release()


def discard_game_files(slot: GameSlot | None) -> None:
    """Delete an ended browser session's files: Gradio's delete callback of the game state.
    A game the shelf keeps for a reload stays (the shelf forgets it when it has been idle).

    A plain function on purpose: Gradio deep-copies its components' settings on every page load,
    and a bound method would drag the UI, the engine and the models into that copy.
    """
    if slot is None or slot.kept:
        return
    slot.forget()
