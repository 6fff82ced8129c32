"""The Gradio Blocks of the game: layout, event wiring, style.

`build_app(engine, registry, settings)` returns the Blocks; the actions themselves live in
`animegamer.ui.callbacks` and this module only adapts them to components. Gradio 6 takes the
theme and CSS at `launch()`, so they come from `launch_options(registry, settings)`.

The screen is a stage first: the newest clip, the gauges under it and one command line (Enter
plays) with suggestion chips, then the story and, folded, the history. In the browser a turn is
two events: `send` reads the command line into the five (hidden) instruction fields and shows a
pending bubble at once, then the named `play` endpoint plays those fields, as API clients call it.
"""

from __future__ import annotations

import functools
import html
import re
from pathlib import Path
from typing import Any, TypedDict

import gradio as gr

from animegamer.characters import Character, Registry
from animegamer.game import FIELD_LABELS, INSTRUCTION_FIELDS, MAX_FIELD_CHARS, make_instruction
from animegamer.instruction import format_command
from animegamer.savefile import MAX_FILE_BYTES
from animegamer.settings import Settings
from animegamer.ui.callbacks import (
    SESSION_TTL_S,
    Engine,
    GameSlot,
    GameUI,
    TurnRunner,
    Update,
    discard_game_files,
)
from animegamer.ui.examples import DEFAULT_EXAMPLES_DIR, Playthrough, load_playthroughs
from animegamer.ui.style import CSS
from animegamer.ui.views import banner_html
from animegamer.ui.vocabulary import PART_FIELDS, PARTS

CACHE_SWEEP = (3600, 24 * 3600)
QUEUE_MAX_SIZE = 32
GPU_CONCURRENCY = 1
ZERO_GPU_CONCURRENCY = 4
"""ZeroGPU runs each turn in its own worker on its own GPU slice: turns need not queue behind one
another there, while one dedicated GPU plays one turn at a time."""
LIGHT_CONCURRENCY = 8
"""Undo, restart, character, save: quick, but one may wait for its game's running turn."""
FILE_CONCURRENCY = 2
"""Load and playthrough read or write every clip of a game."""
CHIP_LABELS = {"adverbs": "How", "motions": "Do", "times": "When", "places": "Where"}
HISTORY_WIDTHS: list[str | int] = [
    56, 320, 90, 90, 90, 110, 80, 80, 110, 110, 80
]
INVALID = "ag-invalid"


class _Concurrency(TypedDict):
    """The queue an event joins: its own limit, shared by the events with the same id."""

    concurrency_limit: int
    concurrency_id: str


def launch_options(registry: Registry, settings: Settings) -> dict[str, Any]:
    """Keyword arguments for `Blocks.launch()`: style, the folders to serve (avatars and the
    games' files), and the upload limit (a saved game's)."""
    folders = {str(c.avatar.parent) for c in registry.characters if c.avatar}
    folders.add(str(settings.output_dir))
    return {
        "theme": gr.themes.Soft(primary_hue="rose", secondary_hue="sky"),
        "css": CSS,
        "allowed_paths": sorted(folders),
        "max_file_size": MAX_FILE_BYTES,
    }


SPACE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def header_html(engine: Engine, space_id: str | None = None) -> str:
    """The title, the engine's banner and, on Hugging Face Spaces, how to skip the queue."""
    duplicate = ""
    if space_id and SPACE_ID.match(space_id):
        link = html.escape(f"https://huggingface.co/spaces/{space_id}?duplicate=true", quote=True)
        duplicate = (
            '<div class="ag-duplicate">Long queue? <a href="' + link + '" target="_blank" '
            'rel="noopener">Duplicate this Space</a> to play on your own hardware.</div>'
        )
    return (
        '<div class="ag-header"><h1>AnimeGamer</h1><span class="ag-tagline">Tell your anime '
        "character what to do, watch the clip, keep their stamina, social life and fun up."
        f"</span></div>{banner_html(engine.kind, engine.notice)}{duplicate}"
    )


def example_commands(character: Character, playthroughs: list[Playthrough]) -> list[str]:
    """The registry's examples, then the example playthroughs' turns, as commands."""
    commands = [format_command(example) for example in character.examples]
    for playthrough in playthroughs:
        commands += [format_command(turn) for turn in playthrough.turns]
    return list(dict.fromkeys(commands))


def chips(words: list[str], label: str, elem_id: str) -> gr.Dataset:
    return gr.Dataset(
        components=["textbox"],
        samples=[[word] for word in words],
        label=label,
        samples_per_page=max(1, len(words)),
        layout="gallery",
        elem_id=elem_id,
        elem_classes=["ag-chip-row"],
    )


def build_app(
    engine: Engine,
    registry: Registry,
    settings: Settings,
    *,
    examples_dir: Path = DEFAULT_EXAMPLES_DIR,
    run_turn: TurnRunner | None = None,
) -> gr.Blocks:
    """The game's Blocks for `engine` (real, nano or preview) and the characters of `registry`."""
    ui = GameUI(engine, registry, window=settings.window, run_turn=run_turn)
    ui.tidy()
    playthroughs = load_playthroughs(examples_dir, registry)
    first = ui.default_character
    start = ui.start(None)

    with gr.Blocks(title="AnimeGamer", delete_cache=CACHE_SWEEP) as demo:
        player = gr.State(
            functools.partial(GameSlot, ui.root),
            time_to_live=SESSION_TTL_S,
            delete_callback=discard_game_files,
        )
        gr.HTML(header_html(engine, settings.space_id), elem_id="ag-top", padding=False)

        with gr.Row(equal_height=False, elem_id="ag-main"):
            with gr.Column(scale=3, min_width=320, elem_id="ag-stage"):
                clip = gr.Video(
                    label="Newest clip",
                    interactive=False,
                    autoplay=True,
                    loop=True,
                    height=340,
                    elem_id="ag-clip",
                )
                gauges = gr.HTML(start.screen.gauges, elem_id="ag-gauges", padding=False)
                with gr.Row(equal_height=True, elem_id="ag-command-row"):
                    command = gr.Textbox(
                        value=ui.default_command(start.player.session),
                        show_label=False,
                        placeholder="What next? e.g. quickly run, day town",
                        max_lines=1,
                        max_length=MAX_FIELD_CHARS * 6,
                        scale=5,
                        autofocus=True,
                        elem_id="ag-command",
                    )
                    play = gr.Button(
                        "Play turn", variant="primary", scale=1, min_width=110, elem_id="ag-play"
                    )
                with gr.Row(elem_id="ag-actions"):
                    undo = gr.Button("↶ Undo turn", size="sm", min_width=96, elem_id="ag-undo")
                    restart = gr.Button(
                        "New game", size="sm", min_width=96, elem_id="ag-restart"
                    )
                    back = gr.Button(
                        "Back to previous game", size="sm", visible=False, min_width=96,
                        elem_id="ag-back",
                    )
                status = gr.Markdown(start.screen.status, elem_classes=["ag-status"])

                suggestion_columns, chip_rows, example_rows = [], [], []
                for c in registry.characters:
                    words = ui.vocabulary(c.name)
                    with gr.Column(
                        visible=c.name == first.name, elem_classes=["ag-suggestions"]
                    ) as column:
                        for part in PARTS:
                            row = chips(words[part], CHIP_LABELS[part], f"ag-chips-{part}-{c.name}")
                            chip_rows.append((PART_FIELDS[part], row))
                        commands = example_commands(c, playthroughs.get(c.name, []))
                        if commands:
                            example_rows.append(
                                chips(commands, "Try (plays at once)", f"ag-examples-{c.name}")
                            )
                    suggestion_columns.append(column)

            with gr.Column(scale=2, min_width=320, elem_id="ag-side"):
                with gr.Row(equal_height=True, elem_id="ag-who"):
                    avatar = gr.Image(
                        value=str(first.avatar) if first.avatar else None,
                        show_label=False,
                        interactive=False,
                        height=56,
                        width=56,
                        container=False,
                        buttons=[],
                        scale=0,
                        min_width=56,
                        elem_id="ag-avatar",
                    )
                    character = gr.Dropdown(
                        choices=ui.character_choices(),
                        value=first.name,
                        show_label=False,
                        info="Switching starts a new game (you can go back).",
                        scale=3,
                        elem_id="ag-character",
                    )
                chat = gr.Chatbot(
                    label="Your story",
                    height=480,
                    render_markdown=False,
                    sanitize_html=True,
                    allow_tags=False,
                    feedback_options=None,
                    buttons=["copy_all"],
                    placeholder="Type what your character should do, or tap a suggestion, then "
                                "press Enter. The story of your game appears here.",
                    elem_id="ag-chat",
                )
                with gr.Accordion("History", open=False, elem_id="ag-history-box"):
                    history = gr.Dataframe(
                        value=start.screen.history,
                        show_label=False,
                        interactive=False,
                        wrap=False,
                        max_height=320,
                        column_widths=HISTORY_WIDTHS,
                        elem_id="ag-history",
                    )
                with gr.Accordion("Clips of this game", open=False):
                    gallery = gr.Gallery(
                        show_label=False,
                        columns=3,
                        height=230,
                        object_fit="contain",
                        allow_preview=True,
                        interactive=False,
                        elem_id="ag-gallery",
                    )
                with gr.Accordion("Seed, save, load and download", open=False):
                    with gr.Row(equal_height=True):
                        seed = gr.Textbox(
                            value="random", label="Seed (a number, or 'random')", max_lines=1,
                            scale=2, elem_id="ag-seed",
                        )
                        save = gr.Button("Save game", scale=1)
                        load = gr.UploadButton(
                            "Load game", file_types=[".zip"], type="filepath", scale=1
                        )
                        movie = gr.Button("Download playthrough (mp4)", scale=1)
                    downloads = gr.File(label="Downloads", interactive=False, height=80)
                with gr.Accordion("Game data (JSON, as API clients get it)", open=False):
                    summary = gr.JSON(start.screen.summary, elem_id="ag-summary")
                with gr.Group(visible=False):
                    fields = [
                        gr.Textbox(
                            value=value, label=FIELD_LABELS[name], elem_id=f"ag-field-{name}"
                        )
                        for name, value in zip(
                            INSTRUCTION_FIELDS, ui.default_fields(first.name), strict=True
                        )
                    ]
                    text = gr.Textbox(label="Instruction text", elem_id="ag-text")
                    fill = gr.Button("Fill fields")

        screen = [summary, chat, clip, gallery, gauges, history, status]

        def shown(slot: GameSlot, update: Update) -> list[Any]:
            if update.toast:
                gr.Info(html.escape(update.toast), title="Game")
            return [slot, *update.screen]

        def with_fields(slot: GameSlot, update: Update) -> list[Any]:
            return [*shown(slot, update), *(update.fields or ())]

        def switching(slot: GameSlot, update: Update) -> list[Any]:
            current = ui.character(update.player.session.character)
            return [
                *with_fields(slot, update),
                gr.update(value=current.name),
                str(current.avatar) if current.avatar else None,
                *[gr.update(visible=c.name == current.name) for c in registry.characters],
            ]

        def on_send(slot: GameSlot, command_text: str) -> list[Any]:
            sent = ui.send(slot.player, command_text)
            return [*sent.fields, gr.update(value=sent.command, elem_classes=[]), sent.chat]

        def on_play(
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
            values = dict(
                zip(
                    INSTRUCTION_FIELDS,
                    (instruction_character, adverb, motion, time, place),
                    strict=True,
                )
            )
            update = slot.run(
                lambda current: ui.play(current, values, instruction_text, seed_text, progress)
            )
            return [*with_fields(slot, update), ""]

        def on_turn_failed(slot: GameSlot) -> list[Any]:
            """The story without the pending bubble of a turn that did not happen."""
            return [ui.start(slot.player).screen.chat]

        def on_invalid() -> Any:
            return gr.update(elem_classes=[INVALID])

        def on_after(slot: GameSlot, *values: str) -> list[Any]:
            """The command line and the way back, after any action that changes the game."""
            try:
                line = gr.update(
                    value=format_command(
                        make_instruction(dict(zip(INSTRUCTION_FIELDS, values, strict=True)))
                    ),
                    elem_classes=[],
                )
            except ValueError:
                line = gr.update()
            previous = slot.player.previous_game if slot.player else None
            return [
                line,
                gr.update(
                    visible=previous is not None,
                    value=f"Back to previous game ({len(previous.turns)} turns)"
                    if previous else "Back to previous game",
                ),
            ]

        def on_chip(field: str, slot: GameSlot, command_text: str, sample: list[str]) -> Any:
            session = slot.player.session if slot.player else ui.new_player().session
            try:
                value = ui.with_word(session, command_text, field, sample[0])
            except gr.Error:  # a registry word the game refuses: the line stays as it was
                return gr.update()
            return gr.update(value=value, elem_classes=[])

        def on_example(sample: list[str]) -> str:
            return sample[0]

        def on_undo(slot: GameSlot) -> list[Any]:
            return with_fields(slot, slot.run(ui.undo))

        def on_restart(slot: GameSlot) -> list[Any]:
            return with_fields(slot, slot.run(ui.restart))

        def on_back(slot: GameSlot) -> list[Any]:
            return switching(slot, slot.run(ui.previous_game))

        def on_character(slot: GameSlot, name: str) -> list[Any]:
            return switching(slot, slot.run(lambda current: ui.choose_character(current, name)))

        def on_load(slot: GameSlot, path: str | None) -> list[Any]:
            return switching(slot, slot.run(lambda current: ui.load(current, path)))

        def on_save(slot: GameSlot) -> str:
            return slot.read(ui.save)

        def on_playthrough(slot: GameSlot) -> str:
            return slot.read(ui.playthrough)

        def on_fill(slot: GameSlot, instruction_text: str) -> list[Any]:
            return [*ui.parse(slot.player, instruction_text), ""]

        # Events with queue=False answer at once but cannot show an error toast: only those that
        # never raise use it.
        game_light = _Concurrency(concurrency_limit=LIGHT_CONCURRENCY, concurrency_id="light")
        game_files = _Concurrency(concurrency_limit=FILE_CONCURRENCY, concurrency_id="files")
        gpu = _Concurrency(
            concurrency_limit=ZERO_GPU_CONCURRENCY if engine.placement.zero_gpu
            else GPU_CONCURRENCY,
            concurrency_id="gpu",
        )
        after_outputs = [command, back]

        def then_after(event: Any) -> None:
            event.then(
                on_after, inputs=[player, *fields], outputs=after_outputs, queue=False,
                show_progress="hidden", api_visibility="private",
            )

        def play_turn(sent: Any, api_name: str | None) -> None:
            """Chain a turn after the send event `sent`: mark a refused command, play, restore
            the story when the turn fails."""
            sent.failure(on_invalid, outputs=[command], queue=False, api_visibility="private")
            visibility: dict[str, Any] = (
                {"api_name": api_name} if api_name else {"api_visibility": "private"}
            )
            turn = sent.success(
                on_play,
                inputs=[player, *fields, text, seed],
                outputs=[player, *screen, *fields, text],
                trigger_mode="once",
                show_progress_on=[clip],
                **gpu,
                **visibility,
            )
            turn.failure(
                on_turn_failed, inputs=[player], outputs=[chat], queue=False,
                api_visibility="private",
            )
            then_after(turn)

        send_options: dict[str, Any] = dict(
            fn=on_send,
            inputs=[player, command],
            outputs=[*fields, command, chat],
            show_progress="hidden",
            trigger_mode="once",
            api_visibility="private",
            concurrency_limit=LIGHT_CONCURRENCY,
            concurrency_id="send",
        )
        play_turn(gr.on([play.click, command.submit], **send_options), "play")
        for example_row in example_rows:
            filled = example_row.click(
                on_example, inputs=[example_row], outputs=[command], queue=False,
                show_progress="hidden", api_visibility="private",
            )
            play_turn(filled.success(**send_options), None)
        for field_name, row in chip_rows:
            row.click(
                functools.partial(on_chip, field_name),
                inputs=[player, command, row],
                outputs=[command],
                queue=False,
                show_progress="hidden",
                api_visibility="private",
            )

        fill.click(on_fill, inputs=[player, text], outputs=[*fields, text], api_name="parse")
        then_after(undo.click(
            on_undo, inputs=[player], outputs=[player, *screen, *fields], api_name="undo",
            **game_light,
        ))
        then_after(restart.click(
            on_restart, inputs=[player], outputs=[player, *screen, *fields], api_name="restart",
            **game_light,
        ))
        switch_outputs = [player, *screen, *fields, character, avatar, *suggestion_columns]
        then_after(back.click(
            on_back, inputs=[player], outputs=switch_outputs, api_name="previous_game",
            **game_light,
        ))
        then_after(character.input(
            on_character, inputs=[player, character], outputs=switch_outputs,
            api_name="character", **game_light,
        ))
        then_after(load.upload(
            on_load, inputs=[player, load], outputs=switch_outputs, api_name="load", **game_files
        ))
        save.click(on_save, inputs=[player], outputs=[downloads], api_name="save", **game_light)
        movie.click(
            on_playthrough, inputs=[player], outputs=[downloads], api_name="playthrough",
            **game_files,
        )
    demo.queue(max_size=QUEUE_MAX_SIZE, default_concurrency_limit=GPU_CONCURRENCY)
    return demo

