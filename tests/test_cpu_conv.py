"""The VAE's 3-D convolutions run through oneDNN on the CPU (animegamer/models/cpu_conv.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from animegamer.models.cpu_conv import use_onednn_conv3d
from animegamer.models.tiny_decoder import tiny_vae
from animegamer.serving.devices import CPU_PLACEMENT
from animegamer.serving.loading import build_preview_directory, load_character_models

pytestmark = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="this PyTorch build has no oneDNN"
)


def _kernels(run: object) -> set[str]:
    """The aten operators a call ran."""
    with torch.profiler.profile() as profile:
        run()  # type: ignore[operator]
    return {event.key for event in profile.key_averages()}


def test_a_single_clip_decodes_through_onednn_with_the_same_frames() -> None:
    torch.manual_seed(0)
    vae = tiny_vae().eval()
    latent = torch.randn(1, 16, 5, 8, 12)
    with torch.no_grad():
        stock = vae.decode(latent).sample
        assert "aten::slow_conv3d_forward" in _kernels(lambda: vae.decode(latent))
        routed = use_onednn_conv3d(vae)
        assert routed == sum(isinstance(m, nn.Conv3d) for m in vae.modules()) > 0
        fast = vae.decode(latent).sample
        assert "aten::slow_conv3d_forward" not in _kernels(lambda: vae.decode(latent))
    torch.testing.assert_close(fast, stock, rtol=1e-4, atol=1e-5)


def test_training_keeps_the_stock_kernel_and_its_gradients() -> None:
    torch.manual_seed(0)
    conv = nn.Conv3d(4, 4, 3, padding=1)
    clip = torch.randn(1, 4, 3, 6, 6, requires_grad=True)
    expected = torch.autograd.grad(conv(clip).square().sum(), clip)[0]
    use_onednn_conv3d(conv)
    assert "aten::mkldnn_convolution" not in _kernels(lambda: conv(clip))
    routed = torch.autograd.grad(conv(clip).square().sum(), clip)[0]
    torch.testing.assert_close(routed, expected)
    assert conv.state_dict().keys() == {"weight", "bias"}


def test_models_loaded_for_the_cpu_decode_through_onednn(tmp_path: Path) -> None:
    models = load_character_models(build_preview_directory(tmp_path), CPU_PLACEMENT)
    vae = models.decoder.vae
    latent = torch.randn(1, 16, 5, 8, 12)
    with torch.no_grad():
        assert "aten::slow_conv3d_forward" not in _kernels(lambda: vae.decode(latent))
