"""Everything `app.py` does before launching: settings, registry, engine, Blocks."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gradio as gr
from gradio.utils import get_upload_folder

from animegamer.characters import load_registry
from animegamer.engine import create_registry_engine
from animegamer.settings import Settings
from animegamer.ui.layout import build_app, launch_options

logger = logging.getLogger(__name__)


def app_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from the environment; clips go under Gradio's temp dir unless
    `ANIMEGAMER_OUTPUT_DIR` says otherwise (Gradio serves files from there)."""
    env = os.environ if environ is None else environ
    settings = Settings.from_env(env)
    if not env.get("ANIMEGAMER_OUTPUT_DIR"):
        output_dir = Path(get_upload_folder()) / "animegamer"
        settings = dataclasses.replace(settings, output_dir=output_dir)
    return settings


def create_app(environ: Mapping[str, str] | None = None) -> tuple[gr.Blocks, dict[str, Any]]:
    """The game's Blocks and the keyword arguments for its `launch()`."""
    settings = app_settings(environ)
    registry = load_registry(settings.registry_path)
    engine = create_registry_engine(settings, registry)
    logger.info("engine: %s (%s)", engine.kind, engine.notice or "real models")
    return build_app(engine, registry, settings), launch_options(registry)
