"""The `animegamer` command: pyproject installs it (`[project.scripts]`), it dispatches to each
package's command line, and a plain `play --help` writes nothing but its usage."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from animegamer.__main__ import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_pyproject_builds_with_setuptools_and_installs_the_animegamer_command():
    project = pyproject()
    assert project["build-system"]["build-backend"] == "setuptools.build_meta"
    module, _, name = project["project"]["scripts"]["animegamer"].partition(":")
    assert getattr(importlib.import_module(module), name) is main
    dynamic = project["tool"]["setuptools"]["dynamic"]
    assert dynamic["dependencies"] == {"file": ["requirements.txt"]}


@pytest.mark.parametrize("name", ["play", *sorted(COMMANDS)])
def test_help_writes_its_usage_and_nothing_on_stderr(name):
    done = subprocess.run([sys.executable, "-m", "animegamer", name, "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0
    assert done.stdout.startswith("usage: ")
    assert "--verbose" in done.stdout or name in ("data", "nano", "convert")  # per sub-command
    assert done.stderr == ""


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_is_its_package_command_line(name, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([name, "--help"])
    assert exit_.value.code == 0
    assert f"python -m animegamer.{name}" in capsys.readouterr().out


def test_an_unknown_command_is_refused_with_the_list(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["dance"])
    assert exit_.value.code == 2
    assert "invalid choice: 'dance'" in capsys.readouterr().err


def test_quiet_output_keeps_the_quantization_stack_silent_on_import():
    """Importing the engine imports diffusers, and with it torchao where it is installed (the
    test requirements install it): its import-time messages stay out of a plain command."""
    code = ("from animegamer.cli.output import configure_output\n"
            "configure_output(False)\n"
            "import animegamer.serving.engine\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
