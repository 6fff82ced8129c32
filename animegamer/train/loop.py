"""The optimisation loop the decoder phases share, on `accelerate`.

Resuming reproduces an uninterrupted run: a checkpoint is `accelerator.save_state` (model,
optimizer, RNG states) in `OUT/checkpoints/<phase>/step-NNNNNNNN`, and everything random in a
step (which samples, the noise, the timesteps, the dropout) comes from `micro_generator(seed,
micro step, process)` and `sample_indices(...)`, pure functions of the step counter; so does the
data order. Losses go to `OUT/logs/<phase>/losses.jsonl` as `{"step": s, "loss": x}` lines (a
resumed run first drops the lines past its checkpoint). A step whose loss is not finite stops the
run before it is logged or checkpointed (`NonFiniteLossError`), the last good checkpoint kept.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from accelerate import Accelerator
from tqdm.auto import tqdm

CHECKPOINTS = "checkpoints"
LOGS = "logs"
_STEP_DIR = re.compile(r"step-(\d{8})")

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


def latest_checkpoint(out: Path, phase: str) -> tuple[int, Path] | None:
    """The (step, folder) of the phase's newest complete checkpoint, or None."""
    folder = out / CHECKPOINTS / phase
    found = [
        (int(match.group(1)), path)
        for path in (folder.iterdir() if folder.is_dir() else ())
        if (match := _STEP_DIR.fullmatch(path.name)) and path.is_dir()
    ]
    return max(found) if found else None


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


def lr_factor(schedule: str, step: int, total: int) -> float:
    """The learning rate's multiplier at optimizer step `step` (0-based) of a phase of `total`:
    1 for `"constant"`; for `"cosine"` a half cosine from 1 at the first step to 0 after the
    last. A function of the step alone, so a resumed run continues the same curve."""
    if schedule == "constant":
        return 1.0
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * min(step, total) / max(total, 1)))
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
    bar = tqdm(
        total=total, initial=start, desc=settings.phase,
        disable=not accelerator.is_local_main_process,
    )
    for step in range(start, end):
        for group in optimizer.param_groups:
            group["lr"] = settings.lr * lr_factor(settings.lr_schedule, step, total)
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
            accelerator.save_state(str(checkpoint_dir(out, settings.phase, done)))
    bar.close()
    return end
