"""The browser's events: plain handlers of (game state, inputs) → outputs, and their wiring.

A turn is two events. `send` reads the command line once into an instruction, keeps it in the
`pending` state, empties the line and shows the command in the story with a pending bubble at
once; `play` (a generator on the GPU queue) plays that instruction, showing the clip as it forms
on the stage when the engine reports it, then the new screen. A turn that fails puts the story
back and the command back on the line. None of these events is an API endpoint: the API is
`animegamer.ui.api`.
"""

from __future__ import annotations

import contextvars
import functools
import html
import queue
import threading
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass
from typing import Any, TypedDict

import gradio as gr

from animegamer.command.parser import format_command
from animegamer.game.rules import Instruction
from animegamer.ui.callbacks import GameUI
from animegamer.ui.contracts import PreviewCallback, Progress, shows_live_preview
from animegamer.ui.layout import Layout
from animegamer.ui.saves import uploaded_path
from animegamer.ui.state import GameSlot, Player, Update
from animegamer.ui.views import banner_html, preview_html, refused_messages

ZERO_GPU_CONCURRENCY = 4
"""ZeroGPU runs each call in its own worker on its own GPU slice: calls need not queue behind
one another there, while one dedicated GPU plays one batch at a time."""
GPU_CONCURRENCY = 1
LIGHT_CONCURRENCY = 8
"""Undo, restart, character, save: quick, but one may wait for its game's running turn."""
FILE_CONCURRENCY = 2
"""Load and playthrough read or write every clip of a game."""
INVALID = "ag-invalid"
SHOW_STAGE_JS = """() => {
  const stage = document.querySelector('#ag-clip');
  if (!stage) return;
  const box = stage.getBoundingClientRect();
  if (box.top < 0 || box.bottom > window.innerHeight) stage.scrollIntoView({block: 'start'});
}"""
"""A turn sent from below the stage (a chip or an example tapped on a phone) brings the stage
into view, where its progress, preview and clip appear."""
PRIVATE: dict[str, Any] = {"api_visibility": "private"}


class Concurrency(TypedDict):
    """The queue an event joins: its own limit, shared by the events with the same id."""

    concurrency_limit: int
    concurrency_id: str


@dataclass(frozen=True)
class Queues:
    light: Concurrency
    files: Concurrency
    gpu: Concurrency


def queues(ui: GameUI) -> Queues:
    """The turn queue lets a whole batch of turns in at once (they wait for each other in the
    `TurnBatcher`, which plays one batch at a time); Gradio's queue holds the rest."""
    alone = ZERO_GPU_CONCURRENCY if ui.engine.placement.zero_gpu else GPU_CONCURRENCY
    return Queues(
        light=Concurrency(concurrency_limit=LIGHT_CONCURRENCY, concurrency_id="light"),
        files=Concurrency(concurrency_limit=FILE_CONCURRENCY, concurrency_id="files"),
        gpu=Concurrency(
            concurrency_limit=max(alone, ui.batching.max_batch_size), concurrency_id="gpu"
        ),
    )


@dataclass(frozen=True)
class Pending:
    """A command read and waiting for its turn: what the player typed, and its instruction."""

    text: str
    instruction: Instruction


# Handlers ------------------------------------------------------------------------------------


def toast(update: Update) -> None:
    if update.toast:
        gr.Info(html.escape(update.toast), title="Game")


def back_button(player: Player | None) -> Any:
    previous = player.previous_game if player else None
    if previous is None:
        return gr.update(visible=False, value="Back to previous game")
    count = len(previous.turns)
    return gr.update(
        visible=True, value=f"Back to previous game ({count} turn{'' if count == 1 else 's'})"
    )


def game_outputs(slot: GameSlot, update: Update) -> list[Any]:
    """The state, the screen, the command line (the instruction to offer next) and the way
    back, after an action that changes the game."""
    toast(update)
    line = (
        gr.update(value=format_command(update.instruction), elem_classes=[])
        if update.instruction else gr.update(elem_classes=[])
    )
    return [slot, *update.screen, line, back_button(update.player)]


def character_banner(ui: GameUI, name: str | None) -> Any:
    """The banner for the character the picker shows: what plays them here."""
    if name not in ui.registry.names:
        return gr.update()
    return banner_html(ui.engine.casting(name), ui.engine.notice)


def switch_outputs(ui: GameUI, slot: GameSlot, update: Update) -> list[Any]:
    """`game_outputs`, then the picker, the avatar and each character's chips shown or not."""
    current = ui.character(update.player.session.character)
    return [
        *game_outputs(slot, update),
        gr.update(value=current.name),
        str(current.avatar) if current.avatar else None,
        *[gr.update(visible=c.name == current.name) for c in ui.registry.characters],
    ]


def send_command(ui: GameUI, slot: GameSlot, text: str | None) -> list[Any]:
    """Read the command line: the pending turn, the line emptied, the story with the bubble.
    A command that cannot be read raises, saying why (and `show_refusal` shows it)."""
    sent = ui.turns.send(slot.player, text, running=slot.turn_running)
    slot.turn_sent()
    return [Pending(sent.text, sent.instruction), gr.update(value="", elem_classes=[]), sent.chat]


def show_refusal(ui: GameUI, slot: GameSlot, text: str | None) -> list[Any]:
    """After a refused command, where the player looks: the reason as the story's last line
    (it stays when the notice fades) and the command line marked. The reason is read again
    (reading changes nothing). While a turn runs the story keeps its pending bubble, and only
    a command typed meanwhile is marked."""
    text = text or ""
    running = slot.turn_running
    try:
        ui.turns.send(slot.player, text, running=running)
    except gr.Error as error:
        reason = error.message
    else:  # it reads now (the turn it waited for has landed): nothing to show
        return [gr.skip(), gr.skip()]
    mark = gr.update(elem_classes=[INVALID]) if text.strip() or not running else gr.skip()
    if running:
        return [gr.skip(), mark]
    session = slot.player.session if slot.player else ui.new_player().session
    name = ui.short_name(session.character)
    return [refused_messages(session, name, text, reason), mark]


_DONE = object()


class TurnAbandoned(Exception):
    """The turn's event went away before the turn landed: the game keeps its earlier state."""


def run_with_previews(
    turn: Callable[[PreviewCallback | None], Update], live: bool
) -> Iterator[str | Update]:
    """Run `turn` in a worker thread, yielding the preview HTML of the newest preview it has
    reported whenever this generator gets to look, then its `Update`. Without `live` the turn
    runs here and only its update comes. The worker runs in a copy of this thread's context,
    where `gr.Progress` finds its event (Gradio keeps it in context variables): without it the
    turn's progress reports would reach no one."""
    if not live:
        yield turn(None)
        return
    reports: queue.Queue[Any] = queue.Queue()
    result: dict[str, Any] = {}

    def work() -> None:
        try:
            result["update"] = turn(reports.put)
        except BaseException as error:  # raised again in the event's thread below
            result["error"] = error
        finally:
            reports.put(_DONE)

    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(work,), name="turn", daemon=True).start()
    while (latest := reports.get()) is not _DONE:
        while not reports.empty():  # only the newest preview is worth showing
            newer = reports.get_nowait()
            if newer is _DONE:
                latest = _DONE
                break
            latest = newer
        if latest is _DONE:
            break
        yield preview_html(latest.frames, latest.step, latest.num_steps)
    if "error" in result:
        raise result["error"]
    yield result["update"]


def play_pending(
    ui: GameUI,
    slot: GameSlot,
    pending: Pending | None,
    seed: str,
    progress: Progress = gr.Progress(),  # noqa: B008 (Gradio's injection idiom)
) -> Iterator[list[Any]]:
    """Play the pending turn: the clip forming on the stage, then the new screen. A turn whose
    event goes away first (the tab closed, the turn cancelled: Gradio closes this generator)
    is abandoned: it does not land in the game, and its clip is deleted."""
    if pending is None:
        raise gr.Error("Type a command first.", title="Nothing to play")
    skip = [gr.skip()] * 9
    abandoned = threading.Event()

    def turn(on_preview: PreviewCallback | None) -> Update:
        def play(current: Player | None) -> Update:
            update = ui.turns.play_instruction(
                current, pending.instruction, seed, progress, on_preview, abandoned
            )
            if abandoned.is_set():
                ui.turns.abandon(update)
                raise TurnAbandoned
            return update

        return slot.run(play)

    try:
        for step in run_with_previews(turn, shows_live_preview(ui.engine)):
            if isinstance(step, str):
                yield [*skip, step]
            else:
                toast(step)
                yield [slot, *step.screen, back_button(step.player), ""]
    except GeneratorExit:
        abandoned.set()
        raise
    finally:
        slot.turn_sent(False)


def restore_after_failure(
    ui: GameUI, slot: GameSlot, pending: Pending | None, line: str
) -> list[Any]:
    """After a failed turn: the story without the pending bubble, no preview, and the command
    back on the line unless the player has typed another since."""
    restored = pending.text if pending and not line.strip() else gr.update()
    return [ui.start(slot.player).screen.chat, "", restored]


def apply_chip(ui: GameUI, field: str, slot: GameSlot, text: str, sample: list[str]) -> Any:
    """The command line with the tapped word in `field`; a word the game refuses changes
    nothing."""
    session = slot.player.session if slot.player else ui.new_player().session
    try:
        value = ui.with_word(session, text, field, sample[0])
    except gr.Error:
        return gr.update()
    return gr.update(value=value, elem_classes=[])


def example_command(sample: list[str]) -> str:
    return sample[0]


def resume_game(ui: GameUI, slot: GameSlot, key: object) -> list[Any]:
    """A page (re)loaded: the game the browser's key names, in the slot the server kept for it,
    or this session's own slot under a new key. A key naming no game here (a server restart)
    is said once: the browser keeps the new key. Reads the game without waiting for a running
    action: a reload in the middle of a turn shows the game as it was before that turn."""
    kept = ui.shelf.find(key)
    if kept is None:
        lost = bool(key)
        key = ui.shelf.keep(slot)
    else:
        slot, lost = kept, False
    return [*switch_outputs(ui, slot, ui.games.resume(slot.player, lost)), key]


def undo_turn(ui: GameUI, slot: GameSlot) -> list[Any]:
    return game_outputs(slot, slot.run(ui.turns.undo))


def restart_game(ui: GameUI, slot: GameSlot) -> list[Any]:
    return game_outputs(slot, slot.run(ui.games.restart))


def previous_game(ui: GameUI, slot: GameSlot) -> list[Any]:
    return switch_outputs(ui, slot, slot.run(ui.games.previous_game))


def choose_character(ui: GameUI, slot: GameSlot, name: str) -> list[Any]:
    return switch_outputs(
        ui, slot, slot.run(lambda current: ui.games.choose_character(current, name))
    )


def load_game(
    ui: GameUI, uploads: Container[str], slot: GameSlot, path: str | None
) -> list[Any]:
    """Load the saved game the player uploaded (`uploads`: Gradio's record of the uploads)."""
    uploaded = uploaded_path(path, uploads)
    return switch_outputs(ui, slot, slot.run(lambda current: ui.saves.load(current, uploaded)))


def save_game(ui: GameUI, slot: GameSlot) -> str:
    return str(slot.read(ui.saves.save))


def playthrough(ui: GameUI, slot: GameSlot) -> str:
    return str(slot.read(ui.saves.playthrough))


# Wiring --------------------------------------------------------------------------------------


def wire_turn(ui: GameUI, layout: Layout, queue_of: Queues) -> None:
    """Enter, Play and the example chips: send, then play."""
    stage, side = layout.stage, layout.side
    send = dict(
        fn=functools.partial(send_command, ui),
        inputs=[layout.player, stage.command],
        outputs=[layout.pending, stage.command, side.chat],
        show_progress="hidden",
        trigger_mode="once",
        concurrency_limit=LIGHT_CONCURRENCY,
        concurrency_id="send",
        **PRIVATE,
    )

    def then_play(sent: Any) -> None:
        sent.success(None, js=SHOW_STAGE_JS, queue=False, **PRIVATE)
        sent.failure(
            functools.partial(show_refusal, ui), inputs=[layout.player, stage.command],
            outputs=[side.chat, stage.command], queue=False, show_progress="hidden", **PRIVATE,
        )
        turn = sent.success(
            functools.partial(play_pending, ui),
            inputs=[layout.player, layout.pending, side.seed],
            outputs=[layout.player, *layout.screen, stage.back, stage.preview],
            trigger_mode="once",
            show_progress_on=[stage.clip],
            **queue_of.gpu,
            **PRIVATE,
        )
        turn.failure(
            functools.partial(restore_after_failure, ui),
            inputs=[layout.player, layout.pending, stage.command],
            outputs=[side.chat, stage.preview, stage.command],
            queue=False,
            **PRIVATE,
        )

    then_play(gr.on([stage.play.click, stage.command.submit], **send))
    for row in layout.suggestions.example_rows:
        filled = row.click(
            example_command, inputs=[row], outputs=[stage.command], queue=False,
            show_progress="hidden", **PRIVATE,
        )
        then_play(filled.success(**send))


def wire_chips(ui: GameUI, layout: Layout) -> None:
    for field_name, row in layout.suggestions.chip_rows:
        row.click(
            functools.partial(apply_chip, ui, field_name),
            inputs=[layout.player, layout.stage.command, row],
            outputs=[layout.stage.command],
            queue=False,
            show_progress="hidden",
            **PRIVATE,
        )


def wire_game(ui: GameUI, layout: Layout, queue_of: Queues, uploads: Container[str]) -> None:
    """Undo, new game, back, the character picker, save, load and download."""
    stage, side, player = layout.stage, layout.side, layout.player
    game = [player, *layout.screen, stage.command, stage.back]
    switched = [*game, stage.character, stage.avatar, *layout.suggestions.columns]
    stage.character.change(
        functools.partial(character_banner, ui), inputs=[stage.character],
        outputs=[layout.banner], queue=False, show_progress="hidden", **PRIVATE,
    )
    stage.undo.click(
        functools.partial(undo_turn, ui), inputs=[player], outputs=game, **queue_of.light,
        **PRIVATE,
    )
    stage.restart.click(
        functools.partial(restart_game, ui), inputs=[player], outputs=game, **queue_of.light,
        **PRIVATE,
    )
    stage.back.click(
        functools.partial(previous_game, ui), inputs=[player], outputs=switched,
        **queue_of.light, **PRIVATE,
    )
    stage.character.input(
        functools.partial(choose_character, ui), inputs=[player, stage.character],
        outputs=switched, trigger_mode="once", **queue_of.light, **PRIVATE,
    )
    side.load.upload(
        functools.partial(load_game, ui, uploads), inputs=[player, side.load], outputs=switched,
        **queue_of.files, **PRIVATE,
    )
    side.save.click(
        functools.partial(save_game, ui), inputs=[player], outputs=[side.downloads],
        **queue_of.light, **PRIVATE,
    )
    side.movie.click(
        functools.partial(playthrough, ui), inputs=[player], outputs=[side.downloads],
        **queue_of.files, **PRIVATE,
    )


def wire_reload(ui: GameUI, layout: Layout, demo: gr.Blocks) -> None:
    """Each page load comes back to the browser's game (`resume_game`)."""
    stage, player = layout.stage, layout.player
    demo.load(
        functools.partial(resume_game, ui),
        inputs=[player, layout.game_key],
        outputs=[
            player, *layout.screen, stage.command, stage.back, stage.character, stage.avatar,
            *layout.suggestions.columns, layout.game_key,
        ],
        show_progress="hidden",
        **queues(ui).light,
        **PRIVATE,
    )


def wire(ui: GameUI, layout: Layout, uploads: Container[str]) -> None:
    """Every browser event of `layout` (inside the Blocks being built); `uploads` are the paths
    of the files players uploaded (Gradio's record), the only ones a load reads."""
    queue_of = queues(ui)
    wire_turn(ui, layout, queue_of)
    wire_chips(ui, layout)
    wire_game(ui, layout, queue_of, uploads)
