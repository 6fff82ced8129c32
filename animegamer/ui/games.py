"""A player's games: a new game (restart, or another character) and the way back to the game it
replaced."""

from __future__ import annotations

import dataclasses

from animegamer.game.rules import new_session
from animegamer.ui.messages import LOST_GAME, replaced_toast, turns_text, user_error
from animegamer.ui.state import Player, Update
from animegamer.ui.table import GameTable


class GameActions:
    """Restart, character switch and going back: each replaces the player's game."""

    def __init__(self, table: GameTable) -> None:
        self.table = table

    def resume(self, player: Player | None, lost: bool = False) -> Update:
        """A page (re)loaded: the browser's game as it was, its last instruction on the command
        line; or, when the browser's key names a game this server no longer has (`lost`), a new
        game and the one notice saying so. A new game of the first character leaves the line as
        the page shows it (its default command): the player may have started typing."""
        if lost:
            player = self.table.new_player()
            return Update(player, self.table.screen(player, LOST_GAME), toast=LOST_GAME)
        update = self.table.start(player)
        session = update.player.session
        if not session.turns and session.character == self.table.default_character.name:
            return update
        return dataclasses.replace(update, instruction=self.table.last_instruction(session))

    def restart(self, player: Player | None) -> Update:
        player = player or self.table.new_player()
        self.table.tidy()
        name = player.session.character
        replaced = player.session
        player = self.table.replace_game(player, new_session(name, player.session.window))
        message = f"New game with {self.table.character(name).display_name}."
        return Update(
            player, self.table.screen(player, message), self.table.default_instruction(name),
            replaced_toast(replaced, message),
        )

    def choose_character(self, player: Player | None, name: str | None) -> Update:
        """Pick the character to play: a new game with them (the current one is closed)."""
        player = player or self.table.new_player()
        self.table.tidy()
        character = self.table.character(name or "")
        casting = self.table.engine.casting(character.name)
        if not casting.available:
            raise user_error(
                f"{character.display_name} cannot be played here: {casting.unavailable}",
                "Character unavailable",
            )
        replaced = player.session
        if character.name == replaced.character and not replaced.turns:
            # Already a fresh game with them (the picker may report a choice twice): no news.
            message = f"Playing {character.display_name}."
            return Update(
                player, self.table.screen(player, message), self.table.last_instruction(replaced)
            )
        player = self.table.replace_game(player, new_session(character.name, self.table.window))
        message = f"New game with {character.display_name}."
        return Update(
            player, self.table.screen(player, message),
            self.table.default_instruction(character.name),
            replaced_toast(replaced, message),
        )

    def previous_game(self, player: Player | None) -> Update:
        """One step back after a restart, a character switch or a load: the replaced game
        returns, and the game it replaces becomes the one to go back to (unless it is empty)."""
        player = player or self.table.new_player()
        back = player.previous_game
        if back is None:
            raise user_error("There is no earlier game to go back to.", "No earlier game")
        current = player.session
        player = dataclasses.replace(
            player, session=back, previous_game=current if current.turns else None,
            last_elapsed_s=None,
        )
        name = self.table.character(back.character).display_name
        message = f"Back to your game with {name}: {turns_text(len(back.turns))}."
        return Update(
            player, self.table.screen(player, message), self.table.last_instruction(back), message
        )
