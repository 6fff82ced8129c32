"""Where a server keeps its files (clips, saves, exports), and the one place that deletes them.

The `ClipStore` owns every file below its folder for the files' whole life: the engine writes a
turn's clip through it (`write_clip`), the UI writes a game's one current save and export through
it (`keep_one`), says when a game or a player is over (`discard_clip`, `end_game`, `end_player`,
`forget_if_empty`) and when to tidy (`tidy`), and asks what the files weigh (`player_bytes`,
`total_bytes`) and to free downloads (`drop_downloads`, `evict_downloads`); no other code
computes its paths or deletes anything there. At start-up the server `claim`s the folder: what a
server that is no longer running left there (a crash, kill -9) belongs to no live game and goes.

Layout under the output folder `root`:
- `root/<session_id>/turn_…mp4`: the clips the engine writes for a game;
- `root/players/<player_id>/<session_id>/<kind>/`: a player's saves and exports, per game, so
  that the files of a game that is over go with it;
- `root/.server.lock`: locked by the server using the folder, while it runs.

Deleting is deferred by a grace period: the screen of the action that just finished may still be
on its way to the browser (Gradio copies the files it shows after the action returns), so a game
ended by the next action (restart, undo, load) must not lose its files under that copy.
"""

from __future__ import annotations

import fcntl
import logging
import secrets
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

import numpy as np

from animegamer.game.rules import Session
from animegamer.video.writer import write_mp4

logger = logging.getLogger(__name__)

PLAYERS_FOLDER = "players"
DOWNLOAD_KINDS = ("saves", "exports")
"""A player's files per game that can be made again from the game (and so may be evicted)."""
LOCK_FILE = ".server.lock"
TOTAL_REFRESH_S = 60.0
"""How long the measured size of the whole folder is trusted (writes through the store are
added to it meanwhile; other changes show at the next measurement)."""
DELETE_GRACE_S = 30.0
"""How long a discarded file stays: longer than Gradio takes to copy an action's outputs."""


def is_inside(path: Path, root: Path) -> bool:
    """Whether `path` is `root` or below it, after resolving links."""
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def bytes_under(paths: Iterable[Path]) -> int:
    """The bytes of the regular files at or below `paths` (links not followed, missing ones 0)."""
    total = 0
    for path in paths:
        try:
            entries = [path, *path.rglob("*")] if path.is_dir() else [path]
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.lstat()
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total


def remove_inside(root: Path, paths: Iterable[Path]) -> int:
    """Delete files and folders, but only those strictly below `root` (never `root` itself);
    returns the bytes freed."""
    resolved_root = root.resolve()
    freed = 0
    for path in paths:
        if not is_inside(path, root) or path.resolve() == resolved_root:
            continue
        freed += bytes_under([path])
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return freed


def player_folder(root: Path, player_id: str) -> Path:
    return root / PLAYERS_FOLDER / player_id


class ClipStore:
    """The files of every game on this server, below one folder.

    It holds no game state: only the folder, the paths waiting out their grace period, the
    folder's measured size, and (once claimed) the lock that marks it as this server's.
    """

    def __init__(
        self, root: str | Path, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.root = Path(root)
        self.clock = clock
        self._trash: list[tuple[float, Path]] = []
        self._lock = threading.Lock()
        self._total: int | None = None
        self._measured_at = 0.0
        self._claim: BinaryIO | None = None

    def claim(self) -> bool:
        """Make this server the folder's user for as long as it runs, and remove every file and
        folder in it: a server that starts holds no game yet, so whatever is there was left by
        one that stopped (a crash, kill -9 mid-turn) and belongs to no live game. Returns False
        and removes nothing while another running server uses the folder."""
        self.root.mkdir(parents=True, exist_ok=True)
        handle = (self.root / LOCK_FILE).open("ab")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            logger.warning("%s is in use by another running server: nothing removed", self.root)
            return False
        self._claim = handle
        left = [path for path in self.root.iterdir() if path.name != LOCK_FILE]
        freed = self._remove(left)
        logger.info("start-up: removed %d entries (%d bytes) left by an earlier server",
                    len(left), freed)
        return True

    def write_clip(self, frames: np.ndarray, session_id: str, turn_index: int, seed: int) -> Path:
        """Write a turn's frames as the game's next clip; a unique name, so a turn that is
        played again after an undo never meets the old clip's copy in a browser cache."""
        folder = self.root / session_id
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"turn_{turn_index:04d}_{seed}_{secrets.token_hex(3)}.mp4"
        try:
            written = write_mp4(frames, path)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        self.note_written(written)
        return written

    def keep_one(self, folder: Path, name: str, write: Callable[[Path], Path]) -> Path:
        """The one current file of `folder` (a game's saves or its exports): `folder/name` as it
        is when it exists (its name says what it holds: the same game made it), else the file
        `write` makes there once the folder's other files are removed."""
        target = folder / name
        if target.is_file():
            return target
        self._remove([path for path in folder.iterdir() if path != target])
        written = write(target)
        self.note_written(written)
        return written

    def note_written(self, path: Path) -> None:
        """Count a file or folder written below the root (a loaded game's clips) in its size."""
        size = bytes_under([path])
        with self._lock:
            if self._total is not None:
                self._total += size

    def total_bytes(self) -> int:
        """The bytes of every file below the root: measured at most every `TOTAL_REFRESH_S`,
        with what was written or removed through the store in between."""
        with self._lock:
            fresh = self._total is not None and self.clock() - self._measured_at < TOTAL_REFRESH_S
            if fresh and self._total is not None:
                return self._total
        measured = bytes_under([self.root])
        with self._lock:
            self._total, self._measured_at = measured, self.clock()
        return measured

    def player_bytes(self, player_id: str, sessions: Iterable[Session | None]) -> int:
        """The bytes of a player's files: their games' clips, saves and exports."""
        folders = {player_folder(self.root, player_id)}
        for session in sessions:
            if session is not None:
                folders |= self._clip_folders(session)
        return bytes_under(folders)

    def drop_downloads(self, player_id: str, keep: Path | None = None) -> int:
        """Remove a player's saves and exports (of all their games) but `keep`; returns the
        bytes freed. They are made again on request."""
        games = player_folder(self.root, player_id)
        files = [
            path for kind in DOWNLOAD_KINDS for path in games.glob(f"*/{kind}/*") if path != keep
        ]
        return self._remove(files)

    def evict_downloads(self, budget_bytes: int, spare_player: str) -> None:
        """Remove other players' saves and exports, those of the games idle longest first, until
        the folder is under `budget_bytes` (room for the next file); a game's clips are never
        removed (they are the game)."""
        players = self.root / PLAYERS_FOLDER
        games = [
            game for game in players.glob("*/*")
            if game.is_dir() and game.parent.name != spare_player
        ]
        games.sort(key=lambda game: max(_newest_mtime(game), _newest_mtime(self.game_folder(
            game.name))))
        for game in games:
            if self.total_bytes() < budget_bytes:
                return
            self._remove([game / kind for kind in DOWNLOAD_KINDS])

    def game_folder(self, session_id: str) -> Path:
        """The folder of a game's clips (those played, or those a loaded save unpacks)."""
        return self.root / session_id

    def forget_if_empty(self, folder: Path) -> None:
        """Remove a game folder that nothing was written to (a refused load)."""
        if folder.is_dir() and not any(folder.iterdir()):
            self._remove([folder])

    def workdir(self, player_id: str, session_id: str, kind: str) -> Path:
        """A player's folder for one game's `kind` of files (saves, exports, loaded clips)."""
        folder = player_folder(self.root, player_id) / session_id / kind
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _clip_folders(self, session: Session) -> set[Path]:
        """The folders of a game's clips (those its turns wrote, or its loaded save unpacked)."""
        folders = {Path(turn.clip_path).parent for turn in session.turns if turn.clip_path}
        folders.add(self.game_folder(session.session_id))
        return folders

    def _game_files(self, player_id: str, session: Session) -> set[Path]:
        """Everything that belongs to one game: its clip folders and its player-side folder."""
        return self._clip_folders(session) | {
            player_folder(self.root, player_id) / session.session_id
        }

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
        self._remove(folders)

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
        self._remove(due)
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
        self._remove(stale)
        return len(stale)

    def _remove(self, paths: Iterable[Path]) -> int:
        """Delete `paths` below the root and take their bytes off the folder's size."""
        freed = remove_inside(self.root, paths)
        with self._lock:
            if self._total is not None:
                self._total = max(0, self._total - freed)
        return freed


def _newest_mtime(folder: Path) -> float:
    """The latest modification below `folder` (a folder's own time changes only when entries are
    added or removed, not when a file in a subfolder is written)."""
    try:
        newest = folder.stat().st_mtime
    except FileNotFoundError:
        return 0.0
    for path in folder.rglob("*"):
        try:
            newest = max(newest, path.stat().st_mtime)
        except FileNotFoundError:
            continue
    return newest
