"""The Gradio Blocks of the game: layout, event wiring, style.

`build_app(engine, registry, settings)` returns the Blocks; the actions themselves live in
`animegamer.ui.callbacks` and this module only adapts them to components. Gradio 6 takes the
theme and CSS at `launch()`, so they come from `launch_options(registry, settings)`.
"""

from __future__ import annotations

import functools
import html
from pathlib import Path
from typing import Any, TypedDict

import gradio as gr

from animegamer.characters import Registry
from animegamer.game import FIELD_LABELS, INSTRUCTION_FIELDS, MAX_FIELD_CHARS
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
from animegamer.ui.examples import DEFAULT_EXAMPLES_DIR, load_playthroughs

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
FIELD_SCALES = {"character": 2, "adverb": 2, "motion": 3, "time": 2, "place": 3}


class _Concurrency(TypedDict):
    """The queue an event joins: its own limit, shared by the events with the same id."""

    concurrency_limit: int
    concurrency_id: str


HISTORY_WIDTHS: list[str | int] = [
    "5%", "22%", "6%", "8%", "7%", "12%", "7%", "6%", "11%", "9%", "7%"
]
TEXT_PLACEHOLDER = "Character: Qiqi; Motion: quickly fly on broomstick; Background: day sky."

CSS = """
.ag-title h1 { margin-bottom: 0; }
.ag-banner { border: 1px solid #f59e0b; background: #fffbeb; border-radius: 8px;
  padding: 4px 14px; color: #78350f; }
.ag-banner p { margin: 6px 0; color: #78350f; }
.ag-gauges { display: flex; flex-direction: column; gap: 12px; padding: 4px 2px; }
.ag-gauge-head { display: flex; align-items: baseline; gap: 10px; margin-bottom: 4px; }
.ag-gauge-label { font-weight: 600; flex: 1; }
.ag-gauge-value { font-variant-numeric: tabular-nums; font-weight: 700; font-size: 1.1em; }
.ag-gauge-value small { font-weight: 400; opacity: .6; }
.ag-change { font-size: .85em; padding: 1px 8px; border-radius: 999px; min-width: 3.2em;
  text-align: center; font-variant-numeric: tabular-nums; }
.ag-up { background: #dcfce7; color: #166534; }
.ag-down { background: #fee2e2; color: #991b1b; }
.ag-flat, .ag-none { background: #f1f5f9; color: #475569; }
.ag-track { position: relative; height: 16px; border-radius: 8px; overflow: hidden;
  background: linear-gradient(to right, #fee2e2 0 30%, #fef3c7 30% 70%, #dcfce7 70% 100%); }
.ag-fill { height: 100%; border-radius: 8px; transition: width .4s ease; }
.ag-fill.ag-low { background: #ef4444; }
.ag-fill.ag-mid { background: #f59e0b; }
.ag-fill.ag-high { background: #22c55e; }
.ag-status p { margin: 2px 0; }
#ag-chat video { max-height: 170px; width: auto; }
"""


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


def banner_markdown(engine: Engine) -> str:
    return f"⚠️ {html.escape(engine.notice or 'Preview mode: clips come from tiny models.')}"


def build_app(
    engine: Engine,
    registry: Registry,
    settings: Settings,
    *,
    examples_dir: Path = DEFAULT_EXAMPLES_DIR,
    run_turn: TurnRunner | None = None,
) -> gr.Blocks:
    """The game's Blocks for `engine` (real or preview) and the characters of `registry`."""
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
        gr.Markdown(
            "# AnimeGamer\nLive an anime character's life: tell them what to do, watch the "
            "clip, keep their stamina, social life and fun up.",
            elem_classes=["ag-title"],
        )
        if engine.kind == "preview":
            gr.Markdown(banner_markdown(engine), elem_classes=["ag-banner"], elem_id="ag-banner")

        with gr.Row(equal_height=False):
            with gr.Column(scale=6, min_width=360):
                chat = gr.Chatbot(
                    label="Your story",
                    height=430,
                    render_markdown=False,
                    sanitize_html=True,
                    allow_tags=False,
                    feedback_options=None,
                    buttons=["copy_all"],
                    placeholder="Your instructions and the game's answers appear here.",
                    elem_id="ag-chat",
                )
                with gr.Group():
                    with gr.Row(equal_height=True):
                        avatar = gr.Image(
                            value=str(first.avatar) if first.avatar else None,
                            show_label=False,
                            interactive=False,
                            height=92,
                            width=92,
                            container=False,
                            buttons=[],
                            scale=0,
                            min_width=92,
                            elem_id="ag-avatar",
                        )
                        character = gr.Dropdown(
                            choices=[(c.display_name, c.name) for c in registry.characters],
                            value=first.name,
                            label="Character",
                            info="Choosing a character starts a new game.",
                            scale=3,
                            elem_id="ag-character",
                        )
                    with gr.Row():
                        fields = [
                            gr.Textbox(
                                value=value,
                                label=FIELD_LABELS[name],
                                scale=FIELD_SCALES[name],
                                max_lines=1,
                                max_length=MAX_FIELD_CHARS * 4,
                                min_width=110,
                                elem_id=f"ag-field-{name}",
                            )
                            for name, value in zip(
                                INSTRUCTION_FIELDS, ui.default_fields(first.name), strict=True
                            )
                        ]
                    with gr.Row(equal_height=True):
                        text = gr.Textbox(
                            label="…or type the whole instruction (Enter fills the fields)",
                            placeholder=TEXT_PLACEHOLDER,
                            max_lines=2,
                            scale=5,
                            elem_id="ag-text",
                        )
                        fill = gr.Button("Fill fields", scale=1, min_width=110)
                with gr.Row():
                    play = gr.Button("Play turn", variant="primary", scale=2, elem_id="ag-play")
                    undo = gr.Button("Undo", scale=1)
                    restart = gr.Button("Restart", scale=1)
                status = gr.Markdown(start.screen.status, elem_classes=["ag-status"])
                with gr.Accordion("Seed, save, load and download", open=False):
                    with gr.Row(equal_height=True):
                        seed = gr.Textbox(
                            value="random", label="Seed (a number, or 'random')", max_lines=1,
                            scale=2,
                        )
                        save = gr.Button("Save game", scale=1)
                        load = gr.UploadButton(
                            "Load game", file_types=[".zip"], type="filepath", scale=1
                        )
                        movie = gr.Button("Download playthrough (mp4)", scale=1)
                    downloads = gr.File(label="Downloads", interactive=False, height=80)
                example_columns = []
                for c in registry.characters:
                    with gr.Column(visible=c.name == first.name) as column:
                        for playthrough in playthroughs.get(c.name, []):
                            gr.Examples(
                                examples=playthrough.rows(),
                                inputs=fields,
                                example_labels=playthrough.labels(),
                                label=f"Example playthrough: {playthrough.title}",
                                examples_per_page=8,
                            )
                    example_columns.append(column)

            with gr.Column(scale=5, min_width=340):
                clip = gr.Video(
                    label="Newest clip",
                    interactive=False,
                    autoplay=True,
                    loop=True,
                    height=300,
                    elem_id="ag-clip",
                )
                gauges = gr.HTML(start.screen.gauges, label="Gauges", elem_id="ag-gauges")
                gallery = gr.Gallery(
                    label="Recent clips of this game",
                    columns=4,
                    fit_columns=False,
                    height=230,
                    object_fit="contain",
                    allow_preview=True,
                    interactive=False,
                    elem_id="ag-gallery",
                )

        history = gr.Dataframe(
            value=start.screen.history,
            label="History",
            interactive=False,
            wrap=True,
            max_height=320,
            column_widths=HISTORY_WIDTHS,
            elem_id="ag-history",
        )
        with gr.Accordion("Game data (JSON, as API clients get it)", open=False):
            summary = gr.JSON(start.screen.summary, elem_id="ag-summary")

        screen = [summary, chat, clip, gallery, gauges, history, status]

        def shown(slot: GameSlot, update: Update) -> list[Any]:
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

        def on_undo(slot: GameSlot) -> list[Any]:
            return with_fields(slot, slot.run(ui.undo))

        def on_restart(slot: GameSlot) -> list[Any]:
            return with_fields(slot, slot.run(ui.restart))

        def on_character(slot: GameSlot, name: str) -> list[Any]:
            return switching(slot, slot.run(lambda current: ui.choose_character(current, name)))

        def on_load(slot: GameSlot, path: str | None) -> list[Any]:
            return switching(slot, slot.run(lambda current: ui.load(current, path)))

        def on_save(slot: GameSlot) -> str:
            return slot.read(ui.save)

        def on_playthrough(slot: GameSlot) -> str:
            return slot.read(ui.playthrough)

        def on_fill(instruction_text: str) -> list[Any]:
            return [*ui.fill_from_text(instruction_text), ""]

        game_light = _Concurrency(concurrency_limit=LIGHT_CONCURRENCY, concurrency_id="light")
        game_files = _Concurrency(concurrency_limit=FILE_CONCURRENCY, concurrency_id="files")
        play.click(
            on_play,
            inputs=[player, *fields, text, seed],
            outputs=[player, *screen, *fields, text],
            api_name="play",
            concurrency_limit=(
                ZERO_GPU_CONCURRENCY if engine.placement.zero_gpu else GPU_CONCURRENCY
            ),
            concurrency_id="gpu",
            trigger_mode="once",
            show_progress_on=[clip],
        )
        fill.click(on_fill, inputs=[text], outputs=[*fields, text], api_name="parse")
        text.submit(on_fill, inputs=[text], outputs=[*fields, text], api_visibility="private")
        undo.click(
            on_undo, inputs=[player], outputs=[player, *screen, *fields], api_name="undo",
            **game_light,
        )
        restart.click(
            on_restart, inputs=[player], outputs=[player, *screen, *fields], api_name="restart",
            **game_light,
        )
        switch_outputs = [player, *screen, *fields, character, avatar, *example_columns]
        character.input(
            on_character, inputs=[player, character], outputs=switch_outputs,
            api_name="character", **game_light,
        )
        load.upload(
            on_load, inputs=[player, load], outputs=switch_outputs, api_name="load", **game_files
        )
        save.click(on_save, inputs=[player], outputs=[downloads], api_name="save", **game_light)
        movie.click(
            on_playthrough, inputs=[player], outputs=[downloads], api_name="playthrough",
            **game_files,
        )
    demo.queue(max_size=QUEUE_MAX_SIZE, default_concurrency_limit=GPU_CONCURRENCY)
    return demo
