"""Phase b under `accelerate launch` with 2 CPU processes (gloo) trains as one process does: DDP,
and FSDP and DeepSpeed ZeRO-3 (the shipped configs) stopped, resumed from their sharded
checkpoints and exported from the gathered shards.

Phase b is exact to compare: without LoRA dropout a step's loss has no randomness, and a batch of
2 windows is one window per process (DDP averages the gradients, FSDP reduce-scatters their mean)
or 2 accumulated micro-steps in one process (accelerate averages them): the same gradient, up to
float rounding. (Phases a and c draw each process's noise from its own generator, so they agree
in distribution only; they refuse FSDP and ZeRO-3.)
The DDP test takes about 45–65 s on 2 busy cores, most of it three processes importing torch;
set ANIMEGAMER_SKIP_DISTRIBUTED=1 to skip them all. The sharded tests (two launches each, about
90 s) are marked `slow`: `pytest -m slow` runs them. The last tests, without processes: what the
phases take from an FSDP or DeepSpeed Accelerator.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import yaml
from accelerate.utils import DistributedType
from conftest import free_port
from safetensors.torch import load_file
from tiny_dataset import write_tiny_dataset

from animegamer.data.dataset import read_rows
from animegamer.models.shot_encoder import AnimeGamerShotEncoder
from animegamer.train.__main__ import main
from animegamer.train.decoder_phase import TrainError, setup_phase
from animegamer.train.decoder_samples import read_features
from animegamer.train.loop import (
    CHECKPOINT_STATE,
    checkpoint_dir,
    configure_deepspeed,
    losses_path,
    read_losses,
)
from animegamer.train.recipe import load_recipe

REPO = Path(__file__).resolve().parents[1]
STEPS = 3
LR = 1e-3

pytestmark = pytest.mark.skipif(os.environ.get("ANIMEGAMER_SKIP_DISTRIBUTED") == "1",
                                reason="ANIMEGAMER_SKIP_DISTRIBUTED=1")


@dataclass(frozen=True)
class PhaseB:
    """Phase b's command line (add `--out`), and a run's folder with phase a's shot encoder
    (`out`)."""

    command: list[str]
    root: Path
    encoder: AnimeGamerShotEncoder

    def out(self, name: str) -> Path:
        folder = self.root / name
        self.encoder.save_pretrained(folder / "decoder" / "shot_encoder")
        return folder


@pytest.fixture(scope="module")
def phase_b(tmp_path_factory: pytest.TempPathFactory) -> tuple[PhaseB, Path]:
    """Phase b's setting, and its run in this process (one torch thread, as each launched
    process has)."""
    root = tmp_path_factory.mktemp("phase-b")
    dataset = write_tiny_dataset(root / "dataset", shots=3)
    text, image = read_features(dataset, read_rows(dataset)["train"][0])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        encoder = AnimeGamerShotEncoder(text.shape[-1], image.shape[-1], width=64)
    recipe = yaml.safe_load((REPO / "recipes" / "tiny-cpu.yaml").read_text())
    recipe["game_state"].update(steps=STEPS, lr=LR, batch_size=2, lora_dropout=0.0,
                                checkpoint_every=3)
    config = root / "recipe.yaml"
    config.write_text(yaml.safe_dump(recipe))
    setting = PhaseB(["game-state", "--dataset", str(dataset), "--config", str(config)], root,
                     encoder)
    one = setting.out("one")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main([*setting.command, "--out", str(one)]) == 0
    finally:
        torch.set_num_threads(threads)
    return setting, one


def launch(options: list[str], script: list[str]) -> subprocess.CompletedProcess[str]:
    """`accelerate launch` of 2 processes without CUDA (`launched_without_cuda`: gloo), one torch
    thread each."""
    command = [sys.executable, "-m", "accelerate.commands.launch", *options,
               "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
               "--dynamo_backend", "no", "--main_process_port", str(free_port()), *script]
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def assert_same_losses(one: Path, two: Path) -> None:
    expected, got = (read_losses(losses_path(out, "game_state")) for out in (one, two))
    assert [r["step"] for r in got] == list(range(1, STEPS + 1))
    for a, b in zip(expected, got, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
    assert expected[-1]["loss"] < expected[0]["loss"]


def assert_same_model(one: Path, two: Path, momentum_moved: str | None = None) -> None:
    """The same files in both game_state folders: equal bytes but for the weights, which agree
    to float rounding (those named `momentum_moved...` to within STEPS steps of the learning
    rate)."""
    files = sorted(p.relative_to(one) for p in (one / "game_state").rglob("*") if p.is_file())
    assert files == sorted(
        p.relative_to(two) for p in (two / "game_state").rglob("*") if p.is_file())
    weights = [name for name in files if name.suffix == ".safetensors"]
    assert len(weights) >= 2  # the language model's weights and the resamplers
    for name in files:
        if name.suffix != ".safetensors":
            assert (two / name).read_bytes() == (one / name).read_bytes(), name
            continue
        expected, got = load_file(one / name), load_file(two / name)
        assert expected.keys() == got.keys()
        for key, value in expected.items():
            moved = momentum_moved is not None and key.startswith(momentum_moved)
            atol = STEPS * LR if moved else 1e-5
            torch.testing.assert_close(got[key], value, rtol=1e-4, atol=atol, msg=f"{name} {key}")


def test_two_gloo_processes_agree_with_one(phase_b: tuple[PhaseB, Path]) -> None:
    setting, one = phase_b
    two = setting.out("ddp")
    # `--multi_gpu` is accelerate's torchrun launcher; without CUDA the CLI joins the processes
    # over gloo (`launched_without_cuda`). `--cpu --num_processes 2` starts one process only.
    done = launch(["--multi_gpu"], ["-m", "animegamer.train", *setting.command, "--out", str(two)])
    assert done.stdout.count("game-state: wrote") == 1  # one main process
    checkpoint = checkpoint_dir(two, "game_state", STEPS)
    assert sorted(p.name for p in checkpoint.glob("random_states_*")) == [
        "random_states_0.pkl", "random_states_1.pkl"]
    assert_same_losses(one, two)
    assert_same_model(one, two)


def sharded_run(setting: PhaseB, config: str, name: str) -> Path:
    """Phase b launched by `configs/accelerate/<config>` through tests/sharded_on_cpu.py,
    stopped at step 2 (`--max-steps`), then resumed from that checkpoint to the end."""
    out = setting.out(name)
    options = ["--config_file", str(REPO / "configs" / "accelerate" / config)]
    train = [str(REPO / "tests" / "sharded_on_cpu.py"), *setting.command, "--out", str(out)]
    launch(options, [*train, "--max-steps", "2"])
    assert (checkpoint_dir(out, "game_state", 2) / CHECKPOINT_STATE).is_file()
    launch(options, [*train, "--resume"])
    return out


@pytest.mark.slow
def test_fsdp_stops_resumes_and_exports_as_one_process(phase_b: tuple[PhaseB, Path]) -> None:
    """FSDP2 by the shipped config: its checkpoint a shard per process (accelerate's FSDP save
    path); the model it exports, gathered from the shards, is the one-process run's."""
    setting, one = phase_b
    sharded = sharded_run(setting, "fsdp.yaml", "fsdp")
    stopped = checkpoint_dir(sharded, "game_state", 2)
    for part in ("pytorch_model_fsdp_0", "optimizer_0"):
        assert sorted(p.name for p in (stopped / part).glob("*.distcp")) == [
            "__0_0.distcp", "__1_0.distcp"], part
    assert not (stopped / "model.safetensors").exists()
    assert_same_losses(one, sharded)
    assert_same_model(one, sharded)


@pytest.mark.slow
def test_zero3_stops_resumes_and_exports_as_one_process(phase_b: tuple[PhaseB, Path]) -> None:
    """DeepSpeed ZeRO-3 by the shipped config (DeepSpeed is not a dependency: skipped without
    it; its first run compiles a CPU communication op, which needs a C++ compiler). Its flat
    optimizer steps every parameter each step: a step whose windows have no history leaves the
    input resampler without gradient, which one process skips and DeepSpeed moves by Adam's
    momentum, so that module agrees to a few learning-rate steps only; everything else as one
    process."""
    pytest.importorskip("deepspeed")
    setting, one = phase_b
    sharded = sharded_run(setting, "deepspeed_zero3.yaml", "zero3")
    stopped = checkpoint_dir(sharded, "game_state", 2) / "pytorch_model"
    assert sorted(p.name for p in stopped.glob("*_model_states.pt")) == [
        "zero_pp_rank_0_mp_rank_00_model_states.pt", "zero_pp_rank_1_mp_rank_00_model_states.pt"]
    assert_same_losses(one, sharded)
    assert_same_model(one, sharded, momentum_moved="input_resampler.")


def deepspeed_stub(stage: int) -> SimpleNamespace:
    """What the phases read of an Accelerator under DeepSpeed."""
    plugin = SimpleNamespace(zero_stage=stage, deepspeed_config={"train_batch_size": "auto"})
    return SimpleNamespace(distributed_type=DistributedType.DEEPSPEED,
                           state=SimpleNamespace(deepspeed_plugin=plugin))


@pytest.mark.parametrize("accelerator", [
    SimpleNamespace(distributed_type=DistributedType.FSDP), deepspeed_stub(3)],
    ids=["fsdp", "zero3"])
def test_decoder_phases_refuse_sharded_parameters(tmp_path: Path, accelerator: Any) -> None:
    recipe = load_recipe(REPO / "recipes" / "tiny-cpu.yaml")
    assert recipe.decoder is not None

    def no_pipeline(*_: Any) -> Any:
        raise AssertionError("the refusal comes first")

    with pytest.raises(TrainError, match="train them with DDP or ZeRO-2"):
        setup_phase("decoder", recipe.decoder, recipe, accelerator, tmp_path / "dataset",
                    tmp_path / "out", no_pipeline, (False, None, 5))
    assert not (tmp_path / "out").exists()


def test_deepspeed_takes_the_micro_batch_and_the_recipes_clip() -> None:
    accelerator = deepspeed_stub(2)
    configure_deepspeed(accelerator, 2, 0.5)
    config = accelerator.state.deepspeed_plugin.deepspeed_config
    assert config == {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 2,
                      "gradient_clipping": 0.5}
    configure_deepspeed(accelerator, 1, None)
    assert config["gradient_clipping"] == 0.0  # DeepSpeed's "no clipping"
    ddp = SimpleNamespace(distributed_type=DistributedType.MULTI_CPU)
    configure_deepspeed(ddp, 1, 1.0)
    assert vars(ddp) == {"distributed_type": DistributedType.MULTI_CPU}
