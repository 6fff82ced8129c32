"""Everything `app.py` does before launching: settings, registry, engine, Blocks."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gradio as gr
from gradio.utils import get_upload_folder

from animegamer.characters.registry import RegistryError, load_registry
from animegamer.paths import PACKAGE_ROOT
from animegamer.serving.casting import create_registry_engine
from animegamer.serving.engine import EngineError
from animegamer.serving.memory import limit_malloc_arenas
from animegamer.serving.settings import Settings, SettingsError
from animegamer.ui.blocks import build_app
from animegamer.ui.layout import launch_options

logger = logging.getLogger(__name__)


class StartupError(RuntimeError):
    """The app cannot start (bad settings, an unreadable registry, no playable character);
    the message is one line for the person starting it."""


def app_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from the environment; clips go under Gradio's upload folder unless
    `ANIMEGAMER_OUTPUT_DIR` says otherwise (Gradio serves files from there)."""
    return Settings.from_env(
        environ, default_output_dir=Path(get_upload_folder()) / "animegamer"
    )


def check_output_dir(path: Path) -> Path:
    """Refuse an output folder the app cannot use: Gradio serves every file in it to players,
    so it must be writable and must not hold other files (the filesystem root, a home folder,
    the app's own code)."""
    resolved = path.expanduser().resolve()
    protected = {Path("/"), Path.home().resolve(), PACKAGE_ROOT.parent, Path.cwd().resolve()}
    for folder in protected:
        if resolved == folder or resolved in folder.parents:
            raise SettingsError(
                f"ANIMEGAMER_OUTPUT_DIR={path} cannot hold the game's files: the app serves "
                f"everything in it, and it contains {folder}. Choose an empty folder of its own, "
                "e.g. /tmp/animegamer."
            )
    try:
        resolved.mkdir(parents=True, exist_ok=True)
        probe = resolved / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise SettingsError(
            f"ANIMEGAMER_OUTPUT_DIR={path} cannot be written ({error.strerror or error})."
        ) from None
    return resolved


def create_app(environ: Mapping[str, str] | None = None) -> tuple[gr.Blocks, dict[str, Any]]:
    """The game's Blocks and the keyword arguments for its `launch()`."""
    limit_malloc_arenas()
    try:
        settings = app_settings(environ)
        settings = dataclasses.replace(settings, output_dir=check_output_dir(settings.output_dir))
        registry = load_registry(settings.registry_path)
        engine = create_registry_engine(settings, registry)
    except (SettingsError, RegistryError, EngineError) as error:
        raise StartupError(str(error)) from error
    for line in engine.casting_lines():
        logger.info("plays %s", line)
    engine.clips.claim()  # a new server holds no game: files an earlier one left go now
    return build_app(engine, registry, settings), launch_options(registry, settings)
