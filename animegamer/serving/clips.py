"""Where a server keeps its files (clips, saves, exports), and the one place that deletes them.

The `ClipStore` owns every file below its folder for the files' whole life: the engine writes a
turn's clip through it (`write_clip`), the UI says when a game or a player is over
(`discard_clip`, `end_game`, `end_player`, `forget_if_empty`) and when to tidy (`tidy`); no other
code computes its paths or deletes anything there.

Layout under the output folder `root`:
- `root/<session_id>/turn_…mp4`: the clips the engine writes for a game;
- `root/players/<player_id>/<session_id>/<kind>/`: a player's saves, exports and loaded clips,
  per game, so that the files of a game that is over go with it.

Deleting is deferred by a grace period: the screen of the action that just finished may still be
on its way to the browser (Gradio copies the files it shows after the action returns), so a game
ended by the next action (restart, undo, load) must not lose its files under that copy.
"""

from __future__ import annotations

import secrets
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from animegamer.game.rules import Session
from animegamer.video.writer import write_mp4

PLAYERS_FOLDER = "players"
DELETE_GRACE_S = 30.0
"""How long a discarded file stays: longer than Gradio takes to copy an action's outputs."""


def is_inside(path: Path, root: Path) -> bool:
    """Whether `path` is `root` or below it, after resolving links."""
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def remove_inside(root: Path, paths: Iterable[Path]) -> None:
    """Delete files and folders, but only those strictly below `root` (never `root` itself)."""
    resolved_root = root.resolve()
    for path in paths:
        if not is_inside(path, root) or path.resolve() == resolved_root:
            continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def player_folder(root: Path, player_id: str) -> Path:
    return root / PLAYERS_FOLDER / player_id


class ClipStore:
    """The files of every game on this server, below one folder.

    It holds no game state: only the folder, and the paths waiting out their grace period.
    """

    def __init__(
        self, root: str | Path, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.root = Path(root)
        self.clock = clock
        self._trash: list[tuple[float, Path]] = []
        self._lock = threading.Lock()

    def write_clip(self, frames: np.ndarray, session_id: str, turn_index: int, seed: int) -> Path:
        """Write a turn's frames as the game's next clip; a unique name, so a turn that is
        played again after an undo never meets the old clip's copy in a browser cache."""
        folder = self.root / session_id
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"turn_{turn_index:04d}_{seed}_{secrets.token_hex(3)}.mp4"
        try:
            return write_mp4(frames, path)
        except BaseException:
            path.unlink(missing_ok=True)
            raise

    def game_folder(self, session_id: str) -> Path:
        """The folder of a game's clips (those played, or those a loaded save unpacks)."""
        return self.root / session_id

    def forget_if_empty(self, folder: Path) -> None:
        """Remove a game folder that nothing was written to (a refused load)."""
        if folder.is_dir() and not any(folder.iterdir()):
            remove_inside(self.root, [folder])

    def workdir(self, player_id: str, session_id: str, kind: str) -> Path:
        """A player's folder for one game's `kind` of files (saves, exports, loaded clips)."""
        folder = player_folder(self.root, player_id) / session_id / kind
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _game_files(self, player_id: str, session: Session) -> set[Path]:
        """Everything that belongs to one game: its clip folders and its player-side folder."""
        folders = {Path(turn.clip_path).parent for turn in session.turns if turn.clip_path}
        folders.add(self.game_folder(session.session_id))
        folders.add(player_folder(self.root, player_id) / session.session_id)
        return folders

    def discard_clip(self, clip_path: str, grace_s: float = DELETE_GRACE_S) -> None:
        """A turn taken back (undo): its clip goes after the grace period."""
        self._discard([Path(clip_path)], grace_s)

    def end_game(self, player_id: str, session: Session, grace_s: float = DELETE_GRACE_S) -> None:
        """A game nobody can return to: its files go after the grace period."""
        self._discard(self._game_files(player_id, session), grace_s)

    def end_player(self, player_id: str, sessions: Iterable[Session | None]) -> None:
        """A browser session that ended: its player's files and its games' clips go now."""
        folders = {player_folder(self.root, player_id)}
        for session in sessions:
            if session is not None:
                folders |= self._game_files(player_id, session)
        remove_inside(self.root, folders)

    def tidy(self, max_age_s: float | None = None) -> None:
        """Delete what is due; with `max_age_s`, also what was left behind (`sweep`)."""
        self.empty_trash()
        if max_age_s is not None:
            self.sweep(max_age_s)

    def _discard(self, paths: Iterable[Path], grace_s: float) -> None:
        """Delete `paths` (files or folders below the root) once `grace_s` have passed."""
        due = self.clock() + grace_s
        with self._lock:
            self._trash.extend((due, Path(path)) for path in paths)
        self.empty_trash()

    def empty_trash(self, *, everything: bool = False) -> int:
        """Delete what is due (or everything); returns how many paths were deleted."""
        now = self.clock()
        with self._lock:
            due = [path for when, path in self._trash if everything or when <= now]
            self._trash = [(when, path) for when, path in self._trash
                           if not (everything or when <= now)]
        remove_inside(self.root, due)
        return len(due)

    def sweep(self, max_age_s: float) -> int:
        """Delete game and player folders untouched for `max_age_s` (left by a crash, a restart
        of the server, or a browser session whose end was never reported)."""
        cutoff = time.time() - max_age_s
        stale = [
            entry
            for parent in (self.root, self.root / PLAYERS_FOLDER)
            if parent.is_dir()
            for entry in parent.iterdir()
            if entry.is_dir() and entry.name != PLAYERS_FOLDER and _newest_mtime(entry) < cutoff
        ]
        remove_inside(self.root, stale)
        return len(stale)


def _newest_mtime(folder: Path) -> float:
    """The latest modification below `folder` (a folder's own time changes only when entries are
    added or removed, not when a file in a subfolder is written)."""
    newest = folder.stat().st_mtime
    for path in folder.rglob("*"):
        try:
            newest = max(newest, path.stat().st_mtime)
        except FileNotFoundError:
            continue
    return newest
