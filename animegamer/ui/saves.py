"""A game's files for the player: its one current save and playthrough export, and loading a
saved game the player uploaded (every turn held to what its character can play here)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Container
from pathlib import Path

from animegamer.command.parser import InstructionContext, check_instruction, game_context
from animegamer.game.rules import Instruction, Session
from animegamer.game.save_reading import SaveFileError, TurnCheck, load_game
from animegamer.game.savefile import save_game
from animegamer.ui.disk import game_digest
from animegamer.ui.messages import DISK_FULL, is_disk_full, replaced_toast, turns_text, user_error
from animegamer.ui.state import Player, Update
from animegamer.ui.table import GameTable
from animegamer.video.playthrough import PlaythroughError, concat_mp4

NOT_UPLOADED = (
    "This file was not uploaded to this server: send the saved game itself, e.g. "
    "client.predict(handle_file('game.zip'), api_name='/load')."
)


def uploaded_path(path: str | None, uploads: Container[str]) -> str:
    """`path` when it names a file a client uploaded to this server (`uploads`: Gradio's record
    of the paths it stored uploads at), else a titled refusal: a player loads only what was
    uploaded, never a file the server wrote (another player's save) named by its path."""
    if not path:
        raise user_error("Choose a saved game (.zip) to load.", "Nothing to load")
    if path not in uploads or not Path(path).is_file():
        raise user_error(NOT_UPLOADED, "Cannot load this saved game")
    return path


class SaveActions:
    """Save, export and load: the files a player takes away or brings."""

    def __init__(self, table: GameTable) -> None:
        self.table = table

    def _download_of(
        self, player: Player | None, nothing_yet: str, title: str, not_made: str
    ) -> tuple[Player, Session, str]:
        """The player, its game and the file name of a download of it (save or playthrough),
        once the game has a turn and the player's disk budget has room (else a titled refusal
        saying `nothing_yet` or `not_made`)."""
        player = player or self.table.new_player()
        session = player.session
        if not session.turns:
            raise user_error(f"Play a turn first: {nothing_yet}.", title)
        self.table.disk.make_room(player, not_made)
        name = f"animegamer-{session.character}-{len(session.turns)}turns-{game_digest(session)}"
        return player, session, name

    def save(self, player: Player | None) -> str:
        """Write the game to a zip file and return its path (for a download): the game's one
        current save, which replaces the one before."""
        player, session, name = self._download_of(
            player, "there is nothing to save yet", "Nothing to save", "the game was not saved"
        )
        try:
            path = self.table.files.keep_one(
                self.table.workdir(player, "saves"), f"{name}.zip",
                lambda to: save_game(session, to),
            )
        except OSError as error:
            if is_disk_full(error):
                raise user_error(f"{DISK_FULL} The game was not saved.", "Disk full") from error
            raise
        self.table.disk.keep_within_budget(player, "the game was not saved", player_downloads=path)
        return str(path)

    def turn_check(self) -> TurnCheck:
        """What a loaded game's every turn is held to: what a command typed in that game is
        (its character's names, its world's words)."""
        contexts: dict[str, InstructionContext] = {}

        def check(character: str, instruction: Instruction) -> None:
            if character not in contexts:
                vocabulary = self.table.engine.vocabulary_for(character)
                contexts[character] = game_context(self.table.registry, character, None, vocabulary)
            check_instruction(instruction, contexts[character])

        return check

    def load(self, player: Player | None, path: str | None) -> Update:
        """Continue a saved game (an uploaded zip, `uploaded_path`) in place of the current
        one."""
        player = player or self.table.new_player()
        if not path:
            raise user_error("Choose a saved game (.zip) to load.", "Nothing to load")
        self.table.tidy()
        self.table.disk.make_room(player, "the saved game was not loaded")
        session_id = uuid.uuid4().hex
        clip_dir = self.table.files.game_folder(session_id)
        try:
            loaded = load_game(
                path, clip_dir, set(self.table.registry.names),
                self.table.engine.representation_dim, self.turn_check(),
            )
        except SaveFileError as error:
            raise user_error(str(error), "Cannot load this saved game") from error
        finally:
            self.table.files.forget_if_empty(clip_dir)
        self.table.files.note_written(clip_dir)
        session = dataclasses.replace(loaded, session_id=session_id)
        replaced = player.session
        player = self.table.replace_game(player, session)
        message = f"Saved game loaded: {turns_text(len(session.turns))}."
        return Update(
            player, self.table.screen(player, message), self.table.last_instruction(session),
            replaced_toast(replaced, message),
        )

    def playthrough(self, player: Player | None) -> str:
        """All clips of the game as one mp4; returns its path (for a download)."""
        player, session, name = self._download_of(
            player, "there is no clip yet", "Nothing to download", "no playthrough was made"
        )
        clips = [turn.clip_path for turn in session.turns]
        try:
            path = self.table.files.keep_one(
                self.table.workdir(player, "exports"), f"{name}.mp4",
                lambda to: concat_mp4(clips, to),
            )
        except PlaythroughError as error:
            raise user_error(str(error), "Cannot build the playthrough") from error
        except OSError as error:
            if is_disk_full(error):
                raise user_error(f"{DISK_FULL} No playthrough was made.", "Disk full") from error
            raise
        self.table.disk.keep_within_budget(player, "no playthrough was made", player_downloads=path)
        return str(path)
