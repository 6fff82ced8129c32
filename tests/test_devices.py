"""Device placement: one decision, from the hardware and ANIMEGAMER_LOW_VRAM."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from animegamer.serving.devices import CPU_PLACEMENT, GIB, choose_placement


def test_cpu_runs_everything_in_fp32(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    placement = choose_placement("auto")
    assert placement == CPU_PLACEMENT
    assert (placement.game_state_dtype, placement.decoder_dtype) == (torch.float32, torch.float32)
    assert placement.storage_device == "cpu"


@pytest.mark.parametrize(
    ("memory_gib", "low_vram", "offload"),
    [(80, "auto", False), (40, "auto", False), (24, "auto", True), (16, "auto", True),
     (80, "on", True), (24, "off", False)],
)
def test_gpu_offloads_below_the_resident_budget(monkeypatch, memory_gib, low_vram, offload):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(
        torch.cuda, "get_device_properties",
        lambda index: SimpleNamespace(total_memory=memory_gib * GIB),
    )
    placement = choose_placement(low_vram)
    assert placement.device == "cuda"
    assert placement.game_state_dtype == torch.bfloat16
    assert placement.decoder_dtype == torch.float16
    assert placement.offload is offload
    assert placement.storage_device == ("cpu" if offload else "cuda")
    assert placement.load_device == placement.storage_device and not placement.zero_gpu
    assert placement.resident_characters == (1 if offload else max(1, memory_gib // 34))


def test_zero_gpu_does_not_query_a_gpu_at_start_up(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    def no_gpu_attached(index):
        raise RuntimeError("no CUDA GPUs are available")

    monkeypatch.setattr(torch.cuda, "get_device_properties", no_gpu_attached)
    placement = choose_placement("auto", zero_gpu=True)
    assert placement.device == "cuda" and not placement.offload
    assert placement.zero_gpu
    assert (placement.load_device, placement.storage_device) == ("cpu", "cuda")
