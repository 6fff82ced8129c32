"""The optimisation loop the decoder phases share, on `accelerate`, and the checkpoint policy
of every phase.

Resuming reproduces an uninterrupted run: a checkpoint is `accelerator.save_state` (model,
optimizer, RNG states) in `OUT/checkpoints/<phase>/step-NNNNNNNN`, complete once its
`trainer_state.json` (the step) is written; `save_checkpoint` then removes all but the newest
`keep` (accelerate's own rotation, `ProjectConfiguration(automatic_checkpoint_naming=True)`,
numbers its folders by save, not by step, in one folder for all phases). Everything random in a
step (which samples, the noise, the timesteps, the dropout) comes from `micro_generator(seed,
micro step, process)` and `sample_indices(...)`, pure functions of the step counter; so does the
data order. Losses go to `OUT/logs/<phase>/losses.jsonl` as `{"step": s, "loss": x}` lines (a
resumed run first drops the lines past its checkpoint). A step whose loss is not finite stops the
run before it is logged or checkpointed (`NonFiniteLossError`), the last good checkpoint kept.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from accelerate import Accelerator
from torch.optim.lr_scheduler import LambdaLR
from transformers import get_constant_schedule, get_cosine_schedule_with_warmup

from animegamer.cli.progress import progress

CHECKPOINTS = "checkpoints"
CHECKPOINT_STATE = "trainer_state.json"
"""Written last into a checkpoint folder: its step; a folder without it is incomplete."""
LOGS = "logs"

MicroLoss = Callable[[int, torch.Generator], torch.Tensor]
"""loss(micro step, generator) → the scalar loss of one micro-batch of this process."""


class NonFiniteLossError(FloatingPointError):
    """A step's loss was NaN or infinite: the run stopped; the message names the last good
    checkpoint."""


def check_finite(loss: float, phase: str, step: int, last_good: Path | None) -> None:
    """Raise `NonFiniteLossError` if `loss` (of optimizer step `step`) is NaN or infinite.
    Called before the step is logged or checkpointed, with the same reduced loss on every
    process, so all of them stop together."""
    if math.isfinite(loss):
        return
    kept = (
        f"the last good checkpoint, {last_good}, is kept (--resume continues from it)"
        if last_good is not None else "no checkpoint had been written yet"
    )
    raise NonFiniteLossError(
        f"{phase}: the loss is {loss} at step {step}; the run stopped there and {kept}. Lower "
        "the learning rate or check the data"
    )


def losses_path(out: Path, phase: str) -> Path:
    """OUT/logs/<phase>/losses.jsonl (beside, not inside, the pipeline folders)."""
    return out / LOGS / phase / "losses.jsonl"


def checkpoint_dir(out: Path, phase: str, step: int) -> Path:
    return out / CHECKPOINTS / phase / f"step-{step:08d}"


def complete_checkpoints(out: Path, phase: str) -> list[tuple[int, Path]]:
    """The (step, folder) of the phase's complete checkpoints, oldest first."""
    states = (out / CHECKPOINTS / phase).glob(f"step-*/{CHECKPOINT_STATE}")
    return sorted(
        (json.loads(state.read_text(encoding="utf-8"))["step"], state.parent)
        for state in states
    )


def latest_checkpoint(out: Path, phase: str) -> tuple[int, Path] | None:
    """The (step, folder) of the phase's newest complete checkpoint, or None."""
    found = complete_checkpoints(out, phase)
    return found[-1] if found else None


def shards_parameters(accelerator: Accelerator) -> bool:
    """Whether the processes hold shards of the parameters rather than whole copies (FSDP,
    DeepSpeed ZeRO-3): the trained model must then be gathered before it is saved."""
    from accelerate.utils import DistributedType

    if accelerator.distributed_type == DistributedType.FSDP:
        return True
    return (accelerator.distributed_type == DistributedType.DEEPSPEED
            and accelerator.state.deepspeed_plugin.zero_stage == 3)


def configure_deepspeed(
    accelerator: Accelerator, micro_batch: int, max_grad_norm: float | None
) -> None:
    """Under DeepSpeed, what its engine would otherwise take from a dataloader (the phases have
    none): the samples of a micro-step on one process; and the recipe's gradient clip (None: no
    clipping), since `clip_grad_norm_` leaves clipping to the engine, whose `auto` is 1.0. Call
    it before `prepare`."""
    from accelerate.utils import DistributedType

    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        config = accelerator.state.deepspeed_plugin.deepspeed_config
        config["train_micro_batch_size_per_gpu"] = micro_batch
        config["gradient_clipping"] = 0.0 if max_grad_norm is None else max_grad_norm  # 0: none


def save_checkpoint(accelerator: Accelerator, out: Path, phase: str, step: int, keep: int) -> None:
    """`accelerator.save_state` into the step's folder, marked complete, then all but the
    phase's newest `keep` complete checkpoints removed."""
    folder = checkpoint_dir(out, phase, step)
    accelerator.save_state(str(folder))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        state = json.dumps({"step": step}) + "\n"
        (folder / CHECKPOINT_STATE).write_text(state, encoding="utf-8")
        for _, old in complete_checkpoints(out, phase)[:-keep]:
            shutil.rmtree(old)
    accelerator.wait_for_everyone()


def resume_point(
    out: Path, phase: str, resume: bool, accelerator: Accelerator
) -> tuple[int, Path | None]:
    """The step and checkpoint a run starts from (step 0 when `resume` finds none), the loss
    log trimmed to that step. A fresh run refuses a folder that holds the phase's checkpoints:
    a later resume could otherwise pick up another run's."""
    found = latest_checkpoint(out, phase)
    if found is not None and not resume:
        raise FileExistsError(
            f"{out / CHECKPOINTS / phase} holds checkpoints: pass --resume, or remove it"
        )
    step, folder = found if found is not None else (0, None)
    if accelerator.is_main_process:
        path = losses_path(out, phase)
        path.parent.mkdir(parents=True, exist_ok=True)
        trim_losses(path, step)
    accelerator.wait_for_everyone()
    return step, folder


def micro_generator(seed: int, micro_step: int, process_index: int = 0) -> torch.Generator:
    """The CPU generator of one micro-batch: a pure function of the run's seed, the micro step
    and the process, so a resumed run draws exactly what the uninterrupted one drew."""
    mixed = ((seed * 1_000_003 + micro_step) * 1_009 + process_index) % (2**63)
    return torch.Generator().manual_seed(mixed)


def sample_indices(
    count: int,
    batch_size: int,
    micro_step: int,
    seed: int,
    process_index: int = 0,
    num_processes: int = 1,
) -> list[int]:
    """This process's samples of a micro step: the micro steps walk through a stream of epochs,
    each a seeded permutation of `count` items; process p takes the p-th slice of each global
    batch."""
    if count < 1:
        raise ValueError("no training samples")
    start = (micro_step * num_processes + process_index) * batch_size
    indices = []
    for position in range(start, start + batch_size):
        epoch, offset = divmod(position, count)
        order = torch.randperm(count, generator=torch.Generator().manual_seed(seed + epoch))
        indices.append(int(order[offset]))
    return indices


def trim_losses(path: Path, step: int) -> None:
    """Drop the log lines past `step` (a run resumed from that step writes them again; a
    fresh run, step 0, starts an empty log)."""
    if not path.is_file():
        return
    kept = [
        line for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and json.loads(line)["step"] <= step
    ]
    path.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")


def read_losses(path: Path) -> list[dict[str, float]]:
    """The `{"step", "loss"}` records of a losses.jsonl."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


@dataclass(frozen=True)
class LoopSettings:
    """What the loop needs besides the model: the phase's name (checkpoint and log folders),
    the run's seed, when to checkpoint and log, and the gradient-norm clip."""

    phase: str
    seed: int
    checkpoint_every: int
    log_every: int
    max_grad_norm: float
    lr: float
    lr_schedule: str = "constant"
    keep_checkpoints: int = 2


def lr_scheduler(
    optimizer: torch.optim.Optimizer, schedule: str, lr: float, start: int, total: int
) -> LambdaLR:
    """transformers' schedule of a phase of `total` optimizer steps, set at step `start`
    (0-based): `"constant"` keeps `lr`; `"cosine"` is a half cosine from `lr` at the first step
    to 0 after the last (no warm-up). A function of the step alone, so a resumed run, or a
    stage with a new optimizer, continues the same curve; step it once per optimizer step."""
    for group in optimizer.param_groups:
        group["initial_lr"] = lr  # what the schedule scales, whatever a checkpoint left in "lr"
    if schedule == "constant":
        return get_constant_schedule(optimizer, last_epoch=start - 1)
    if schedule == "cosine":
        return get_cosine_schedule_with_warmup(optimizer, 0, total, last_epoch=start - 1)
    raise ValueError(f"unknown lr schedule {schedule!r} (constant, cosine)")


def train_steps(
    accelerator: Accelerator,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    parameters: Iterable[torch.nn.Parameter],
    micro_loss: MicroLoss,
    settings: LoopSettings,
    out: Path,
    start: int,
    end: int,
    total: int,
) -> int:
    """Optimizer steps `start` → `end` (of `total` in the phase); returns `end`.

    Each step runs `gradient_accumulation_steps` micro-batches under `accelerator.accumulate`.
    A checkpoint is written every `checkpoint_every` steps and at `end` (a stage's last step,
    or where `--max-steps` stops the run).
    """
    trainable = [p for p in parameters if p.requires_grad]
    accumulation = accelerator.gradient_accumulation_steps
    log = losses_path(out, settings.phase)
    if accelerator.is_main_process:
        log.parent.mkdir(parents=True, exist_ok=True)
    bar = progress(total=total, initial=start, desc=settings.phase,
                   disable=not accelerator.is_local_main_process)
    scheduler = lr_scheduler(optimizer, settings.lr_schedule, settings.lr, start, total)
    for step in range(start, end):
        losses = []
        for k in range(accumulation):
            micro = step * accumulation + k
            with accelerator.accumulate(model):
                loss = micro_loss(
                    micro, micro_generator(settings.seed, micro, accelerator.process_index)
                )
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(trainable, settings.max_grad_norm)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            losses.append(loss.detach())
        scheduler.step()
        mean = accelerator.reduce(torch.stack(losses).mean(), reduction="mean").item()
        done = step + 1
        if not math.isfinite(mean):
            bar.close()
            found = latest_checkpoint(out, settings.phase)
            check_finite(mean, settings.phase, done, found[1] if found else None)
        bar.update()
        bar.set_postfix(loss=f"{mean:.4f}")
        if done % settings.log_every == 0:
            if accelerator.is_main_process:
                with log.open("a", encoding="utf-8") as file:
                    file.write(json.dumps({"step": done, "loss": mean}) + "\n")
            accelerator.log({f"{settings.phase}/loss": mean}, step=done)
        if done % settings.checkpoint_every == 0 or done == end:
            save_checkpoint(accelerator, out, settings.phase, done, settings.keep_checkpoints)
    bar.close()
    return end
