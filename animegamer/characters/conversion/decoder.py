"""Release decoder (SwissArmyTransformer / DeepSpeed layout) → `AnimeGamerTransformer3DModel`.

The release directory holds `latest` (a folder name) and `<name>/mp_rank_00_model_states.pt`, whose
`module` state dict carries the network under `model.diffusion_model.` (the real file, 26.6 GB,
also holds other models and training state: it is memory-mapped, read without the full
unpickler (`load_checkpoint`), and only that prefix is used). The SAT LoRA (r 64, scaling 1/r) is
merged in fp32, names are mapped onto diffusers' CogVideoX layout, the mix-embedding layers become
the shot encoder (`AnimeGamerShotEncoder`, docs/design.md §9), and the unconditional representation
is that encoder applied to zeros. The output is a pipeline folder (`transformer/`, `shot_encoder/`,
`scheduler/`, `model_index.json`) that needs only the VAE.

Every step works on plain tensors, so the mapping can be checked on `meta` tensors (shapes only).
"""

from __future__ import annotations

import argparse
import pickle
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from accelerate import init_empty_weights
from numpy._core import multiarray

from animegamer.characters.conversion.errors import ConversionError
from animegamer.game.representation import REPRESENTATION_TOKENS
from animegamer.models.decoder_defaults import (
    DEFAULT_LATENT_SIZE,
    DEFAULT_SAMPLE_FRAMES,
    RELEASE_CHECKPOINT_NAME,
    SAT_PREFIX,
)
from animegamer.models.shot_encoder import AnimeGamerShotEncoder
from animegamer.models.transformers.transformer_animegamer import (
    DEFAULT_MOTION_SCOPES,
    AnimeGamerTransformer3DModel,
)
from animegamer.pipelines.animegamer.model_index import write_model_index
from animegamer.pipelines.animegamer.sampling import save_scheduler

LAYERNORM_EPS = 1e-5
TRANSFORMER_SHARD_SIZE = "2GB"

SAFE_GLOBALS: tuple = (
    argparse.Namespace,
    np.ndarray,
    np.dtype,
    *(getattr(np.dtypes, name) for name in np.dtypes.__all__),
    *(
        (function, f"{module}.multiarray.{function.__name__}")
        for function in (multiarray._reconstruct, multiarray.scalar)
        for module in ("numpy.core", "numpy._core")
    ),
)
"""What a DeepSpeed/SAT checkpoint holds beside its tensors and that is safe to rebuild: training
arguments (`argparse.Namespace`) and numpy arrays, scalars and dtypes (the numpy RNG state; numpy
1.x pickles them under `numpy.core`, 2.x under `numpy._core`). Python's RNG state, sets, ordered
dicts, `torch.Size` and tensors are allowed by torch itself."""

INERT_NAMESPACES = ("deepspeed", "sat", "apex", "megatron")
"""Packages whose pickled objects (loss scalers, optimizer wrappers, ...) stand in a training
checkpoint without the network needing them: they are loaded as `InertObject`s, never imported."""

_LAYER = re.compile(r"^transformer\.layers\.(\d+)\.")


def release_checkpoint_path(release_dir: Path) -> Path:
    """`release_dir/<latest>/mp_rank_00_model_states.pt`."""
    latest = Path(release_dir) / "latest"
    if not latest.is_file():
        raise ConversionError(f"{latest}: missing (not a SAT/DeepSpeed release directory)")
    path = Path(release_dir) / latest.read_text().strip() / RELEASE_CHECKPOINT_NAME
    if not path.is_file():
        raise ConversionError(f"{path}: missing (named by {latest})")
    return path


class InertObject:
    """Stands in for an object of an `INERT_NAMESPACES` class: keeps what the pickle gave it and
    runs no code of that class (which is never imported)."""

    def __new__(cls, *args: object, **kwargs: object) -> InertObject:
        return super().__new__(cls)

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.args = args

    def __setstate__(self, state: object) -> None:
        self.state = state


def _inert_class(qualified_name: str) -> tuple[type, str]:
    module, _, name = qualified_name.rpartition(".")
    return type(name, (InertObject,), {"__module__": module}), qualified_name


def load_checkpoint(path: Path) -> dict:
    """The checkpoint's pickle, memory-mapped, never with the full unpickler.

    torch's `weights_only` unpickler runs with `SAFE_GLOBALS` allowed and the classes of
    `INERT_NAMESPACES` replaced by `InertObject`s. A checkpoint naming any other global (a
    function such as `os.system`, an unknown class) is refused before anything is unpickled.
    """
    try:
        with torch.serialization.safe_globals(list(SAFE_GLOBALS)):
            found = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception as error:
        raise ConversionError(f"{path} is not a readable PyTorch checkpoint: {error}") from error
    refused = sorted(name for name in found if name.split(".")[0] not in INERT_NAMESPACES)
    if refused:
        raise ConversionError(
            f"{path} holds objects that are not tensors, numbers or known training state: "
            f"{', '.join(refused)}. Loading them could run code, so the checkpoint is refused; "
            "use the release's own file"
        )
    inert = [_inert_class(name) for name in sorted(found)]
    try:
        with torch.serialization.safe_globals([*SAFE_GLOBALS, *inert]):
            checkpoint = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except pickle.UnpicklingError as error:
        raise ConversionError(f"{path} cannot be loaded safely: {error}") from error
    if not isinstance(checkpoint, dict):
        raise ConversionError(f"{path}: not a dict but {type(checkpoint).__name__}")
    return checkpoint


def load_release_state_dict(release_dir: Path) -> dict[str, torch.Tensor]:
    """The network's tensors (memory-mapped), with the `model.diffusion_model.` prefix removed."""
    path = release_checkpoint_path(release_dir)
    checkpoint = load_checkpoint(path)
    module = checkpoint.get("module")
    if not isinstance(module, Mapping):
        raise ConversionError(f"{path}: no 'module' state dict")
    state = {k[len(SAT_PREFIX) :]: v for k, v in module.items() if k.startswith(SAT_PREFIX)}
    if not state:
        raise ConversionError(f"{path}: no key under '{SAT_PREFIX}'")
    return state


def _require(state: Mapping[str, torch.Tensor], key: str) -> torch.Tensor:
    if key not in state:
        raise ConversionError(f"missing key {SAT_PREFIX}{key}")
    return state[key]


def _latent_size_from_positions(positions: int, latent_frames: int, patch: int) -> tuple[int, int]:
    """The latent size whose patch grid, at CogVideoX's 2:3 aspect (60×90 for 480×720), holds
    the image positions of the release's position table."""
    per_frame, remainder = divmod(positions - REPRESENTATION_TOKENS, latent_frames)
    rows = round((per_frame / 1.5) ** 0.5)
    if remainder or rows < 2 or rows % 2 or rows * (3 * rows // 2) != per_frame:
        raise ConversionError(
            f"{SAT_PREFIX}mixins.pos_embed.pos_embedding has {positions} positions, not a 2:3 "
            f"latent grid of {latent_frames} frames: pass latent_size"
        )
    return rows * patch, 3 * rows // 2 * patch


def infer_transformer_config(
    state: Mapping[str, torch.Tensor],
    latent_size: tuple[int, int] | None = None,
    sample_frames: int = DEFAULT_SAMPLE_FRAMES,
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
            DEFAULT_LATENT_SIZE
            if table is None
            else _latent_size_from_positions(table.shape[1], latent_frames, patch)
        )
    height, width = latent_size
    positions = latent_frames * (height // patch) * (width // patch) + REPRESENTATION_TOKENS
    if table is not None and table.shape[1] != positions:
        raise ConversionError(
            f"{SAT_PREFIX}mixins.pos_embed.pos_embedding has {table.shape[1]} positions; latent "
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
    deltas: list[torch.Tensor] = []
    while f"{name}.matrix_A.{len(deltas)}" in src:
        i = len(deltas)
        a = src.take(f"{name}.matrix_A.{i}").float()
        b = src.take(f"{name}.matrix_B.{i}").float()
        deltas.append((b @ a) / a.shape[0])
    if not deltas or sum(d.shape[0] for d in deltas) != weight.shape[0]:
        raise ConversionError(f"{SAT_PREFIX}{name}: LoRA partitions do not cover the weight")
    return weight + torch.cat(deltas), bias


_SHOT_ENCODER_NAMES = {
    "mixins.patch_embed.text_proj.0": "text_proj.0",
    "mixins.patch_embed.text_proj.2": "text_proj.2",
    "mixins.patch_embed.ip_proj.0": "image_proj.0",
    "mixins.patch_embed.ip_proj.2": "image_proj.2",
    "mixins.patch_embed.txt_mix_layer_norm": "text_norm",
    "mixins.patch_embed.ip_mix_layer_norm": "image_norm",
}
"""The release's mix-embedding layers that make the shot representation (docs/design.md §9) →
names of `AnimeGamerShotEncoder`."""


def _convert_shot_encoder(src: _Consumer) -> dict[str, torch.Tensor]:
    return {
        f"{dst}.{part}": src.take(f"{sat}.{part}")
        for sat, dst in _SHOT_ENCODER_NAMES.items()
        for part in ("weight", "bias")
    }


def build_shot_encoder(
    weights: Mapping[str, torch.Tensor], dtype: torch.dtype | None = None
) -> AnimeGamerShotEncoder:
    """The shot encoder holding converted weights (widths read from them; meta tensors work)."""
    text_in, image_in = weights["text_proj.0.weight"], weights["image_proj.0.weight"]
    with init_empty_weights(include_buffers=False):
        encoder = AnimeGamerShotEncoder(
            text_width=text_in.shape[1],
            image_width=image_in.shape[1],
            width=text_in.shape[0],
            norm_eps=LAYERNORM_EPS,
        )
    check_state_dict(encoder.state_dict(), weights, "shot encoder")
    encoder.load_state_dict(
        {k: v.to(dtype or v.dtype).clone() for k, v in weights.items()}, strict=True, assign=True
    )
    return encoder.eval()


def unconditional_representation(shot_encoder_weights: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """[226, D]: the shot encoder on all-zero features in fp32, i.e. what the original's mix
    embedding gives for the demo's all-zero conditioning."""
    with torch.no_grad():
        return build_shot_encoder(shot_encoder_weights, torch.float32).unconditional().contiguous()


@dataclass
class ConvertedDecoder:
    """A release's network split into the two modules the project keeps."""

    transformer: dict[str, torch.Tensor]
    shot_encoder: dict[str, torch.Tensor]


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


def convert_state_dict(state: Mapping[str, torch.Tensor], num_layers: int) -> ConvertedDecoder:
    """SAT names (prefix removed) → the transformer's diffusers names and the shot encoder's;
    every source key must be used or known-dropped.

    The position table (`mixins.pos_embed.pos_embedding`) is dropped: diffusers recomputes it.
    The transformer's `uncond_representation` is the shot encoder's representation of zeros.
    """
    src = _Consumer(state)
    out: dict[str, torch.Tensor] = {}
    for sat, dst in _RENAMES.items():
        for part in ("weight", "bias"):
            out[f"{dst}.{part}"] = src.take(f"{sat}.{part}")
    for i in range(num_layers):
        _convert_layer(src, i, out)
    shot_encoder = _convert_shot_encoder(src)
    out["uncond_representation"] = unconditional_representation(shot_encoder)
    src.drop("mixins.pos_embed.pos_embedding")
    for key in list(src.unused):
        if key.startswith(_DROPPED):
            src.drop(key)
    if src.unused:
        names = ", ".join(SAT_PREFIX + k for k in sorted(src.unused))
        raise ConversionError(f"unconverted keys: {names}")
    return ConvertedDecoder(transformer=out, shot_encoder=shot_encoder)


def check_state_dict(
    expected: Mapping[str, torch.Tensor],
    converted: Mapping[str, torch.Tensor],
    what: str = "decoder",
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
        raise ConversionError(f"converted {what} does not fit the model; " + "; ".join(problems))


def build_converted_decoder(
    state: Mapping[str, torch.Tensor],
    latent_size: tuple[int, int] | None = None,
    sample_frames: int = DEFAULT_SAMPLE_FRAMES,
    motion_scopes: Sequence[float] = DEFAULT_MOTION_SCOPES,
    dtype: torch.dtype = torch.float32,
) -> tuple[AnimeGamerTransformer3DModel, AnimeGamerShotEncoder]:
    """The transformer and the shot encoder holding the converted weights of a release state
    dict (prefix removed)."""
    config = infer_transformer_config(state, latent_size, sample_frames, motion_scopes)
    converted = convert_state_dict(state, config["num_layers"])
    with init_empty_weights(include_buffers=False):
        model = AnimeGamerTransformer3DModel(**config)
    check_state_dict(model.state_dict(), converted.transformer)
    table = state.get("mixins.pos_embed.pos_embedding")
    if table is not None:
        diff = (table[0].float() - model.patch_embed.pos_embedding[0]).abs().max().item()
        # values lie in [-1, 1]: allow the rounding of a half-precision checkpoint
        if diff > max(1e-4, torch.finfo(table.dtype).eps):
            raise ConversionError(
                f"{SAT_PREFIX}mixins.pos_embed.pos_embedding differs from the sincos table "
                f"by {diff:.2e}"
            )
    # One tensor at a time, each fp32 merge freed once cast: peak about the output, not two
    # copies. Chunks of the fused qkv share storage: clone, as safetensors refuses shared tensors.
    weights = {}
    for key in list(converted.transformer):
        weights[key] = converted.transformer.pop(key).to(dtype).clone()
    model.load_state_dict(weights, strict=True, assign=True)
    return model.eval(), build_shot_encoder(converted.shot_encoder, dtype)


def convert_decoder(
    release_dir: Path,
    out: Path,
    latent_size: tuple[int, int] | None = None,
    sample_frames: int = DEFAULT_SAMPLE_FRAMES,
    motion_scopes: Sequence[float] = DEFAULT_MOTION_SCOPES,
    dtype: torch.dtype | None = None,
) -> Path:
    """Convert the release decoder in `release_dir` into the pipeline folder `out`; returns `out`.

    `dtype`: of the output weights; None keeps the release's (of its patch embedding), as the
    MLLM converter does, so a bf16 release is not doubled to fp32 on disk and in RAM. The
    transformer is written in shards of `TRANSFORMER_SHARD_SIZE`: safetensors copies a shard
    into one buffer as it writes it.

    Writes `out/transformer/`, `out/shot_encoder/`, `out/scheduler/` and `out/model_index.json`:
    with CogVideoX-2B's
    VAE as `out/vae/` (the character converter links it there), `out` loads with
    `AnimeGamerPipeline.from_pretrained`.
    """
    state = load_release_state_dict(Path(release_dir))
    if dtype is None:
        dtype = _require(state, "mixins.patch_embed.proj.weight").dtype
    model, shot_encoder = build_converted_decoder(
        state, latent_size, sample_frames, motion_scopes, dtype
    )
    out = Path(out)
    model.save_pretrained(
        out / "transformer", safe_serialization=True, max_shard_size=TRANSFORMER_SHARD_SIZE
    )
    shot_encoder.save_pretrained(out / "shot_encoder", safe_serialization=True)
    save_scheduler(out)
    write_model_index(out)
    return out
