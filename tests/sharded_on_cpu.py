"""`python -m animegamer.train` with accelerate's FSDP applied on CPU processes (gloo), for
tests/test_train_sharded.py: `accelerate launch --config_file configs/accelerate/fsdp.yaml ...
tests/fsdp_on_cpu.py TRAIN-ARGS...`.

accelerate 1.15 applies FSDP only to accelerators (its state turns FSDP on for multi-GPU, XPU,
NPU, … processes; CPU processes stay `MULTI_CPU`, so an FSDP config on CPUs silently trains
DDP), while torch's FSDP2 (`fully_shard`) shards over gloo on CPUs. This launcher lets the
training make its Accelerator as usual, then switches accelerate's state to FSDP with the plugin
the launcher's `FSDP_*` variables describe: `prepare`, `save_state`, `load_state` and
`get_state_dict` then take accelerate's FSDP paths (sharded parameters, sharded checkpoints, the
full state dict gathered from the shards).
"""

from __future__ import annotations

import sys

from accelerate import Accelerator
from accelerate.state import PartialState
from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin

from animegamer.train import run
from animegamer.train.__main__ import main

make_accelerator = run.make_accelerator


def sharded_accelerator(request: run.TrainRequest, recipe: run.Recipe) -> Accelerator:
    """The run's Accelerator, switched to FSDP (accelerate keeps both in shared state)."""
    accelerator = make_accelerator(request, recipe)
    accelerator.state.fsdp_plugin = FullyShardedDataParallelPlugin()  # from FSDP_* variables
    accelerator.state.distributed_type = DistributedType.FSDP
    PartialState._shared_state["distributed_type"] = DistributedType.FSDP
    return accelerator


if __name__ == "__main__":
    run.make_accelerator = sharded_accelerator
    sys.exit(main())
