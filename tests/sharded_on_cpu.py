"""`python -m animegamer.train` sharded over CPU processes (gloo) by accelerate's FSDP or
DeepSpeed, for tests/test_train_distributed.py: `accelerate launch --config_file
configs/accelerate/fsdp.yaml (or deepspeed_zero3.yaml) ... tests/sharded_on_cpu.py TRAIN-ARGS...`.

accelerate 1.15 shards only on accelerators. FSDP: its state turns FSDP on for multi-GPU, XPU,
NPU, … processes only (CPU processes stay `MULTI_CPU`: an FSDP config on CPUs silently trains
DDP), while torch's FSDP2 (`fully_shard`) shards over gloo on CPUs; so the training makes its
Accelerator as usual, and this launcher then switches accelerate's state to FSDP with the plugin
the launcher's `FSDP_*` variables describe. DeepSpeed (which has a CPU back end): accelerate
takes it only from an Accelerator made without `cpu=True`, and then counts one process unless
its process group was asked for gloo; so this launcher sets up that group first and has the
training make its Accelerator without `cpu=True`. Either way `prepare`, `save_state`,
`load_state` and `get_state_dict` then take accelerate's FSDP or DeepSpeed paths (sharded
parameters, sharded checkpoints, the full state dict gathered from the shards).
"""

from __future__ import annotations

import os
import sys

from accelerate import Accelerator
from accelerate.state import PartialState
from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

from animegamer.train import run
from animegamer.train.__main__ import main

make_accelerator = run.make_accelerator


def fsdp_accelerator(request: run.TrainRequest, recipe: run.Recipe) -> Accelerator:
    """The run's Accelerator, switched to FSDP (accelerate keeps both in shared state)."""
    accelerator = make_accelerator(request, recipe)
    accelerator.state.fsdp_plugin = FullyShardedDataParallelPlugin()  # from FSDP_* variables
    accelerator.state.distributed_type = DistributedType.FSDP
    PartialState._shared_state["distributed_type"] = DistributedType.FSDP
    return accelerator


def accelerator_maker() -> object:
    """What the training makes its Accelerator with, per the launcher's choice."""
    if os.environ.get("ACCELERATE_USE_DEEPSPEED") == "true":
        PartialState(backend="gloo")  # joins DeepSpeed's CPU processes
        run.launched_without_cuda = lambda: False
        return make_accelerator
    return fsdp_accelerator


if __name__ == "__main__":
    run.make_accelerator = accelerator_maker()
    sys.exit(main())
