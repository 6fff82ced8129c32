"""The game's Blocks: the components (`layout`) with the browser's events (`events`) and the
named API endpoints (`api`) wired to them. Above all three, so that each of them imports only
what it uses."""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from animegamer.characters.registry import Registry
from animegamer.serving.batching import batch_settings
from animegamer.serving.settings import Settings
from animegamer.ui import api, events
from animegamer.ui.callbacks import GameUI
from animegamer.ui.contracts import Engine, TurnRunner
from animegamer.ui.disk import DiskBudget
from animegamer.ui.examples import DEFAULT_EXAMPLES_DIR
from animegamer.ui.layout import build_layout

CACHE_SWEEP = (3600, 24 * 3600)
"""Gradio's cache sweep: every hour, files older than a day."""
QUEUE_MAX_SIZE = 32


def build_app(
    engine: Engine,
    registry: Registry,
    settings: Settings,
    *,
    examples_dir: Path = DEFAULT_EXAMPLES_DIR,
    run_turn: TurnRunner | None = None,
) -> gr.Blocks:
    """The game's Blocks for `engine` (real, nano or preview) and the characters of `registry`."""
    ui = GameUI(
        engine, registry, window=settings.window, run_turn=run_turn,
        disk=DiskBudget.of(settings), batching=batch_settings(settings, engine.placement),
    )
    ui.tidy()
    with gr.Blocks(title="AnimeGamer", delete_cache=CACHE_SWEEP) as demo:
        layout = build_layout(ui, engine, settings, examples_dir)
        events.wire(ui, layout, demo.upload_file_set)
        events.wire_reload(ui, layout, demo)
        api.expose(ui, layout, demo.upload_file_set)
    demo.queue(max_size=QUEUE_MAX_SIZE, default_concurrency_limit=events.GPU_CONCURRENCY)
    return demo
