"""The app starts whatever one character does: an unplayable one is listed with the reason."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import free_port
from gradio_client import Client
from gradio_client.exceptions import AppError

from animegamer.characters.conversion.character import write_manifest
from animegamer.serving.loading import build_preview_directory
from animegamer.ui import create_app
from animegamer.ui.startup import StartupError

ROOT = Path(__file__).resolve().parent.parent


def _entry(name: str, folder: str) -> dict:
    return {
        "name": name,
        "defaults": {"character": name, "adverb": "slowly", "motion": "walk", "time": "day",
                     "place": "town"},
        "weights": {"converted": {"repo": folder}},
    }


def _environ(tmp_path: Path, *entries: dict) -> dict[str, str]:
    registry = tmp_path / "characters.yaml"
    registry.write_text(yaml.safe_dump({"format": 1, "characters": list(entries)}))
    return {
        "ANIMEGAMER_CHARACTERS": str(registry),
        "ANIMEGAMER_OUTPUT_DIR": str(tmp_path / "clips"),
        "ANIMEGAMER_NANO_DIR": str(tmp_path / "no-nano"),
        "ANIMEGAMER_NANO_STEPS": "1",
    }


def test_a_missing_first_character_leaves_the_app_playing_the_second(tmp_path):
    tux = build_preview_directory(tmp_path / "tux")
    write_manifest(tux, "Tux", {"dataset": {"path": "tux"}})
    environ = _environ(tmp_path, _entry("Gone", "./gone"), _entry("Tux", "./tux"))
    demo, launch_kwargs = create_app(environ)
    _, url, _ = demo.launch(server_name="127.0.0.1", server_port=free_port(),
                            prevent_thread_lock=True, quiet=True, **launch_kwargs)
    try:
        client = Client(url, verbose=False)
        with pytest.raises(AppError, match=r"Gone cannot be played here: .*gone does not exist"):
            client.predict("Gone", api_name="/character")
        summary = client.predict("Tux", "slowly", "walk", "day", "town", "", "3",
                                 api_name="/play")[0]
        assert (summary["character"], summary["turns"], summary["engine"]) == ("Tux", 1, "real")
    finally:
        demo.close()


def test_the_app_fails_in_one_line_when_no_character_can_be_played(tmp_path):
    environ = _environ(tmp_path, _entry("Gone", "./gone"))
    with pytest.raises(StartupError, match=r"^no character can be played here: Gone: unavai"):
        create_app(environ)
    run = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=environ | {"PATH": ""},
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1].startswith(
        "AnimeGamer cannot start: no character can be played here: Gone: unavailable (the local "
    )
