"""`accelerate launch` with 2 CPU processes (gloo) trains phase b as one process does.

Phase b is exact to compare: without LoRA dropout a step's loss has no randomness, and a batch of
2 windows is one window per process (DDP averages the gradients) or 2 accumulated micro-steps in
one process (accelerate averages them): the same gradient, up to float rounding. (Phases a and c
draw each process's noise from its own generator, so they agree in distribution only.)
About 45–65 s on 2 busy cores, most of it three processes importing torch; set
ANIMEGAMER_SKIP_DISTRIBUTED=1 to skip it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from tiny_dataset import write_tiny_dataset

from animegamer.data.dataset import read_rows
from animegamer.models.shot_encoder import AnimeGamerShotEncoder
from animegamer.train.__main__ import main
from animegamer.train.decoder_samples import read_features
from animegamer.train.loop import losses_path, read_losses

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.skipif(os.environ.get("ANIMEGAMER_SKIP_DISTRIBUTED") == "1",
                    reason="ANIMEGAMER_SKIP_DISTRIBUTED=1")
def test_two_gloo_processes_agree_with_one(tmp_path: Path) -> None:
    dataset = write_tiny_dataset(tmp_path / "dataset", shots=3)
    text, image = read_features(dataset, read_rows(dataset)["train"][0])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        encoder = AnimeGamerShotEncoder(text.shape[-1], image.shape[-1], width=64)
    recipe = yaml.safe_load((REPO / "recipes" / "tiny-cpu.yaml").read_text())
    recipe["game_state"].update(steps=3, batch_size=2, lora_dropout=0.0, checkpoint_every=3)
    config = tmp_path / "recipe.yaml"
    config.write_text(yaml.safe_dump(recipe))
    runs = {name: tmp_path / name for name in ("one", "two")}
    for out in runs.values():
        encoder.save_pretrained(out / "decoder" / "shot_encoder")
    phase = ["game-state", "--dataset", str(dataset), "--config", str(config), "--out"]

    # `--multi_gpu` is accelerate's torchrun launcher; without CUDA the CLI joins the processes
    # over gloo (`launched_without_cuda`). `--cpu --num_processes 2` starts one process only.
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
              "--num_processes", "2",
              "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
              "--main_process_port", str(free_port()), "-m", "animegamer.train",
              *phase, str(runs["two"])]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(launch, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("game-state: wrote") == 1  # one main process
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main([*phase, str(runs["one"])]) == 0
    finally:
        torch.set_num_threads(threads)

    checkpoint = runs["two"] / "checkpoints" / "game_state" / "step-00000003"
    assert sorted(p.name for p in checkpoint.glob("random_states_*")) == [
        "random_states_0.pkl", "random_states_1.pkl"]
    one, two = (read_losses(losses_path(out, "game_state")) for out in runs.values())
    assert [r["step"] for r in two] == [1, 2, 3]
    for a, b in zip(one, two, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
    assert one[-1]["loss"] < one[0]["loss"]
    files = sorted(p.relative_to(runs["one"]) for p in (runs["one"] / "game_state").rglob(
        "*.safetensors"))
    assert len(files) >= 2  # the language model's weights and the resamplers
    for name in files:
        expected, got = load_file(runs["one"] / name), load_file(runs["two"] / name)
        assert expected.keys() == got.keys()
        for key, value in expected.items():
            torch.testing.assert_close(got[key], value, rtol=1e-4, atol=1e-5, msg=f"{name} {key}")
