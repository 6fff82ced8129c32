"""What the player reads: titled refusals (escaped, without server paths), a full disk told
apart from other failures, and the notices of actions that replace a game."""

from __future__ import annotations

import errno
import html
import re
import shutil
from pathlib import Path

import gradio as gr

from animegamer.game.rules import Session

SERVER_PATH = re.compile(r"(?<![\w.~])(?:/[^\s/'\"`:;,()<>]+)+/([^\s/'\"`:;,()<>]*)")
"""An absolute path (at least two parts); its last part is what a message may show."""


def without_paths(text: str) -> str:
    """`text` with every absolute path cut to its last part: a player never learns where the
    server keeps its files ("/srv/app/characters/qiqi/weights" reads "weights")."""
    return SERVER_PATH.sub(r"\1", text)


def user_error(message: str, title: str) -> gr.Error:
    """A message for the player, led by its title; server paths cut to their last part
    (`without_paths`); `<`, `>` and `&` escaped because Gradio renders error toasts as HTML
    (quotes need no escaping in text, and API clients read the message as it is). Gradio's
    toast header shows the kind ("Error") whatever the title, so the title also opens the
    message, where the player and API clients both read it."""
    text = html.escape(without_paths(f"{title}: {message}"), quote=False)
    return gr.Error(text, title=title, print_exception=False)


DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
MIN_FREE_BYTES = 1 << 20
"""A failed write on a disk with less free space than this was a full disk's doing."""


def is_disk_full(error: BaseException, folder: Path | None = None) -> bool:
    """Whether `error` (or an error that led to it) is a full disk. A writer in a subprocess
    (ffmpeg) reports a full disk as a broken pipe, so an `OSError` while `folder`'s disk has no
    room left counts too."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in DISK_FULL_ERRNOS:
            return True
        seen = seen.__cause__ or seen.__context__
    if folder is None or not isinstance(error, OSError):
        return False
    try:
        return shutil.disk_usage(folder).free < MIN_FREE_BYTES
    except OSError:
        return False


DISK_FULL = "The server's disk is full, so nothing could be written."


LOST_GAME = (
    "Your earlier game is no longer on this server (it restarted, or the game was idle for "
    "hours), so this is a new game."
)


def megabytes(size: int) -> str:
    return f"{size / (1 << 20):.0f} MB"


def turns_text(count: int) -> str:
    return f"{count} turn" if count == 1 else f"{count} turns"


def replaced_toast(replaced: Session, message: str) -> str:
    """The one notice of a restart, a switch or a load: what happened and, when the game it
    replaced had turns, that this game is kept. An empty game is not kept, so its notice
    promises nothing (the way back, if any, still shows its own count on its button)."""
    if not replaced.turns:
        return message
    return (
        f"{message} Your previous game ({turns_text(len(replaced.turns))}) is kept: "
        "“Back to previous game” returns to it."
    )
