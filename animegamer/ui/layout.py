"""The Gradio Blocks of the game: the components, built by small named builders.

`build_layout` builds the components (`stage`, `suggestions` and `side`) into a `Layout`, which
`animegamer.ui.events` (the browser's events) and `animegamer.ui.api` (the named endpoints) wire
in `animegamer.ui.blocks.build_app`. Gradio 6 takes the theme and CSS at `launch()`, so they
come from `launch_options(registry, settings)`.

The screen is a stage first: who is playing, the newest clip, the gauges under it and one
command line (Enter plays), then the suggestion chips (one field shown, the others one tap
away), then the story and, folded, the history. On a phone the two columns stack in that order.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from animegamer.characters.registry import Character, Registry
from animegamer.command.parser import format_command
from animegamer.game.rules import MAX_INSTRUCTION_CHARS
from animegamer.game.save_reading import MAX_FILE_BYTES
from animegamer.serving.settings import Settings
from animegamer.ui.callbacks import GameUI
from animegamer.ui.chips import PART_FIELDS, known_words
from animegamer.ui.contracts import Engine
from animegamer.ui.examples import Playthrough, load_playthroughs
from animegamer.ui.state import SESSION_TTL_S, GameSlot, Update, discard_game_files
from animegamer.ui.style import CLIP_HEIGHT, CSS
from animegamer.ui.views import banner_html

CHIP_TABS = (("motions", "Do"), ("adverbs", "How"), ("times", "When"), ("places", "Where"))
"""The suggestion tabs, the most useful first: on a phone only the first row shows."""
CHIP_HINTS = {
    "motions": "What to do (replaces the motion)",
    "adverbs": "How (replaces the adverb)",
    "times": "When (replaces the time of day)",
    "places": "Where (replaces the place)",
}
HISTORY_WIDTHS: list[str | int] = [
    56, 80, 70, 120, 90, 80, 130, 110, 320, 110, 80
]
COMMAND_PLACEHOLDER = "What next? e.g. quickly run, day town"
GAME_KEY_STORAGE = "animegamer-game"
"""Where the browser keeps its game's key (local storage)."""
GAME_KEY_CIPHER = "animegamer-game-key"
"""`gr.BrowserState` encrypts what it stores with a secret it sends to the browser anyway, so
this protects nothing; it is fixed so that a key stored before a server restart still reads
after it, and the game can say that it is gone (`animegamer.ui.shelf`)."""


@dataclass(frozen=True)
class Stage:
    """The left column's controls: who plays, the clip and its live preview, the gauges, the
    command line, the game's buttons and the status line."""

    avatar: gr.Image
    character: gr.Dropdown
    preview: gr.HTML
    clip: gr.Video
    gauges: gr.HTML
    command: gr.Textbox
    play: gr.Button
    undo: gr.Button
    restart: gr.Button
    back: gr.Button
    status: gr.Markdown


@dataclass(frozen=True)
class Suggestions:
    """One column of chips per character (only the playing character's is visible)."""

    columns: list[gr.Column]
    chip_rows: list[tuple[str, gr.Dataset]]
    """(instruction field, chips) pairs: a tap puts the word in that part of the command."""
    example_rows: list[gr.Dataset]


@dataclass(frozen=True)
class Side:
    """The right column: the story, the history, the clips, files and the game data."""

    chat: gr.Chatbot
    history: gr.Dataframe
    gallery: gr.Gallery
    seed: gr.Textbox
    save: gr.Button
    load: gr.UploadButton
    movie: gr.Button
    downloads: gr.File
    summary: gr.JSON


@dataclass(frozen=True)
class Layout:
    """Every component the events and the API read or write."""

    player: gr.State
    pending: gr.State
    game_key: gr.BrowserState
    """The key of this browser's game on the server (`animegamer.ui.shelf`), never the game."""
    stage: Stage
    suggestions: Suggestions
    side: Side
    banner: gr.HTML
    """What plays the chosen character (`views.banner_html`), under the title."""

    @property
    def screen(self) -> list[Any]:
        """The components of `callbacks.Screen`, in its order."""
        stage, side = self.stage, self.side
        return [
            side.summary, side.chat, stage.clip, side.gallery, stage.gauges, side.history,
            stage.status,
        ]


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


def header_html(space_id: str | None = None) -> str:
    """The title and, on Hugging Face Spaces, how to skip the queue."""
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
        f"</span></div>{duplicate}"
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


def build_who(ui: GameUI, first: Character) -> tuple[gr.Image, gr.Dropdown]:
    """The playing character: avatar and picker, at the top of the stage."""
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
    return avatar, character


def counted(text: str | None) -> str:
    """The command line's counter: `12 / 600 characters`."""
    return f"{len(text or '')} / {MAX_INSTRUCTION_CHARS} characters"


def build_counter(command: gr.Textbox) -> gr.Markdown:
    """A counter under the command line, updated in the browser as the player types (Gradio's
    Textbox has none): the browser stops at the limit, and the counter shows it was reached."""
    counter = gr.Markdown(
        counted(command.value), elem_id="ag-command-counter", elem_classes=["ag-counter"]
    )
    command.change(
        None, inputs=command, outputs=counter, queue=False,
        js=f"(text) => `${{(text || '').length}} / {MAX_INSTRUCTION_CHARS} characters`",
    )
    return counter


def build_stage(ui: GameUI, start: Update) -> Stage:
    """The stage: who, the clip with its live preview over it, gauges, command line, buttons."""
    avatar, character = build_who(ui, ui.default_character)
    preview = gr.HTML("", elem_id="ag-preview", padding=False)
    clip = gr.Video(
        label="Newest clip",
        interactive=False,
        autoplay=True,
        loop=True,
        height=CLIP_HEIGHT,
        elem_id="ag-clip",
    )
    gauges = gr.HTML(start.screen.gauges, elem_id="ag-gauges", padding=False)
    with gr.Row(equal_height=True, elem_id="ag-command-row"):
        command = gr.Textbox(
            value=ui.default_command(start.player.session),
            show_label=False,
            placeholder=COMMAND_PLACEHOLDER,
            max_lines=1,
            max_length=MAX_INSTRUCTION_CHARS,
            scale=5,
            autofocus=True,
            elem_id="ag-command",
        )
        play = gr.Button("Play turn", variant="primary", scale=1, min_width=110, elem_id="ag-play")
    build_counter(command)
    with gr.Row(elem_id="ag-actions"):
        undo = gr.Button("↶ Undo turn", size="sm", min_width=96, elem_id="ag-undo")
        restart = gr.Button("New game", size="sm", min_width=96, elem_id="ag-restart")
        back = gr.Button(
            "Back to previous game", size="sm", visible=False, min_width=96, elem_id="ag-back"
        )
    status = gr.Markdown(start.screen.status, elem_classes=["ag-status"], elem_id="ag-status")
    return Stage(
        avatar, character, preview, clip, gauges, command, play, undo, restart, back, status
    )


def build_suggestions(
    ui: GameUI, playthroughs: dict[str, list[Playthrough]]
) -> Suggestions:
    """Per character, a tab per part of the command (the motion first) and the examples."""
    columns, chip_rows, example_rows = [], [], []
    first = ui.default_character.name
    for character in ui.registry.characters:
        words = ui.vocabulary(character.name)
        name = character.name
        with (
            gr.Column(visible=name == first, elem_classes=["ag-suggestions"]) as column,
            gr.Tabs(elem_classes=["ag-chip-tabs"]),
        ):
            for part, title in CHIP_TABS:
                with gr.Tab(title, elem_id=f"ag-tab-{part}-{name}"):
                    row = chips(words[part], CHIP_HINTS[part], f"ag-chips-{part}-{name}")
                    chip_rows.append((PART_FIELDS[part], row))
            known = known_words(character, ui.engine, dict(CHIP_TABS))
            if known is not None:
                with gr.Tab("All words", elem_id=f"ag-tab-words-{name}"):
                    gr.Markdown(known, elem_id=f"ag-known-words-{name}")
            commands = example_commands(character, playthroughs.get(name, []))
            if commands:
                with gr.Tab("Try", elem_id=f"ag-tab-examples-{name}"):
                    example_rows.append(
                        chips(commands, "Examples (play at once)", f"ag-examples-{name}")
                    )
        columns.append(column)
    return Suggestions(columns, chip_rows, example_rows)


def build_files() -> tuple[gr.Textbox, gr.Button, gr.UploadButton, gr.Button, gr.File]:
    """Seed, save, load and download, folded."""
    with gr.Accordion("Seed, save, load and download", open=False):
        with gr.Row(equal_height=True):
            seed = gr.Textbox(
                value="random", label="Seed (a number, or 'random')", max_lines=1,
                scale=2, elem_id="ag-seed",
            )
            save = gr.Button("Save game", scale=1, elem_id="ag-save")
            load = gr.UploadButton(
                "Load game", file_types=[".zip"], type="filepath", scale=1, elem_id="ag-load"
            )
            movie = gr.Button("Download playthrough (mp4)", scale=1, elem_id="ag-movie")
        downloads = gr.File(label="Downloads", interactive=False, height=80)
    return seed, save, load, movie, downloads


def build_side(start: Update) -> Side:
    """The story, then the folded history, clips, files and game data."""
    gr.HTML('<h2 class="ag-story-title">Your story</h2>', elem_id="ag-story-title",
            padding=False)
    chat = gr.Chatbot(
        show_label=False,
        height=480,
        render_markdown=False,
        sanitize_html=True,
        allow_tags=False,
        feedback_options=None,
        buttons=[],
        placeholder="Type what your character should do, or tap a suggestion, then press "
                    "Enter. The story of your game appears here.",
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
    seed, save, load, movie, downloads = build_files()
    with gr.Accordion("Game data (JSON, as API clients get it)", open=False):
        summary = gr.JSON(start.screen.summary, elem_id="ag-summary")
    return Side(chat, history, gallery, seed, save, load, movie, downloads, summary)


def build_layout(ui: GameUI, engine: Engine, settings: Settings, examples_dir: Path) -> Layout:
    """Every component, in page order (inside the Blocks being built)."""
    start = ui.start(None)
    player = gr.State(
        GameSlot(ui.root),  # deep-copied into an empty slot of its own for each session
        time_to_live=SESSION_TTL_S,
        delete_callback=discard_game_files,
    )
    pending = gr.State(None)
    game_key = gr.BrowserState("", storage_key=GAME_KEY_STORAGE, secret=GAME_KEY_CIPHER)
    gr.HTML(header_html(settings.space_id), elem_id="ag-top", padding=False)
    first = engine.casting(ui.default_character.name)
    banner = gr.HTML(banner_html(first, engine.notice), elem_id="ag-engine", padding=False)
    with gr.Row(equal_height=False, elem_id="ag-main"):
        with gr.Column(scale=3, min_width=320, elem_id="ag-stage"):
            stage = build_stage(ui, start)
            suggestions = build_suggestions(ui, load_playthroughs(examples_dir, ui.registry))
        with gr.Column(scale=2, min_width=320, elem_id="ag-side"):
            side = build_side(start)
    return Layout(player, pending, game_key, stage, suggestions, side, banner)

