"""The named API endpoints, as API clients (gradio_client) call them.

Each endpoint is an explicit function of (the client's game, arguments) wired to no button:
its arguments are `gr.api`'s argument components, its results are the game's screen components
(so that clips and files are served as files), and the client's game is the same per-session
`gr.State` the browser uses. `/parse` needs no game and is a plain `gr.api`.

Every action returns the game data first, then the chat, the newest clip, the gallery, the
gauges, the history and the status line; `/play` also returns the five fields of the
instruction played and the emptied text box. A refused call raises `gr.Error` with a title
and a message that opens with that title.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gradio as gr
from gradio.components.api_component import Api
from gradio.utils import get_upload_folder

from animegamer.game.rules import INSTRUCTION_FIELDS
from animegamer.ui.callbacks import GameSlot, GameUI, Update, user_error
from animegamer.ui.events import queues

if TYPE_CHECKING:
    from animegamer.ui.layout import Layout

TEXT = {"type": "string"}
FILE = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "meta": {"type": "object"}},
    "description": "a saved game (.zip), as gradio_client.handle_file(path) sends it",
}
NOT_UPLOADED = (
    "This file was not uploaded to this server: send the saved game itself, e.g. "
    "client.predict(handle_file('game.zip'), api_name='/load')."
)


def argument(label: str, schema: dict[str, Any] | None = None) -> Api:
    return Api(None, schema or TEXT, label)


def screen(slot: GameSlot, update: Update) -> list[Any]:
    return [slot, *update.screen]


def play(
    ui: GameUI,
    slot: GameSlot,
    instruction_character: str,
    adverb: str,
    motion: str,
    time: str,
    place: str,
    instruction_text: str,
    seed_text: str,
    progress: gr.Progress = gr.Progress(),  # noqa: B008 (Gradio's injection idiom)
) -> list[Any]:
    """Play one turn: from `instruction_text` when it is filled in, else from the fields."""
    values = dict(
        zip(INSTRUCTION_FIELDS, (instruction_character, adverb, motion, time, place), strict=True)
    )
    update = slot.run(
        lambda current: ui.play(current, values, instruction_text, seed_text, progress)
    )
    return [*screen(slot, update), *(update.fields or ()), ""]


def parse(ui: GameUI, slot: GameSlot, instruction_text: Any) -> list[str]:
    """`/parse`: the five fields an instruction written as text asks for in the player's game
    (any form the command line reads, gaps filled as `/play` would fill them)."""
    text = instruction_text if isinstance(instruction_text, str) else ""
    return list(slot.read(lambda current: ui.parse(current, text)))


def uploaded_path(file: Any) -> str:
    """The path of a file this server received as an upload, or a titled refusal: a client
    may only load what it uploaded, never name a file already on the server."""
    path = file.get("path") if isinstance(file, dict) else file
    if not isinstance(path, str) or not path:
        raise user_error("Send a saved game (.zip) to load.", "Nothing to load")
    resolved = Path(path).resolve()
    if Path(get_upload_folder()).resolve() not in resolved.parents or not resolved.is_file():
        raise user_error(NOT_UPLOADED, "Cannot load this saved game")
    return str(resolved)


def load(ui: GameUI, slot: GameSlot, file: Any) -> list[Any]:
    path = uploaded_path(file)
    return screen(slot, slot.run(lambda current: ui.load(current, path)))


def expose(ui: GameUI, layout: Layout) -> None:
    """The named endpoints (inside the Blocks being built)."""
    queue_of = queues(ui)
    player, game = layout.player, [layout.player, *layout.screen]
    downloads = [layout.side.downloads]
    fields = [argument(name) for name in ("character", "adverb", "motion", "time", "place")]
    gr.on(
        [], functools.partial(play, ui),
        inputs=[player, *fields, argument("instruction text"), argument("seed")],
        outputs=[*game, *[argument(f"played {name}") for name in INSTRUCTION_FIELDS],
                 argument("text box")],
        api_name="play", **queue_of.gpu,
    )
    gr.on(
        [], functools.partial(parse, ui), inputs=[player, argument("instruction text")],
        outputs=[argument(name) for name in INSTRUCTION_FIELDS], api_name="parse",
        **queue_of.light,
    )
    actions = {"undo": ui.undo, "restart": ui.restart, "previous_game": ui.previous_game}
    for name, action in actions.items():
        gr.on(
            [], functools.partial(run_action, action), inputs=[player], outputs=game,
            api_name=name, **queue_of.light,
        )
    gr.on(
        [], functools.partial(choose_character, ui), inputs=[player, argument("name")],
        outputs=game, api_name="character", **queue_of.light,
    )
    gr.on(
        [], functools.partial(load, ui), inputs=[player, argument("saved game", FILE)],
        outputs=game, api_name="load", **queue_of.files,
    )
    gr.on([], functools.partial(read, ui.save), inputs=[player], outputs=downloads,
          api_name="save", **queue_of.light)
    gr.on([], functools.partial(read, ui.playthrough), inputs=[player], outputs=downloads,
          api_name="playthrough", **queue_of.files)


def run_action(action: Any, slot: GameSlot) -> list[Any]:
    return screen(slot, slot.run(action))


def choose_character(ui: GameUI, slot: GameSlot, name: Any) -> list[Any]:
    if not isinstance(name, str):
        raise user_error("Name the character as text, e.g. 'Qiqi'.", "Unknown character")
    return screen(slot, slot.run(lambda current: ui.choose_character(current, name)))


def read(action: Any, slot: GameSlot) -> str:
    return str(slot.read(action))
