"""Release decoder (SwissArmyTransformer / DeepSpeed layout) → `AnimeGamerTransformer3DModel`.

The release directory holds `latest` (a folder name) and `<name>/mp_rank_00_model_states.pt`, whose
`module` state dict carries the network under `model.diffusion_model.` (the real file, 26.6 GB,
also holds other models: it is memory-mapped and only that prefix is read). The SAT LoRA (r 64,
scaling 1/r) is merged in fp32, names are mapped onto diffusers' CogVideoX layout, and the
unconditional representation is computed from the mix-embedding layers, which are then dropped.

Every step works on plain tensors, so the mapping can be checked on `meta` tensors (shapes only).
"""

from __future__ import annotations

import logging
import pickle
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from accelerate import init_empty_weights

from animegamer.convert.errors import ConversionError
from animegamer.models.decoder import (
    DEFAULT_MOTION_SCOPES,
    REPRESENTATION_TOKENS,
    AnimeGamerTransformer3DModel,
)

logger = logging.getLogger(__name__)

PREFIX = "model.diffusion_model."
CHECKPOINT_NAME = "mp_rank_00_model_states.pt"
TEXT_ROWS = 30
"""Rows 0..29 of the original mix embedding come from the text branch, 30..225 from the image
branch (196 CLIP patches)."""
LAYERNORM_EPS = 1e-5
FULL_LATENT_SIZE = (60, 90)
SAMPLE_FRAMES = 17

_LAYER = re.compile(r"^transformer\.layers\.(\d+)\.")


def release_checkpoint_path(release_dir: Path) -> Path:
    """`release_dir/<latest>/mp_rank_00_model_states.pt`."""
    latest = Path(release_dir) / "latest"
    if not latest.is_file():
        raise ConversionError(f"{latest}: missing (not a SAT/DeepSpeed release directory)")
    path = Path(release_dir) / latest.read_text().strip() / CHECKPOINT_NAME
    if not path.is_file():
        raise ConversionError(f"{path}: missing (named by {latest})")
    return path


def _load(path: Path) -> dict:
    try:
        return torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except pickle.UnpicklingError:
        # DeepSpeed files may pickle training state (argparse namespaces, numpy RNG states) that
        # the safe unpickler refuses. The network itself is plain tensors.
        logger.warning("%s holds non-tensor objects; loading it with the full unpickler", path)
        return torch.load(path, map_location="cpu", mmap=True, weights_only=False)


def load_release_state_dict(release_dir: Path) -> dict[str, torch.Tensor]:
    """The network's tensors (memory-mapped), with the `model.diffusion_model.` prefix removed."""
    path = release_checkpoint_path(release_dir)
    checkpoint = _load(path)
    module = checkpoint.get("module") if isinstance(checkpoint, dict) else None
    if not isinstance(module, Mapping):
        raise ConversionError(f"{path}: no 'module' state dict")
    state = {k[len(PREFIX) :]: v for k, v in module.items() if k.startswith(PREFIX)}
    if not state:
        raise ConversionError(f"{path}: no key under '{PREFIX}'")
    return state


def _require(state: Mapping[str, torch.Tensor], key: str) -> torch.Tensor:
    if key not in state:
        raise ConversionError(f"missing key {PREFIX}{key}")
    return state[key]


def _latent_size_from_positions(positions: int, latent_frames: int, patch: int) -> tuple[int, int]:
    """The latent size whose patch grid, at CogVideoX's 2:3 aspect (60×90 for 480×720), holds
    the image positions of the release's position table."""
    per_frame, remainder = divmod(positions - REPRESENTATION_TOKENS, latent_frames)
    rows = round((per_frame / 1.5) ** 0.5)
    if remainder or rows < 2 or rows % 2 or rows * (3 * rows // 2) != per_frame:
        raise ConversionError(
            f"{PREFIX}mixins.pos_embed.pos_embedding has {positions} positions, not a 2:3 latent "
            f"grid of {latent_frames} frames: pass latent_size"
        )
    return rows * patch, 3 * rows // 2 * patch


def infer_transformer_config(
    state: Mapping[str, torch.Tensor],
    latent_size: tuple[int, int] | None = None,
    sample_frames: int = SAMPLE_FRAMES,
    motion_scopes: Sequence[float] = DEFAULT_MOTION_SCOPES,
) -> dict:
    """The `AnimeGamerTransformer3DModel` config of a release state dict.

    Layers, width, heads (from the q-norm width), channels, patch and time-embedding sizes come
    from the tensors. The latent size is only implied by the number of positions in the position
    table: without `latent_size` it is read from there assuming the 2:3 aspect of 480×720
    (60×90; the tiny test releases use 8×12), or is 60×90 when there is no table; an explicit
    `latent_size` is checked against the table.
    """
    layers = {int(m.group(1)) for key in state if (m := _LAYER.match(key))}
    if not layers or layers != set(range(len(layers))):
        raise ConversionError(f"transformer layers must be numbered 0..N-1, found {sorted(layers)}")
    proj = _require(state, "mixins.patch_embed.proj.weight")
    hidden, in_channels, patch = proj.shape[0], proj.shape[1], proj.shape[2]
    head_dim = _require(state, "mixins.adaln_layer.query_layernorm_list.0.weight").shape[0]
    if hidden % head_dim:
        raise ConversionError(f"width {hidden} is not a multiple of the q-norm width {head_dim}")
    out_channels = _require(state, "mixins.final_layer.linear.weight").shape[0] // patch**2
    latent_frames = (sample_frames - 1) // 4 + 1
    table = state.get("mixins.pos_embed.pos_embedding")
    if latent_size is None:
        latent_size = (
            FULL_LATENT_SIZE
            if table is None
            else _latent_size_from_positions(table.shape[1], latent_frames, patch)
        )
    height, width = latent_size
    positions = latent_frames * (height // patch) * (width // patch) + REPRESENTATION_TOKENS
    if table is not None and table.shape[1] != positions:
        raise ConversionError(
            f"{PREFIX}mixins.pos_embed.pos_embedding has {table.shape[1]} positions; latent "
            f"{height}x{width} with {sample_frames} frames needs {positions}: check latent_size"
        )
    return {
        "num_attention_heads": hidden // head_dim,
        "attention_head_dim": head_dim,
        "in_channels": in_channels,
        "out_channels": out_channels,
        "time_embed_dim": _require(state, "time_embed.0.weight").shape[0],
        "num_layers": len(layers),
        "sample_height": height,
        "sample_width": width,
        "sample_frames": sample_frames,
        "patch_size": patch,
        "motion_scopes": [float(v) for v in motion_scopes],
    }


class _Consumer:
    """Hands out source tensors and remembers which ones were used."""

    def __init__(self, state: Mapping[str, torch.Tensor]):
        self.state = state
        self.unused = set(state)

    def __contains__(self, key: str) -> bool:
        return key in self.state

    def take(self, key: str) -> torch.Tensor:
        tensor = _require(self.state, key)
        self.unused.discard(key)
        return tensor

    def drop(self, key: str) -> None:
        self.unused.discard(key)


def _merged_linear(src: _Consumer, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Weight and bias of a SAT linear, with its LoRA (if any) merged in fp32.

    `W = W0 + cat_i(B_i @ A_i) / r` over the output partitions (q, k, v for `query_key_value`).
    """
    if f"{name}.weight" in src:
        return src.take(f"{name}.weight").float(), src.take(f"{name}.bias").float()
    weight = src.take(f"{name}.original.weight").float()
    bias = src.take(f"{name}.original.bias").float()
    deltas = []
    while f"{name}.matrix_A.{len(deltas)}" in src:
        i = len(deltas)
        a = src.take(f"{name}.matrix_A.{i}").float()
        b = src.take(f"{name}.matrix_B.{i}").float()
        deltas.append((b @ a) / a.shape[0])
    if not deltas or sum(d.shape[0] for d in deltas) != weight.shape[0]:
        raise ConversionError(f"{PREFIX}{name}: LoRA partitions do not cover the weight")
    return weight + torch.cat(deltas), bias


def _mlp_at_zero(src: _Consumer, name: str) -> torch.Tensor:
    """`Linear → GELU → Linear` of the zero vector (fp32), consuming its weights."""
    src.take(f"{name}.0.weight")  # multiplies the zero input
    hidden = F.gelu(src.take(f"{name}.0.bias").float())
    weight, bias = src.take(f"{name}.2.weight"), src.take(f"{name}.2.bias")
    return F.linear(hidden, weight.float(), bias.float())


def _layer_norm(src: _Consumer, name: str, x: torch.Tensor) -> torch.Tensor:
    weight = src.take(f"{name}.weight").float()
    return F.layer_norm(x, weight.shape, weight, src.take(f"{name}.bias").float(), LAYERNORM_EPS)


def unconditional_representation(src: _Consumer) -> torch.Tensor:
    """[226, D]: what the original's mix embedding gives for the demo's all-zero conditioning.

    Rows 0..29 `txt_mix_layer_norm(text_proj(0))`, rows 30..225 `ip_mix_layer_norm(ip_proj(0))`.
    """
    text = _layer_norm(
        src,
        "mixins.patch_embed.txt_mix_layer_norm",
        _mlp_at_zero(src, "mixins.patch_embed.text_proj"),
    )
    image = _layer_norm(
        src, "mixins.patch_embed.ip_mix_layer_norm", _mlp_at_zero(src, "mixins.patch_embed.ip_proj")
    )
    rows = [text.expand(TEXT_ROWS, -1), image.expand(REPRESENTATION_TOKENS - TEXT_ROWS, -1)]
    return torch.cat(rows).contiguous()


def _split_adaln(tensor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """SAT's 12-way modulation (image msa 0..2, image mlp 3..5, text msa 6..8, text mlp 9..11)
    → diffusers' norm1 (msa: image then text) and norm2 (mlp)."""
    c = tensor.chunk(12, dim=0)
    return torch.cat(c[0:3] + c[6:9]), torch.cat(c[3:6] + c[9:12])


def _convert_layer(src: _Consumer, i: int, out: dict[str, torch.Tensor]) -> None:
    sat, dst = f"transformer.layers.{i}.", f"transformer_blocks.{i}."
    for part in ("weight", "bias"):
        out[f"{dst}norm1.norm.{part}"] = src.take(f"{sat}input_layernorm.{part}")
        out[f"{dst}norm2.norm.{part}"] = src.take(f"{sat}post_attention_layernorm.{part}")
        out[f"{dst}ff.net.0.proj.{part}"] = src.take(f"{sat}mlp.dense_h_to_4h.{part}")
        out[f"{dst}ff.net.2.{part}"] = src.take(f"{sat}mlp.dense_4h_to_h.{part}")
        adaln = src.take(f"mixins.adaln_layer.adaLN_modulations.{i}.1.{part}")
        out[f"{dst}norm1.linear.{part}"], out[f"{dst}norm2.linear.{part}"] = _split_adaln(adaln)
        out[f"{dst}attn1.norm_q.{part}"] = src.take(
            f"mixins.adaln_layer.query_layernorm_list.{i}.{part}"
        )
        out[f"{dst}attn1.norm_k.{part}"] = src.take(
            f"mixins.adaln_layer.key_layernorm_list.{i}.{part}"
        )
    qkv = _merged_linear(src, f"{sat}attention.query_key_value")
    for part, tensor in zip(("weight", "bias"), qkv, strict=True):
        for name, chunk in zip(("to_q", "to_k", "to_v"), tensor.chunk(3, dim=0), strict=True):
            out[f"{dst}attn1.{name}.{part}"] = chunk
    dense = _merged_linear(src, f"{sat}attention.dense")
    out[f"{dst}attn1.to_out.0.weight"], out[f"{dst}attn1.to_out.0.bias"] = dense


_RENAMES = {
    "mixins.patch_embed.proj": "patch_embed.proj",
    "time_embed.0": "time_embedding.linear_1",
    "time_embed.2": "time_embedding.linear_2",
    "flow_embed.0": "ofs_embedding.linear_1",
    "flow_embed.2": "ofs_embedding.linear_2",
    "transformer.final_layernorm": "norm_final",
    "mixins.final_layer.norm_final": "norm_out.norm",
    "mixins.final_layer.linear": "proj_out",
    "mixins.final_layer.adaLN_modulation.1": "norm_out.linear",
}
_DROPPED = ("mixins.patch_embed.output_mix_layer_norm.", "mixins.patch_embed.mix_proj.")


def convert_state_dict(
    state: Mapping[str, torch.Tensor], num_layers: int
) -> dict[str, torch.Tensor]:
    """SAT names (prefix removed) → diffusers names; every source key must be used or known-dropped.

    The position table (`mixins.pos_embed.pos_embedding`) is dropped: diffusers recomputes it.
    """
    src = _Consumer(state)
    out: dict[str, torch.Tensor] = {}
    for sat, dst in _RENAMES.items():
        for part in ("weight", "bias"):
            out[f"{dst}.{part}"] = src.take(f"{sat}.{part}")
    for i in range(num_layers):
        _convert_layer(src, i, out)
    out["uncond_representation"] = unconditional_representation(src)
    src.drop("mixins.pos_embed.pos_embedding")
    for key in list(src.unused):
        if key.startswith(_DROPPED):
            src.drop(key)
    if src.unused:
        names = ", ".join(PREFIX + k for k in sorted(src.unused))
        raise ConversionError(f"unconverted keys: {names}")
    return out


def check_state_dict(
    expected: Mapping[str, torch.Tensor], converted: Mapping[str, torch.Tensor]
) -> None:
    """Raise `ConversionError` naming missing, unexpected or mis-shaped keys."""
    missing = sorted(set(expected) - set(converted))
    unexpected = sorted(set(converted) - set(expected))
    shapes = sorted(
        f"{k} {tuple(converted[k].shape)} != {tuple(expected[k].shape)}"
        for k in set(expected) & set(converted)
        if converted[k].shape != expected[k].shape
    )
    problems = [
        f"{label}: {', '.join(keys)}"
        for label, keys in (("missing", missing), ("unexpected", unexpected), ("shape", shapes))
        if keys
    ]
    if problems:
        raise ConversionError("converted decoder does not fit the model; " + "; ".join(problems))


def build_converted_transformer(
    state: Mapping[str, torch.Tensor],
    latent_size: tuple[int, int] | None = None,
    sample_frames: int = SAMPLE_FRAMES,
    motion_scopes: Sequence[float] = DEFAULT_MOTION_SCOPES,
    dtype: torch.dtype = torch.float32,
) -> AnimeGamerTransformer3DModel:
    """The transformer holding the converted weights of a release state dict (prefix removed)."""
    config = infer_transformer_config(state, latent_size, sample_frames, motion_scopes)
    converted = convert_state_dict(state, config["num_layers"])
    with init_empty_weights(include_buffers=False):
        model = AnimeGamerTransformer3DModel(**config)
    check_state_dict(model.state_dict(), converted)
    table = state.get("mixins.pos_embed.pos_embedding")
    if table is not None:
        diff = (table[0].float() - model.patch_embed.pos_embedding[0]).abs().max().item()
        # values lie in [-1, 1]: allow the rounding of a half-precision checkpoint
        if diff > max(1e-4, torch.finfo(table.dtype).eps):
            raise ConversionError(
                f"{PREFIX}mixins.pos_embed.pos_embedding differs from the sincos table "
                f"by {diff:.2e}"
            )
    # Chunks of the fused qkv share storage: clone, as safetensors refuses shared tensors.
    weights = {k: v.to(dtype).clone() for k, v in converted.items()}
    model.load_state_dict(weights, strict=True, assign=True)
    return model.eval()


def convert_decoder(
    release_dir: Path,
    out: Path,
    latent_size: tuple[int, int] | None = None,
    sample_frames: int = SAMPLE_FRAMES,
    motion_scopes: Sequence[float] = DEFAULT_MOTION_SCOPES,
    dtype: torch.dtype = torch.float32,
) -> Path:
    """Convert the release decoder in `release_dir` and write `out/transformer/`; returns it."""
    state = load_release_state_dict(Path(release_dir))
    model = build_converted_transformer(state, latent_size, sample_frames, motion_scopes, dtype)
    target = Path(out) / "transformer"
    model.save_pretrained(target, safe_serialization=True)
    return target
