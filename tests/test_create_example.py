"""README's worked example ("Make your own character"), command by command, read from README:
the example video set, `create` on it with the CPU recipe, then three turns of the character it
made, played with its own weights on the CPU without naming an engine.

Two changes to the commands as written: `--register` names a copy of the registry (the test must
not edit `assets/characters.yaml`), and `--recipe` a quick version of the default (`quick_recipe`:
its path at a few dozen steps, not its minutes)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from animegamer.__main__ import main as play_main
from animegamer.create.__main__ import main as create_main

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def quick_recipe(folder: Path) -> Path:
    """recipes/cpu.yaml (the Nano world's VAE, its token grid, the creator's scenes) on a
    smaller decoder at a few dozen steps, its VAE path made absolute (the test runs elsewhere)."""
    recipe = yaml.safe_load((REPO / "recipes" / "cpu.yaml").read_text())
    tiny = recipe["decoder"]["init"]["tiny"]
    tiny.update(representation_dim=64, num_layers=2, vae=str(REPO / tiny["vae"]))
    recipe["decoder"].update(warmup_steps=5, joint_steps=20, batch_size=4)
    recipe["game_state"].update(steps=25, batch_size=1, checkpoint_every=10)
    recipe["game_state"]["init"] = {"tiny": {"seed": 0}}
    recipe["adapt"].update(steps=4, batch_size=2)
    recipe.update(checkpoint_every=10, log_every=1)
    path = folder / "quick.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def worked_example() -> str:
    """README's bash block that makes the example footage, without its comment lines."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S)
    block = next(b for b in blocks if "animegamer.create example" in b)
    return "\n".join(line for line in block.splitlines() if not line.startswith("#"))


def commands(text: str) -> list[list[str]]:
    joined = text.replace("\\\n", " ")
    return [shlex.split(line) for line in joined.splitlines() if line.strip()]


@pytest.fixture
def workspace(tmp_path, monkeypatch) -> Path:
    shutil.copy("assets/characters.yaml", tmp_path / "characters.yaml")
    shutil.copytree("assets/avatars", tmp_path / "avatars")
    monkeypatch.setenv("ANIMEGAMER_CHARACTERS", str(tmp_path / "characters.yaml"))
    monkeypatch.setenv("ANIMEGAMER_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_worked_example_makes_a_character_that_plays(workspace, capsys):
    example, make, play = commands(worked_example())
    assert example[:3] == make[:3] == [".venv/bin/python", "-m", "animegamer.create"]
    assert create_main(example[3:]) == 0
    assert make[-1] == "--register"
    quick = quick_recipe(workspace)
    assert create_main([*make[3:], str(workspace / "characters.yaml"), "--recipe", str(quick)]) == 0
    captured = capsys.readouterr()
    printed = captured.out
    assert "  decoder 25 steps, game state 25 steps, adapt 4 steps; each phase reports" in printed
    for phase, steps in (("decoder", 25), ("game state", 25), ("adapt", 4)):
        assert re.search(rf"^{phase}: {steps}/{steps} steps in \d+ s$", printed, re.M)
    assert re.search(r"^clips: 3/3 videos in \d+ s$", printed, re.M)
    assert "\r" not in printed + captured.err  # plain lines in a log, not a terminal's bar
    assert "20 kept, 20 annotated" in printed
    assert "20 shots answered, 0 answers matched no shot, 0 shots without one" in printed
    last = shlex.split(printed.strip().splitlines()[-1])
    registry = f"ANIMEGAMER_CHARACTERS={workspace / 'characters.yaml'}"
    assert last[:4] == ["cd", str(README.parent), "&&", registry]
    assert last[4:10] == [sys.executable, "-m", "animegamer", "play", "--character", "Kiki"]

    report = json.loads(Path("runs/kiki/dataset/report.json").read_text())
    assert sum(len(cuts) for cuts in report["videos"]["cuts"].values()) == 17
    registry = (workspace / "characters.yaml").read_text()
    assert "repo: ./runs/kiki/run/character" in registry
    scenes = json.loads(Path("runs/kiki/run/character/scenes/index.json").read_text())
    assert "day|cliff" in scenes  # the clips are drawn on the footage's own backgrounds
    manifest = json.loads(Path("runs/kiki/run/character/animegamer.json").read_text())
    assert manifest["guidance_scale"] == 1.0  # the recipe's play_guidance, which play takes

    assert play[:4] == [".venv/bin/python", "-m", "animegamer", "play"]
    assert last[-3:] == play[-3:]  # the README's turns are the ones create prints
    assert play_main([*play[3:], "--steps", "2"]) == 0
    played = capsys.readouterr().out
    assert played.count("Kiki: ") == 1 and "(trained, CPU)" in played
    assert played.count("\nturn ") + played.startswith("turn ") == 3
    assert len(list(Path("runs/kiki/play").rglob("*.mp4"))) == 3
