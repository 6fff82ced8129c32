"""What every controller of the game screen shares: the engine and the character registry, the
files (`ClipStore`) and their disk budget, reading a command in a game's context, and the screen
a player sees."""

from __future__ import annotations

import dataclasses
import html
import time
from collections.abc import Mapping
from pathlib import Path
from textwrap import shorten

from animegamer.characters.registry import Character, Registry, RegistryError
from animegamer.command.parser import (
    InstructionContext,
    OtherCharacterError,
    check_instruction,
    format_command,
    game_context,
    read_instruction,
    with_word,
)
from animegamer.game.rules import (
    Instruction,
    InstructionError,
    Session,
    make_instruction,
    new_session,
)
from animegamer.serving.clips import DELETE_GRACE_S
from animegamer.serving.settings import Settings
from animegamer.ui import views
from animegamer.ui.chips import vocabulary_for
from animegamer.ui.contracts import Engine
from animegamer.ui.disk import DiskBudget, DiskKeeper
from animegamer.ui.messages import user_error, without_paths
from animegamer.ui.shelf import GameShelf
from animegamer.ui.state import SESSION_FILES_MAX_AGE_S, Player, Screen, Update

MAX_NAME_CHARS = 100
PICKER_REASON_CHARS = 80
SWEEP_INTERVAL_S = 3600


class GameTable:
    """The game screen's shared parts, bound to one engine and one character registry: the
    controllers (`animegamer.ui.turns`, `games`, `saves`) act through it."""

    def __init__(
        self,
        engine: Engine,
        registry: Registry,
        *,
        window: int = 1,
        delete_grace_s: float = DELETE_GRACE_S,
        disk: DiskBudget | None = None,
    ) -> None:
        self.engine = engine
        self.registry = registry
        self.window = window
        self.files = engine.clips
        self.root = self.files.root
        self.delete_grace_s = delete_grace_s
        self.disk = DiskKeeper(self.files, disk or DiskBudget.of(Settings()))
        self.shelf = GameShelf()
        self._next_sweep = 0.0

    @property
    def default_character(self) -> Character:
        """The first character that can be played here (the engine says which can)."""
        return next(
            (c for c in self.registry.characters if self.engine.casting(c.name).available),
            self.registry.characters[0],
        )

    def character(self, name: str) -> Character:
        if len(name) > MAX_NAME_CHARS:
            raise user_error(
                f"There is no character with such a long name ({len(name)} characters).",
                "Unknown character",
            )
        try:
            return self.registry.get(name)
        except RegistryError as error:
            raise user_error(str(error), "Unknown character") from error

    def character_choices(self) -> list[tuple[str, str]]:
        """The picker's `(label, name)` pairs: every character of the registry, those that
        cannot be played here labelled with the reason."""
        choices = []
        for character in self.registry.characters:
            casting = self.engine.casting(character.name)
            label = character.display_name
            if not casting.available:
                reason = shorten(without_paths(casting.unavailable), PICKER_REASON_CHARS)
                label += f" (unavailable: {reason})"
            choices.append((label, character.name))
        return choices

    def new_player(self, character: str | None = None) -> Player:
        name = character or self.default_character.name
        return Player(session=new_session(name, self.window))

    def workdir(self, player: Player, kind: str) -> Path:
        return self.files.workdir(player.player_id, player.session.session_id, kind)

    def default_instruction(self, name: str) -> Instruction:
        """The character's default instruction, in words the world knows."""
        return self.command_context(new_session(self.character(name).name)).fallback

    def last_instruction(self, session: Session) -> Instruction:
        """The instruction of the game's last turn, or the character's default."""
        if session.turns:
            return session.turns[-1].instruction
        return self.default_instruction(session.character)

    def short_name(self, name: str) -> str:
        """How the story calls the character: the name its instructions use ("Qiqi")."""
        return self.character(name).defaults.character

    def vocabulary(self, name: str) -> dict[str, list[str]]:
        """The suggestion chips for the character `name` on this engine."""
        character = self.character(name)
        return vocabulary_for(character, self.engine)

    def command_context(self, session: Session) -> InstructionContext:
        """What reading a command needs of the game: what it may leave out (the character's
        default adverb, and the time and place of the last turn), who may be named, and the
        world's closed vocabulary where it has one."""
        last = session.turns[-1].instruction if session.turns else None
        return game_context(
            self.registry, session.character, last,
            self.engine.vocabulary_for(session.character),
        )

    def read(
        self, session: Session, text: str | None, fields: Mapping[str, str | None] | None = None
    ) -> Instruction:
        """The instruction `text` asks for or, without text, the five `fields`, held to the game
        (`animegamer.command.parser`); `gr.Error` saying what is wrong. Changes no game."""
        context = self.command_context(session)
        try:
            if fields is None or (text and text.strip()):
                return read_instruction(text, context)
            return check_instruction(make_instruction(fields), context)
        except OtherCharacterError as error:
            playing = self.character(error.playing).display_name
            named = self.character(error.named).display_name
            raise user_error(
                f"This game plays {playing}. To play {named}, choose them in the character list "
                "(that starts a new game).",
                "Another character",
            ) from error
        except InstructionError as error:
            raise user_error(str(error), "Invalid instruction") from error

    def default_command(self, session: Session) -> str:
        return format_command(self.command_context(session).fallback)

    def with_word(self, session: Session, text: str | None, field: str, word: str) -> str:
        """The command line after tapping the suggestion `word` for `field`."""
        try:
            return with_word(text, field, word, self.command_context(session))
        except InstructionError as error:
            raise user_error(str(error), "Invalid suggestion") from error

    def screen(self, player: Player, message: str) -> Screen:
        session = player.session
        status = f"**{html.escape(message)}**"
        if player.last_elapsed_s is not None:
            status += f"  \nLast turn took {player.last_elapsed_s:.1f} s."
        return Screen(
            summary=views.game_summary(session, self.engine.casting(session.character).kind),
            chat=views.chat_messages(session, self.short_name(session.character)),
            clip=views.newest_clip(session),
            gallery=views.gallery_items(session),
            gauges=views.gauges_html(session),
            history=views.history_frame(session),
            status=status,
        )

    def start(self, player: Player | None) -> Update:
        """The screen for a player arriving (a fresh game when they have none yet)."""
        player = player or self.new_player()
        shown = self.character(player.session.character).display_name
        return Update(player, self.screen(player, f"Playing {shown}."))

    def tidy(self) -> None:
        """Forget the kept games nobody came back to, delete discarded files that are due, and
        (hourly) folders nobody will come back to."""
        self.shelf.expire()
        now = time.monotonic()
        sweep = now >= self._next_sweep
        if sweep:
            self._next_sweep = now + SWEEP_INTERVAL_S
        self.files.tidy(SESSION_FILES_MAX_AGE_S if sweep else None)

    def replace_game(self, player: Player, session: Session) -> Player:
        """The player with `session` as their game. The old game becomes the one to go back to
        (an empty one does not replace an earlier game with turns); the game that drops out
        loses its files after the grace period (its last screen may still be on its way to the
        browser)."""
        old = player.session
        keep, drop = (old, player.previous_game) if old.turns else (player.previous_game, old)
        if drop is not None:
            self.files.end_game(player.player_id, drop, self.delete_grace_s)
        return dataclasses.replace(
            player, session=session, last_elapsed_s=None, previous_game=keep
        )
