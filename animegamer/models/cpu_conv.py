"""3-D convolutions of a single clip on the CPU through oneDNN (mkldnn).

PyTorch picks its CPU convolution kernel by a heuristic written for 2-D inputs: with a batch of
one and a small `batch × channels × frames × height` product it runs the native `slow_conv3d`
(im2col) kernel, which is where a CogVideoX VAE spends ~90 % of a Nano clip's decode and is
about 10× slower there than oneDNN's kernel on the same tensors. A game decodes one clip per
turn, so every turn paid it. `use_onednn_conv3d` routes a module's `Conv3d` layers through
`torch.mkldnn_convolution` for CPU float32 inputs; results agree to float rounding (~1e-4
relative), anything else (GPU, half precision, padding modes other than zeros, autograd) takes
the stock path.
"""

from __future__ import annotations

import types

import torch
from torch import nn


def _onednn_conv_forward(
    conv: nn.Conv3d, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    if (input.device.type != "cpu" or input.dtype != torch.float32 or torch.is_grad_enabled()
            or weight.dtype != torch.float32):
        return nn.Conv3d._conv_forward(conv, input, weight, bias)
    padding = conv.padding
    assert not isinstance(padding, str)  # `use_onednn_conv3d` routes integer paddings only
    return torch.mkldnn_convolution(
        input.contiguous(), weight.contiguous(), bias, list(padding), list(conv.stride),
        list(conv.dilation), conv.groups,
    )


def use_onednn_conv3d(module: nn.Module) -> int:
    """Route `module`'s zero-padded `Conv3d` layers through oneDNN when they run on the CPU in
    float32 without autograd; returns how many layers it routed (0 where this PyTorch build has
    no oneDNN). Their weights and state dicts are unchanged."""
    if not torch.backends.mkldnn.is_available():
        return 0
    routed = 0
    for layer in module.modules():
        if (isinstance(layer, nn.Conv3d) and layer.padding_mode == "zeros"
                and not isinstance(layer.padding, str)):
            layer._conv_forward = types.MethodType(_onednn_conv_forward, layer)  # type: ignore[method-assign]
            routed += 1
    return routed
