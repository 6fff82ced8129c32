"""The one checkpoint policy of every training phase (`loop.save_checkpoint`, `resume_point`):
a checkpoint counts once it is marked complete, the newest `keep` are kept, a fresh run refuses
a folder with checkpoints, and a resume continues from the newest complete one with the loss log
trimmed to it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator

from animegamer.train.loop import (
    latest_checkpoint,
    losses_path,
    read_losses,
    resume_point,
    save_checkpoint,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_the_newest_complete_checkpoints_are_kept_and_resumed(tmp_path: Path) -> None:
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.AdamW(model.parameters())
    model, optimizer = accelerator.prepare(model, optimizer)
    folder = tmp_path / "checkpoints" / "adapt"
    for step in (1, 2, 3, 4):
        with torch.no_grad():
            model.weight.fill_(step)
        save_checkpoint(accelerator, tmp_path, "adapt", step, keep=2)
    assert sorted(p.name for p in folder.iterdir()) == ["step-00000003", "step-00000004"]
    (folder / "step-00000005").mkdir()  # a save interrupted before it was marked complete
    assert latest_checkpoint(tmp_path, "adapt") == (4, folder / "step-00000004")

    log = losses_path(tmp_path, "adapt")
    log.parent.mkdir(parents=True)
    log.write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in range(1, 7)))
    with pytest.raises(FileExistsError, match="holds checkpoints: pass --resume"):
        resume_point(tmp_path, "adapt", False, accelerator)
    assert resume_point(tmp_path, "adapt", True, accelerator) == (4, folder / "step-00000004")
    assert [r["step"] for r in read_losses(log)] == [1, 2, 3, 4]
    accelerator.load_state(str(folder / "step-00000004"))
    assert torch.equal(model.weight, torch.full((1, 2), 4.0))
    assert resume_point(tmp_path, "vae", True, accelerator) == (0, None)
