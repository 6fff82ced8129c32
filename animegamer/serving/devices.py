"""The one place that decides where the models run and in which dtype."""

from __future__ import annotations

from dataclasses import dataclass

import torch

GIB = 1 << 30
# Both models resident: Mistral-7B in bf16 (14.5 GiB), the 1.7B DiT in fp16 (3.4 GiB), the VAE,
# and the activations of a 480×720×17 decode with CFG (~12 GiB at peak in the VAE).
RESIDENT_BUDGET_BYTES = 34 * GIB
ZERO_GPU_BYTES = 70 * GIB


@dataclass(frozen=True)
class Placement:
    """Device and dtypes of the two models.

    `offload` keeps both models in CPU memory and moves each to the GPU only while it runs, so a
    24 GB card can play; it costs the PCIe transfers on every turn. The decoder pipeline does it
    with diffusers' `enable_model_cpu_offload` (transformer, then VAE). `zero_gpu` marks a ZeroGPU
    Space: weights are read into CPU memory and then moved with `.to("cuda")`, the one way
    ZeroGPU supports at start-up, where no GPU is attached yet. `resident_characters` is how many
    characters' models may stay loaded at once (each takes the resident budget).
    """

    device: str
    game_state_dtype: torch.dtype
    decoder_dtype: torch.dtype
    offload: bool = False
    zero_gpu: bool = False
    resident_characters: int = 1

    @property
    def storage_device(self) -> str:
        """Where the weights live between turns."""
        return "cpu" if self.offload else self.device

    @property
    def load_device(self) -> str:
        """Where `from_pretrained` puts the weights (then moved to `storage_device`)."""
        return "cpu" if self.zero_gpu else self.storage_device


def _gpu_memory_bytes(zero_gpu: bool) -> int:
    """Memory of GPU 0. On ZeroGPU no GPU is attached at start-up (each call gets a large slice
    of an H200), so the answer is that slice, not a query."""
    if zero_gpu:
        return ZERO_GPU_BYTES
    return torch.cuda.get_device_properties(0).total_memory


CPU_PLACEMENT = Placement(device="cpu", game_state_dtype=torch.float32, decoder_dtype=torch.float32)


def choose_placement(low_vram: str = "auto", zero_gpu: bool = False) -> Placement:
    """bf16 MLLM and fp16 DiT on a GPU (what the release ran), fp32 on CPU.

    `low_vram` is `auto` (offload when the card has less than the resident budget), `on` or `off`;
    `zero_gpu` says the Space runs on ZeroGPU (`Settings.zero_gpu`).
    """
    if not torch.cuda.is_available():
        return CPU_PLACEMENT
    total = _gpu_memory_bytes(zero_gpu)
    offload = low_vram == "on" or (low_vram == "auto" and total < RESIDENT_BUDGET_BYTES)
    return Placement(
        device="cuda",
        game_state_dtype=torch.bfloat16,
        decoder_dtype=torch.float16,
        offload=offload,
        zero_gpu=zero_gpu,
        resident_characters=1 if offload else max(1, total // RESIDENT_BUDGET_BYTES),
    )
