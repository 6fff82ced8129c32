"""The UI's actions as plain functions of (player state, inputs) → (new state, outputs).

Nothing here needs a browser or a running server: `GameUI` takes the engine and the registry,
and every action returns an `Update` (the new `Player` and what the screen shows) or raises
`gr.Error` with a message for the player, in which case the caller keeps its old state — Gradio
does not store the state of an event that raised. Game state lives only in `Player` values, one
per browser session; the engine holds models, never games.

`GameUI` is the shared `GameTable` (engine, registry, files, the screen) with one controller per
concern: `turns` (read, play, undo), `games` (restart, character, back) and `saves` (save,
export, load).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from animegamer.characters.registry import Registry
from animegamer.serving.batching import BatchSettings
from animegamer.serving.clips import DELETE_GRACE_S
from animegamer.ui.contracts import Engine, TurnRunner
from animegamer.ui.disk import DiskBudget
from animegamer.ui.games import GameActions
from animegamer.ui.saves import SaveActions
from animegamer.ui.table import GameTable
from animegamer.ui.turns import TurnActions


class GameUI(GameTable):
    """The actions of the game screen, bound to one engine and one character registry."""

    def __init__(
        self,
        engine: Engine,
        registry: Registry,
        *,
        window: int = 1,
        run_turn: TurnRunner | None = None,
        clock: Callable[[], float] = time.perf_counter,
        delete_grace_s: float = DELETE_GRACE_S,
        disk: DiskBudget | None = None,
        batching: BatchSettings | None = None,
    ) -> None:
        super().__init__(
            engine, registry, window=window, delete_grace_s=delete_grace_s, disk=disk
        )
        self.batching = batching or BatchSettings()
        """How many turns may play as one batch (`make_turn_runner`; the GPU queue lets that
        many wait together)."""
        self.turns = TurnActions(self, run_turn, clock, self.batching)
        self.games = GameActions(self)
        self.saves = SaveActions(self)
