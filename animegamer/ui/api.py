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
import reprlib
from collections.abc import Container
from typing import Any

import gradio as gr
from gradio.components.api_component import Api

from animegamer.game.rules import INSTRUCTION_FIELDS
from animegamer.ui.callbacks import GameUI
from animegamer.ui.events import queues
from animegamer.ui.layout import Layout
from animegamer.ui.messages import user_error
from animegamer.ui.saves import uploaded_path
from animegamer.ui.state import GameSlot, Update

TEXT = {"type": "string"}
FILE = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "meta": {"type": "object"}},
    "description": "a saved game (.zip), as gradio_client.handle_file(path) sends it",
}
JSON_KINDS = ((bool, "true or false"), (int, "a number"), (float, "a number"),
              (list, "a list"), (dict, "an object"))
SHOWN_CHARS = 40


def argument(label: str, schema: dict[str, Any] | None = None) -> Api:
    return Api(None, schema or TEXT, label)


def screen(slot: GameSlot, update: Update) -> list[Any]:
    return [slot, *update.screen]


def shown(value: Any) -> str:
    """A value a client sent, as its JSON kind and a shortened repr: `a list ([1, 2])`."""
    kind = next((name for cls, name in JSON_KINDS if isinstance(value, cls)), "null")
    short = reprlib.Repr()
    short.maxlevel, short.maxlist, short.maxdict = 2, 3, 3
    short.maxstring = short.maxother = short.maxlong = SHOWN_CHARS
    return kind if value is None else f"{kind} ({short.repr(value)})"


def text(value: Any, name: str, title: str) -> str:
    """An argument that must be text (or left out: null reads as empty), else a titled refusal
    naming what came."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise user_error(f"The {name} must be text; got {shown(value)}.", title)
    return value


def seed_argument(value: Any) -> str | float:
    """The seed: text ("random", "42") or a number; anything else is refused."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    return text(value, "seed", "Invalid seed") or "random"


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
    given = (instruction_character, adverb, motion, time, place)
    values = {
        name: text(value, name, "Invalid instruction")
        for name, value in zip(INSTRUCTION_FIELDS, given, strict=True)
    }
    line = text(instruction_text, "instruction text", "Invalid instruction")
    seed = seed_argument(seed_text)
    update = slot.run(lambda current: ui.turns.play(current, values, line, seed, progress))
    return [*screen(slot, update), *(update.fields or ()), ""]


def parse(ui: GameUI, slot: GameSlot, instruction_text: Any) -> list[str]:
    """`/parse`: the five fields an instruction written as text asks for in the player's game
    (any form the command line reads, gaps filled as `/play` would fill them)."""
    line = text(instruction_text, "instruction text", "Invalid instruction")
    return list(slot.read(lambda current: ui.turns.parse(current, line)))


def load(ui: GameUI, uploads: Container[str], slot: GameSlot, file: Any) -> list[Any]:
    """`/load`: the saved game the client sent (`{"path": ...}` as `handle_file` sends it)."""
    if file is not None and not isinstance(file, dict):
        raise user_error(
            f"Send the saved game as a file, e.g. handle_file('game.zip'); got {shown(file)}.",
            "Nothing to load",
        )
    path = text(file.get("path") if file else None, "saved game's path", "Nothing to load")
    uploaded = uploaded_path(path, uploads)
    return screen(slot, slot.run(lambda current: ui.saves.load(current, uploaded)))


def expose(ui: GameUI, layout: Layout, uploads: Container[str]) -> None:
    """The named endpoints (inside the Blocks being built); `uploads` are the paths of the
    files clients uploaded (Gradio's record), the only ones `/load` reads."""
    queue_of = queues(ui)
    player, game = layout.player, [layout.player, *layout.screen]
    downloads = [layout.side.downloads]
    fields = [argument(name) for name in INSTRUCTION_FIELDS]
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
    actions = {
        "undo": ui.turns.undo, "restart": ui.games.restart,
        "previous_game": ui.games.previous_game,
    }
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
        [], functools.partial(load, ui, uploads), inputs=[player, argument("saved game", FILE)],
        outputs=game, api_name="load", **queue_of.files,
    )
    gr.on([], functools.partial(read, ui.saves.save), inputs=[player], outputs=downloads,
          api_name="save", **queue_of.light)
    gr.on([], functools.partial(read, ui.saves.playthrough), inputs=[player], outputs=downloads,
          api_name="playthrough", **queue_of.files)


def run_action(action: Any, slot: GameSlot) -> list[Any]:
    return screen(slot, slot.run(action))


def choose_character(ui: GameUI, slot: GameSlot, name: Any) -> list[Any]:
    chosen = text(name, "character's name", "Unknown character")
    return screen(slot, slot.run(lambda current: ui.games.choose_character(current, chosen)))


def read(action: Any, slot: GameSlot) -> str:
    return str(slot.read(action))
