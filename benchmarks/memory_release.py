"""The release's files at full size or small, with random weights, for `benchmarks/memory.py`:
the base Mistral folder (config, safetensors shards with their index, tokenizer files), the MLLM
checkpoint without the frozen base weights, the decoder's SAT/DeepSpeed folder and the VAE in
diffusers' format. Each file or shard is generated and written on its own, so writing needs about
one shard of memory."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from animegamer.models.decoder_defaults import RELEASE_CHECKPOINT_NAME
from animegamer.models.game_state_defaults import (
    FULL_REPRESENTATION_DIM,
    MISTRAL_7B_ARCHITECTURE,
)
from animegamer.models.tiny_decoder import (
    SatDecoderSizes,
    release_position_table,
    sat_decoder_state_dict,
)
from benchmarks.memory_sampling import GB

SHARD_BYTES = 2 * 2**30
"""Shard size of the written base model: writing needs about one shard of memory."""
POOL_VALUES = 1 << 24
RELEASE_LORA_RANK = 32
RELEASE_STEP = "10000"
CHARACTER = "Qiqi"


@dataclass(frozen=True)
class Scale:
    """Sizes of the written release: `--full-size` or `--small`."""

    mistral: dict
    decoder: SatDecoderSizes
    vae: dict = field(default_factory=dict)

    @property
    def representation_dim(self) -> int:
        return self.decoder.hidden


FULL = Scale(MISTRAL_7B_ARCHITECTURE, SatDecoderSizes())
SMALL = Scale(
    dict(MISTRAL_7B_ARCHITECTURE, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
         num_attention_heads=4, num_key_value_heads=2, head_dim=64),
    SatDecoderSizes(num_layers=2, hidden=128, heads=2, time_embed_dim=64,
                    latent_size=(8, 12), text_hidden=256, image_hidden=64),
    {"block_out_channels": (4, 4, 8, 8), "layers_per_block": 1, "norm_num_groups": 2,
     "sample_height": 64, "sample_width": 96},
)
assert FULL.representation_dim == FULL_REPRESENTATION_DIM


@dataclass(frozen=True)
class Layout:
    """Where everything lies under the work folder."""

    root: Path

    @property
    def base_llm(self) -> Path:
        return self.root / "Mistral-7B-Instruct-v0.1"

    @property
    def mllm_bin(self) -> Path:
        return self.root / f"MLLM-{CHARACTER}" / "pytorch_model.bin"

    @property
    def decoder_dir(self) -> Path:
        return self.root / f"VDM_Decoder-{CHARACTER}"

    @property
    def vae_dir(self) -> Path:
        return self.root / "CogVideoX-2b" / "vae"

    @property
    def character(self) -> Path:
        return self.root / "character"

    @property
    def release_dirs(self) -> tuple[Path, ...]:
        return (self.base_llm, self.mllm_bin.parent, self.decoder_dir, self.vae_dir.parent)


# ---- writing the release, one file or shard at a time ----


class RandomPool:
    """Random bf16 values at the cost of a copy: a tensor is a seeded window of one pool of
    standard normal values, repeated (drawing 9 billion normal values would take the 2 cores
    of a small machine most of an hour; the memory measured is the same)."""

    def __init__(self, seed: int, size: int = POOL_VALUES):
        generator = torch.Generator().manual_seed(seed)
        self.pool = torch.randn(2 * size, generator=generator).to(torch.bfloat16)
        self.size = size
        self.offsets = torch.Generator().manual_seed(seed + 1)

    def __call__(self, shape: tuple[int, ...], scale: float) -> torch.Tensor:
        count = int(torch.Size(shape).numel())
        start = int(torch.randint(self.size, (), generator=self.offsets))
        window = self.pool[start:start + self.size]
        values = window.repeat(-(-count // self.size))[:count] if count > self.size else (
            window[:count].clone())
        return values.mul_(scale).view(shape)


def _mistral_shapes(mistral: dict, vocab_size: int) -> dict[str, tuple[int, ...]]:
    from transformers import MistralConfig, MistralForCausalLM

    with torch.device("meta"):
        model = MistralForCausalLM(MistralConfig(vocab_size=vocab_size, **mistral))
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def write_base_llm(scale: Scale, out: Path, seed: int = 0) -> None:
    """The base model's folder as the Hub has it: config, sharded safetensors with their
    index, tokenizer files (`build_tiny_base_tokenizer`: 32000 ids, Llama-style)."""
    from safetensors.torch import save_file
    from transformers import MistralConfig

    from animegamer.models.tiny_game_state import build_tiny_base_tokenizer
    from animegamer.models.tokens import BASE_VOCAB_SIZE

    out.mkdir(parents=True)
    config = MistralConfig(vocab_size=BASE_VOCAB_SIZE, dtype="bfloat16", **scale.mistral)
    config.save_pretrained(out)
    build_tiny_base_tokenizer().save_pretrained(out)
    shapes = _mistral_shapes(scale.mistral, BASE_VOCAB_SIZE)
    shards: list[list[str]] = [[]]
    size = 0
    for key, shape in shapes.items():
        nbytes = 2 * int(torch.Size(shape).numel())
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append(key)
        size += nbytes
    random = RandomPool(seed)
    weight_map, total = {}, 0
    for number, keys in enumerate(shards, start=1):
        name = f"model-{number:05d}-of-{len(shards):05d}.safetensors"
        tensors = {k: torch.ones(shapes[k], dtype=torch.bfloat16) if k.endswith("norm.weight")
                   else random(shapes[k], 0.02) for k in keys}
        total += sum(t.nbytes for t in tensors.values())
        save_file(tensors, out / name, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(keys, name))
        del tensors
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def write_mllm_release(scale: Scale, out: Path, seed: int = 1) -> None:
    """The release's `pytorch_model.bin` (PEFT names), without the frozen base weights."""
    from animegamer.characters.conversion.mllm import (
        ATTENTION_PROJECTIONS,
        LAYER_NORMS,
        MLP_PROJECTIONS,
        RELEASE_LLM_PREFIX,
    )
    from animegamer.models.tokens import BASE_VOCAB_SIZE, VOCAB_SIZE

    random = RandomPool(seed)
    shapes = _mistral_shapes(scale.mistral, BASE_VOCAB_SIZE)
    hidden, width, rank = scale.mistral["hidden_size"], scale.representation_dim, RELEASE_LORA_RANK
    state = {}
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        state[RELEASE_LLM_PREFIX + name] = random((VOCAB_SIZE, hidden), 0.02)
    for i in range(scale.mistral["num_hidden_layers"]):
        for group, names in (("self_attn", ATTENTION_PROJECTIONS), ("mlp", MLP_PROJECTIONS)):
            for proj in names:
                prefixed = f"{RELEASE_LLM_PREFIX}model.layers.{i}.{group}.{proj}"
                rows, columns = shapes[f"model.layers.{i}.{group}.{proj}.weight"]
                state[f"{prefixed}.lora_A.default.weight"] = random((rank, columns), 0.02)
                state[f"{prefixed}.lora_B.default.weight"] = random((rows, rank), 0.02)
    norms = [f"model.layers.{i}.{n}" for i in range(scale.mistral["num_hidden_layers"])
             for n in LAYER_NORMS]
    for name in [*norms, "model.norm"]:
        state[f"{RELEASE_LLM_PREFIX}{name}.modules_to_save.default.weight"] = torch.ones(
            hidden, dtype=torch.bfloat16)
    for key, shape in {
        "input_resampler.proj.0.weight": (hidden, width), "input_resampler.proj.0.bias": (hidden,),
        "input_resampler.proj.2.weight": (hidden, hidden), "input_resampler.proj.2.bias": (hidden,),
        "output_resampler.proj.0.weight": (width, hidden), "output_resampler.proj.0.bias": (width,),
        "output_resampler.proj.2.weight": (width, width), "output_resampler.proj.2.bias": (width,),
    }.items():
        state[key] = random(shape, shape[-1] ** -0.5)
    out.parent.mkdir(parents=True)
    torch.save(state, out)


def write_decoder_release(scale: Scale, out: Path, seed: int = 2) -> None:
    """The SAT/DeepSpeed folder: `latest` and `<step>/mp_rank_00_model_states.pt` (bf16)."""
    random = RandomPool(seed)
    meta = sat_decoder_state_dict(scale.decoder, device="meta")
    state = {}
    for key, tensor in meta.items():
        shape = tuple(tensor.shape)
        if key.endswith("pos_embed.pos_embedding"):
            state[key] = release_position_table(scale.decoder).to(torch.bfloat16)
        elif "norm" in key and key.endswith(".weight"):
            state[key] = random(shape, 0.1).add_(1)
        else:
            state[key] = random(shape, shape[-1] ** -0.5 if len(shape) > 1 else 0.1)
    (out / RELEASE_STEP).mkdir(parents=True)
    (out / "latest").write_text(RELEASE_STEP)
    torch.save({"module": state}, out / RELEASE_STEP / RELEASE_CHECKPOINT_NAME)


def write_vae(scale: Scale, out: Path, seed: int = 3) -> None:
    """CogVideoX's VAE in diffusers' layout (`--full-size`: the CogVideoX-2b architecture)."""
    from diffusers.models.autoencoders.autoencoder_kl_cogvideox import AutoencoderKLCogVideoX

    torch.manual_seed(seed)
    AutoencoderKLCogVideoX(**scale.vae).save_pretrained(out)


def write_release(scale: Scale, layout: Layout, preset: str = "") -> dict:
    """The `write` stage: every file of the release under `layout` (`preset` is not used: every
    stage takes one)."""
    write_base_llm(scale, layout.base_llm)
    write_mllm_release(scale, layout.mllm_bin)
    write_decoder_release(scale, layout.decoder_dir)
    write_vae(scale, layout.vae_dir)
    return {"release_gb": round(sum(folder_size(p) for p in layout.release_dirs) / GB, 2)}


def folder_size(path: Path) -> int:
    """Bytes of a file, or of every file under a folder."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
