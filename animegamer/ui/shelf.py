"""The games the server keeps by browser key, so that a reload comes back to the same game.

A browser holds one key (in its local storage, `gr.BrowserState`), never the game: the game, its
clips and its story stay on the server, in the `GameSlot` the key names. A reload is a new Gradio
session; its page load finds the slot by the key and plays on in it. The key is unguessable
(`secrets.token_urlsafe`) and is sent only to the browser it names, so one browser never reaches
another's game. A game idle for `keep_s` (the Gradio session's own time to live) is forgotten and
its files go; a server restart forgets every game, and the browser's key then finds nothing.
"""

from __future__ import annotations

import secrets
import threading

from animegamer.ui.state import SESSION_TTL_S, GameSlot

KEY_BYTES = 24
"""Random bytes of a key (32 URL-safe characters)."""
MAX_KEY_CHARS = 64
"""A longer value in the browser's storage is no key of ours."""
KEPT_GAMES_MAX = 10_000
"""The most games kept at once (Gradio's own session capacity); the idlest goes first."""


class GameShelf:
    """Browser key → the `GameSlot` of that browser's game, for `keep_s` after its last action."""

    def __init__(self, keep_s: float = SESSION_TTL_S, capacity: int = KEPT_GAMES_MAX) -> None:
        self.keep_s = keep_s
        self.capacity = capacity
        self._slots: dict[str, GameSlot] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._slots)

    def find(self, key: object) -> GameSlot | None:
        """The slot kept under `key` (whatever the browser sent), or None."""
        if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS:
            return None
        with self._lock:
            slot = self._slots.get(key)
        if slot is None or slot.idle_s > self.keep_s:
            self.expire()
            return None
        return slot

    def keep(self, slot: GameSlot) -> str:
        """Keep `slot` under a new key, and return the key (for its browser only)."""
        key = secrets.token_urlsafe(KEY_BYTES)
        slot.kept = True
        with self._lock:
            self._slots[key] = slot
        self.expire()
        return key

    def expire(self) -> None:
        """Forget the games idle for `keep_s` and, over `capacity`, the idlest (a game whose
        action is running stays until the next look)."""
        with self._lock:
            due = [key for key, slot in self._slots.items() if slot.idle_s > self.keep_s]
            over = len(self._slots) - len(due) - self.capacity
            if over > 0:
                stale = set(due)
                idlest = sorted(self._slots, key=lambda key: self._slots[key].last_used)
                due += [key for key in idlest if key not in stale][:over]
            for key in due:
                if self._slots[key].forget():
                    del self._slots[key]
