"""The disk budget the server keeps: one player's files and all players' together
(`Settings.player_disk_mb`, `Settings.disk_mb`), checked around every write a player asks for."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from animegamer.game.rules import Session
from animegamer.serving.clips import ClipStore
from animegamer.serving.settings import Settings
from animegamer.ui.messages import megabytes, user_error
from animegamer.ui.state import Player


@dataclass(frozen=True)
class DiskBudget:
    """The bytes the games' files may take: one player's (the clips of their game and of the
    game they may go back to, and each game's one save and one export), and everyone's."""

    player_bytes: int
    total_bytes: int

    @classmethod
    def of(cls, settings: Settings) -> DiskBudget:
        return cls(settings.player_disk_mb << 20, settings.disk_mb << 20)


def game_digest(session: Session) -> str:
    """Eight hex digits that change whenever the game does (each turn played writes a clip of
    its own name): the name of its one current save or export, which an unchanged game reuses."""
    digest = hashlib.blake2b(session.session_id.encode(), digest_size=4)
    for turn in session.turns:
        digest.update(f"{turn.index}:{turn.seed}:{turn.clip_path}\n".encode())
    return digest.hexdigest()


class DiskKeeper:
    """Holds the files of `files` to `budget`: room made before a write, the player's share
    checked after it."""

    def __init__(self, files: ClipStore, budget: DiskBudget) -> None:
        self.files = files
        self.budget = budget

    def make_room(self, player: Player, what: str) -> None:
        """Before a write: the server's files within the global budget, other players' saves
        and exports removed (idlest games first) if need be, else a refusal saying `what`."""
        limit = self.budget.total_bytes
        if self.files.total_bytes() < limit:
            return
        self.files.empty_trash(everything=True)
        self.files.evict_downloads(limit, spare_player=player.player_id)
        if self.files.total_bytes() >= limit:
            raise user_error(
                f"The server's space for games ({megabytes(limit)}) is used up, so {what}. "
                "Your game is unchanged; please try again later.",
                "Server storage full",
            )

    def keep_within_budget(
        self,
        player: Player,
        what: str,
        take_back: Callable[[], None] | None = None,
        player_downloads: Path | None = None,
    ) -> None:
        """After a write: the player's files within their budget, their other saves and exports
        (but `player_downloads`, the one just written) removed if need be; else the write is
        taken back (`take_back`, or the file removed) and the player told, with `what`."""
        sessions = (player.session, player.previous_game)
        limit = self.budget.player_bytes
        if self.files.player_bytes(player.player_id, sessions) <= limit:
            return
        self.files.drop_downloads(player.player_id, keep=player_downloads)
        used = self.files.player_bytes(player.player_id, sessions)
        if used <= limit:
            return
        if take_back is not None:
            take_back()
        else:
            self.files.drop_downloads(player.player_id)
        raise user_error(
            f"Your games' files would take {megabytes(used)} on this server, over the "
            f"{megabytes(limit)} one player may use, so {what}; your game is unchanged. "
            "A new game frees the files of the game before this one.",
            "Your storage is full",
        )
