"""The weights of each network under each preset, from parameter bytes (`benchmarks/memory.py
--estimate`): nothing is written or loaded, the networks are built on the meta device."""

from __future__ import annotations

import torch

from benchmarks.memory_release import Scale
from benchmarks.memory_sampling import GB

BYTES_PER_VALUE = {None: 2.0, "int8": 1.0, "nf4": 0.5 + 4 / 64}
"""Bytes per weight value: bf16/fp16; int8 (its per-row scale counted apart); NF4 with one
fp32 absmax per block of 64."""


def _linear_and_other(model: torch.nn.Module, skip: tuple[str, ...] = ()) -> tuple[int, int, int]:
    """(values in quantizable Linear weights, their rows, every other parameter value)."""
    linear = rows = 0
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and not name.endswith(skip):
            linear += module.weight.numel()
            rows += module.weight.shape[0]
    return linear, rows, sum(p.numel() for p in model.parameters()) - linear


def estimate_weights_gb(scale: Scale) -> dict[str, dict[str, float]]:
    """Weights of each network under each preset, in GB: what the GPU holds at once is their
    sum for resident presets and the largest for offloading ones (activations not counted);
    what CPU memory holds between turns is their sum for offloading presets, none otherwise."""
    from diffusers.models.autoencoders.autoencoder_kl_cogvideox import AutoencoderKLCogVideoX
    from transformers import MistralConfig, MistralForCausalLM

    from animegamer.models.tokens import VOCAB_SIZE
    from animegamer.models.transformers.transformer_animegamer import AnimeGamerTransformer3DModel
    from animegamer.serving.presets import PRESETS

    hidden, width = scale.mistral["hidden_size"], scale.representation_dim
    resamplers = 2 * hidden * width + hidden * hidden + width * width
    with torch.device("meta"):
        llm = _linear_and_other(MistralForCausalLM(MistralConfig(vocab_size=VOCAB_SIZE,
                                                                 **scale.mistral)), ("lm_head",))
        sizes = scale.decoder
        dit = _linear_and_other(AnimeGamerTransformer3DModel(
            num_attention_heads=sizes.heads, attention_head_dim=sizes.hidden // sizes.heads,
            time_embed_dim=sizes.time_embed_dim, num_layers=sizes.num_layers))
        vae_values = sum(p.numel() for p in AutoencoderKLCogVideoX(**scale.vae).parameters())

    def size(counts: tuple[int, int, int], scheme: str | None) -> float:
        linear, rows, other = counts
        scales = 2 * rows if scheme == "int8" else 0
        return (linear * BYTES_PER_VALUE[scheme] + scales + 2 * other) / GB

    estimates = {}
    for name, preset in PRESETS.items():
        parts = {"language_model": size(llm, preset.quantization.language_model)
                 + 2 * resamplers / GB,
                 "transformer": size(dit, preset.quantization.transformer),
                 "vae": 2 * vae_values / GB}
        on_gpu = max(parts.values()) if preset.offload else sum(parts.values())
        estimates[name] = {**{k: round(v, 2) for k, v in parts.items()},
                           "gpu_weights_gb": round(on_gpu, 2),
                           "ram_weights_gb": round(sum(parts.values()), 2) if preset.offload
                           else 0.0}
    return estimates
