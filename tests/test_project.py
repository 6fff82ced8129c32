"""The project as a Space: front matter, pinned requirements, the README's commands, settings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import animegamer
from animegamer.serving.settings import Settings, SettingsError

ROOT = Path(__file__).resolve().parents[1]


def front_matter() -> dict:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.match(r"^---\n(.*?)\n---\n", text, re.DOTALL)
    assert match, "README.md must start with the Space's YAML front matter"
    return yaml.safe_load(match[1])


def pins(name: str) -> dict[str, str]:
    lines = (ROOT / name).read_text().splitlines()
    return dict(line.split("==") for line in lines if line and not line.startswith("#"))


def test_front_matter_describes_a_gradio_space():
    meta = front_matter()
    assert meta["sdk"] == "gradio" and meta["app_file"] == "app.py"
    assert (ROOT / meta["app_file"]).is_file()
    assert meta["sdk_version"] == pins("requirements.txt")["gradio"]
    assert set(meta["models"]) >= {"TencentARC/AnimeGamer", "mistralai/Mistral-7B-Instruct-v0.1"}
    assert len(meta["short_description"]) <= 60
    assert meta["python_version"] == "3.11"


def test_every_requirement_is_pinned_and_torch_is_the_local_wheel():
    runtime, test = pins("requirements.txt"), pins("requirements-test.txt")
    assert runtime["torch"] == "2.13.0"
    assert all(re.fullmatch(r"\d+(\.\d+)+", version) for version in {**runtime, **test}.values())
    assert not set(runtime) & set(test)


def test_readme_gives_the_two_setup_commands_ci_runs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    app = ".venv/bin/pip install -r requirements.txt && .venv/bin/python app.py"
    tests = "-r requirements-test.txt && .venv/bin/python -m pytest"
    assert app in readme and tests in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.rstrip().endswith(".venv/bin/python -m pytest")
    assert "set -euo pipefail" in ci


def test_package_version_matches_the_project():
    project = (ROOT / "pyproject.toml").read_text()
    assert f'version = "{animegamer.__version__}"' in project


def test_settings_come_from_the_environment():
    settings = Settings.from_env(
        {"ANIMEGAMER_ENGINE": " Preview ", "ANIMEGAMER_WINDOW": "3", "ANIMEGAMER_STEPS": "30",
         "ANIMEGAMER_LOW_VRAM": "on", "ANIMEGAMER_OUTPUT_DIR": "/tmp/clips"}
    )
    assert (settings.engine, settings.window, settings.steps, settings.low_vram) == (
        "preview", 3, 30, "on")
    assert settings.output_dir == Path("/tmp/clips")
    assert Settings.from_env({}) == Settings()
    nano = Settings.from_env({"ANIMEGAMER_ENGINE": "nano", "ANIMEGAMER_NANO_STEPS": "16",
                              "ANIMEGAMER_NANO_DIR": "/tmp/nano"})
    assert (nano.engine, nano.nano_steps, nano.nano_dir) == ("nano", 16, Path("/tmp/nano"))
    guided = Settings.from_env({"ANIMEGAMER_NANO_GUIDANCE": "2.5"})
    assert (guided.nano_guidance, guided.guidance_scale) == (2.5, 6.0)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("ANIMEGAMER_ENGINE", "gpu", "ANIMEGAMER_ENGINE must be one of"),
        ("ANIMEGAMER_WINDOW", "6", "ANIMEGAMER_WINDOW must be in 1..5"),
        ("ANIMEGAMER_WINDOW", "two", "ANIMEGAMER_WINDOW must be an integer"),
        ("ANIMEGAMER_STEPS", "0", "ANIMEGAMER_STEPS must be in 1..200"),
        ("ANIMEGAMER_NANO_STEPS", "201", "ANIMEGAMER_NANO_STEPS must be in 1..200"),
        ("ANIMEGAMER_GUIDANCE", "x", "ANIMEGAMER_GUIDANCE must be a number"),
        ("ANIMEGAMER_NANO_GUIDANCE", "0.5", "ANIMEGAMER_NANO_GUIDANCE must be in 1..20"),
        ("ANIMEGAMER_LOW_VRAM", "maybe", "ANIMEGAMER_LOW_VRAM must be one of"),
    ],
)
def test_bad_settings_name_the_variable(name, value, message):
    with pytest.raises(SettingsError, match=message):
        Settings.from_env({name: value})
