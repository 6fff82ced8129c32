"""Release MLLM checkpoint (PEFT LoRA wrapper) → plain `MistralForCausalLM` + resamplers.

Input: the release's `pytorch_model.bin` (keys `llm.base_model.model.…` in PEFT naming, plus
`input_resampler.*`/`output_resampler.*`) and the base Mistral folder (config, tokenizer and,
when the release lacks the frozen base weights, those weights). Output, in `out/`, the layout
`GameStateModel.from_pretrained` reads: `llm/` (safetensors, vocab 32284, LoRA merged in fp32),
`resamplers.safetensors`, `tokenizer/` and `game_state_config.json` (the release's
`representation_source`, `last_226`).

Every key and shape is checked before anything is written; anything that would not convert
completely raises `ConversionError` naming the file and the keys. Tensors are memory-mapped and
the output is written shard by shard, so a 7B conversion needs about one shard of RAM.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import GenerationConfig, MistralConfig

from animegamer.characters.conversion.errors import ConversionError
from animegamer.models.game_state_config import GameStateConfig
from animegamer.models.game_state_defaults import LLM_FOLDER, RESAMPLERS_NAME, TOKENIZER_FOLDER
from animegamer.models.tokens import BOS_ID, EOS_ID, VOCAB_SIZE, TokenizerError, build_tokenizer

logger = logging.getLogger(__name__)

LORA_ALPHA = 32
"""LoRA alpha of the release (r is read from the tensors; scaling = alpha / r)."""
RELEASE_LLM_PREFIX = "llm.base_model.model."
ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")
LAYER_NORMS = ("input_layernorm", "post_attention_layernorm")
SHARD_BYTES = 4 * 2**30
MAX_LISTED_KEYS = 20


def _key_list(keys: Iterable[str]) -> str:
    keys = sorted(keys)
    shown = ", ".join(keys[:MAX_LISTED_KEYS])
    return shown + (f", … ({len(keys)} in all)" if len(keys) > MAX_LISTED_KEYS else "")


def load_checkpoint(path: Path) -> dict[str, torch.Tensor]:
    """A flat tensor state dict from a `.bin`, memory-mapped; ConversionError when unreadable."""
    if not path.is_file():
        raise ConversionError(f"{path}: no such file")
    try:
        try:
            state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc):
                raise
            # Legacy (non-zip) torch.save format cannot be memory-mapped.
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ConversionError(f"{path}: not a readable PyTorch checkpoint ({exc})") from exc
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise ConversionError(f"{path}: not a flat state dict of tensors")
    return state


class BaseWeights:
    """The base model's weights, read lazily (safetensors, sharded or not, or a `.bin`)."""

    def __init__(self, directory: Path):
        self.directory = directory
        self._files: dict[str, Path] = {}
        self._bins: dict[Path, dict[str, torch.Tensor]] = {}
        for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
            index = directory / index_name
            if index.is_file():
                weight_map = json.loads(index.read_text())["weight_map"]
                self._files = {k: directory / f for k, f in weight_map.items()}
                return
        for name in ("model.safetensors", "pytorch_model.bin"):
            path = directory / name
            if path.is_file():
                self._files = dict.fromkeys(self._keys_of(path), path)
                return

    def _keys_of(self, path: Path) -> list[str]:
        if path.suffix == ".safetensors":
            try:
                with safe_open(path, framework="pt") as f:
                    return list(f.keys())
            except Exception as exc:
                raise ConversionError(f"{path}: not a readable safetensors file ({exc})") from exc
        return list(self._bin(path))

    def _bin(self, path: Path) -> dict[str, torch.Tensor]:
        if path not in self._bins:
            self._bins[path] = load_checkpoint(path)
        return self._bins[path]

    def __contains__(self, key: str) -> bool:
        return key in self._files

    def get(self, key: str) -> torch.Tensor:
        path = self._files[key]
        if path.suffix != ".safetensors":
            return self._bin(path)[key]
        with safe_open(path, framework="pt") as f:
            return f.get_tensor(key)

    def shape(self, key: str) -> tuple[int, ...]:
        path = self._files[key]
        if path.suffix != ".safetensors":
            return tuple(self._bin(path)[key].shape)
        with safe_open(path, framework="pt") as f:
            return tuple(f.get_slice(key).get_shape())


def _planned(tensor: torch.Tensor | None) -> torch.Tensor:
    """A tensor `_Planner._take` returned, used once planning is over: `raise_if_incomplete`
    has refused the release if any was missing or misshapen (None)."""
    assert tensor is not None, "a planned tensor was used before raise_if_incomplete()"
    return tensor


@dataclass
class _Entry:
    """One output tensor: its shape and how to compute it."""

    shape: tuple[int, ...]
    make: Callable[[], torch.Tensor]


class _Planner:
    """Checks the release against the base config and plans every output tensor."""

    def __init__(self, release_path: Path, release: dict[str, torch.Tensor],
                 base: BaseWeights, config: MistralConfig):
        self.path = release_path
        self.release = release
        self.base = base
        self.config = config
        self.used: set[str] = set()
        self.missing: list[str] = []
        self.bad_shapes: list[str] = []
        self.dtype = self._output_dtype()

    def _output_dtype(self) -> torch.dtype:
        embed = self.release.get(RELEASE_LLM_PREFIX + "model.embed_tokens.weight")
        if embed is not None and embed.is_floating_point():
            return embed.dtype
        return torch.float32

    def _take(self, key: str, shape: tuple[int, ...]) -> torch.Tensor | None:
        if key not in self.release:
            self.missing.append(key)
            return None
        self.used.add(key)
        tensor = self.release[key]
        if tuple(tensor.shape) != shape:
            self.bad_shapes.append(f"{key}: {tuple(tensor.shape)}, expected {shape}")
            return None
        return tensor

    def _copy(self, key: str, shape: tuple[int, ...]) -> _Entry:
        tensor = self._take(key, shape)
        return _Entry(shape, lambda: _planned(tensor).to(self.dtype))

    def _linear(self, name: str, shape: tuple[int, ...]) -> _Entry:
        """`name` = model.layers.N.….q_proj; W = W0 + (alpha/r)·B@A merged in fp32."""
        prefixed = RELEASE_LLM_PREFIX + name
        rank = self._lora_rank(prefixed)
        a = self._take(f"{prefixed}.lora_A.default.weight", (rank, shape[1]))
        b = self._take(f"{prefixed}.lora_B.default.weight", (shape[0], rank))
        styles = [k for k in (f"{prefixed}.base_layer.weight", f"{prefixed}.weight")
                  if k in self.release]
        if styles:
            w0 = self._take(styles[0], shape)
            self._check_against_base(styles[0], w0, f"{name}.weight")
        elif f"{name}.weight" in self.base:
            got = self.base.shape(f"{name}.weight")
            if got != shape:
                self.bad_shapes.append(f"{self.base.directory}: {name}.weight: {got}, "
                                       f"expected {shape}")
            w0 = None
        else:
            self.missing.append(f"{prefixed}.base_layer.weight (not in {self.base.directory} "
                                "either)")
            w0 = None

        def make() -> torch.Tensor:
            base = w0 if w0 is not None else self.base.get(f"{name}.weight")
            delta = _planned(b).float() @ _planned(a).float()
            merged = base.float() + (LORA_ALPHA / rank) * delta
            return merged.to(self.dtype)

        return _Entry(shape, make)

    def _lora_rank(self, prefixed: str) -> int:
        a = self.release.get(f"{prefixed}.lora_A.default.weight")
        b = self.release.get(f"{prefixed}.lora_B.default.weight")
        if a is not None and a.ndim == 2:
            return a.shape[0]
        return b.shape[1] if b is not None and b.ndim == 2 else 0

    def _check_against_base(self, key: str, tensor: torch.Tensor | None, base_key: str) -> None:
        if tensor is None or base_key not in self.base:
            return
        if not torch.equal(tensor, self.base.get(base_key).to(tensor.dtype)):
            raise ConversionError(f"{self.path}: {key} differs from {base_key} of "
                                  f"{self.base.directory}: is that the right base model?")

    def _norm(self, name: str, width: int) -> _Entry:
        ignored = f"{RELEASE_LLM_PREFIX}{name}.original_module.weight"
        if ignored in self.release:
            self.used.add(ignored)
        return self._copy(f"{RELEASE_LLM_PREFIX}{name}.modules_to_save.default.weight", (width,))

    def llm(self) -> dict[str, _Entry]:
        c = self.config
        hidden, inner = c.hidden_size, c.intermediate_size
        head_dim = getattr(c, "head_dim", None) or hidden // c.num_attention_heads
        q_width = c.num_attention_heads * head_dim
        kv_width = c.num_key_value_heads * head_dim
        shapes = {"q_proj": (q_width, hidden), "k_proj": (kv_width, hidden),
                  "v_proj": (kv_width, hidden), "o_proj": (hidden, q_width),
                  "gate_proj": (inner, hidden), "up_proj": (inner, hidden),
                  "down_proj": (hidden, inner)}
        plan = {"model.embed_tokens.weight": self._copy(
            RELEASE_LLM_PREFIX + "model.embed_tokens.weight", (VOCAB_SIZE, hidden))}
        for i in range(c.num_hidden_layers):
            layer = f"model.layers.{i}"
            for group, names in (("self_attn", ATTENTION_PROJECTIONS), ("mlp", MLP_PROJECTIONS)):
                for proj in names:
                    name = f"{layer}.{group}.{proj}"
                    plan[f"{name}.weight"] = self._linear(name, shapes[proj])
            for norm in LAYER_NORMS:
                plan[f"{layer}.{norm}.weight"] = self._norm(f"{layer}.{norm}", hidden)
        plan["model.norm.weight"] = self._norm("model.norm", hidden)
        plan["lm_head.weight"] = self._copy(RELEASE_LLM_PREFIX + "lm_head.weight",
                                            (VOCAB_SIZE, hidden))
        return plan

    def resamplers(self) -> dict[str, torch.Tensor | None]:
        hidden = self.config.hidden_size
        first = self.release.get("input_resampler.proj.0.weight")
        width = first.shape[1] if first is not None and first.ndim == 2 else 0
        shapes = {
            "input_resampler.proj.0.weight": (hidden, width),
            "input_resampler.proj.0.bias": (hidden,),
            "input_resampler.proj.2.weight": (hidden, hidden),
            "input_resampler.proj.2.bias": (hidden,),
            "output_resampler.proj.0.weight": (width, hidden),
            "output_resampler.proj.0.bias": (width,),
            "output_resampler.proj.2.weight": (width, width),
            "output_resampler.proj.2.bias": (width,),
        }
        return {key: self._take(key, shape) for key, shape in shapes.items()}

    def raise_if_incomplete(self) -> None:
        unexpected = set(self.release) - self.used
        problems = []
        if self.missing:
            problems.append(f"missing keys: {_key_list(self.missing)}")
        if unexpected:
            problems.append(f"unexpected keys: {_key_list(unexpected)}")
        if self.bad_shapes:
            problems.append(f"wrong shapes: {'; '.join(self.bad_shapes[:MAX_LISTED_KEYS])}")
        if problems:
            raise ConversionError(f"{self.path}: cannot convert completely: " + "; ".join(problems))


def _load_base_config(base_llm: Path) -> MistralConfig:
    path = base_llm / "config.json"
    if not path.is_file():
        raise ConversionError(f"{path}: no such file (the base LLM folder needs its config)")
    try:
        raw = json.loads(path.read_text())
    except ValueError as exc:
        raise ConversionError(f"{path}: not valid JSON ({exc})") from exc
    if raw.get("model_type") != "mistral":
        raise ConversionError(f"{path}: model_type {raw.get('model_type')!r}, expected 'mistral'")
    return MistralConfig.from_pretrained(base_llm)


def _shards(plan: dict[str, _Entry], dtype: torch.dtype) -> list[list[str]]:
    shards: list[list[str]] = [[]]
    size = 0
    itemsize = torch.empty((), dtype=dtype).element_size()
    for key, entry in plan.items():
        nbytes = itemsize * int(torch.Size(entry.shape).numel())
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append(key)
        size += nbytes
    return shards


def _write_llm(plan: dict[str, _Entry], config: MistralConfig, dtype: torch.dtype,
               out: Path) -> None:
    out.mkdir(parents=True)
    config.vocab_size = VOCAB_SIZE
    config.architectures = ["MistralForCausalLM"]
    config.dtype = dtype
    config.save_pretrained(out)
    GenerationConfig(bos_token_id=BOS_ID, eos_token_id=EOS_ID).save_pretrained(out)
    shards = _shards(plan, dtype)
    weight_map: dict[str, str] = {}
    total = 0
    for number, keys in enumerate(shards, start=1):
        name = ("model.safetensors" if len(shards) == 1
                else f"model-{number:05d}-of-{len(shards):05d}.safetensors")
        tensors = {key: plan[key].make().contiguous() for key in keys}
        total += sum(t.numel() * t.element_size() for t in tensors.values())
        save_file(tensors, out / name, metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(keys, name))
        del tensors
    if len(shards) > 1:
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def _replace_dir(staged: Path, final: Path) -> None:
    if final.exists():
        shutil.rmtree(final)
    staged.rename(final)


def convert_mllm(release_bin: Path, base_llm: Path, out: Path) -> None:
    """Convert the release MLLM into `out/llm`, `out/resamplers.safetensors`, `out/tokenizer`
    and `out/game_state_config.json`."""
    release_bin, base_llm, out = Path(release_bin), Path(base_llm), Path(out)
    config = _load_base_config(base_llm)
    release = load_checkpoint(release_bin)
    planner = _Planner(release_bin, release, BaseWeights(base_llm), config)
    llm_plan = planner.llm()
    planned_resamplers = planner.resamplers()
    planner.raise_if_incomplete()
    resamplers = {key: _planned(tensor) for key, tensor in planned_resamplers.items()}
    try:
        tokenizer = build_tokenizer(base_llm)
    except (OSError, ValueError, TokenizerError) as exc:
        raise ConversionError(f"{base_llm}: cannot build the AnimeGamer tokenizer ({exc})") from exc

    out.mkdir(parents=True, exist_ok=True)
    staged_llm = out / f"{LLM_FOLDER}.partial"
    staged_tokenizer = out / f"{TOKENIZER_FOLDER}.partial"
    for staged in (staged_llm, staged_tokenizer):
        if staged.exists():
            shutil.rmtree(staged)
    _write_llm(llm_plan, config, planner.dtype, staged_llm)
    tokenizer.save_pretrained(staged_tokenizer)
    save_file({k: v.contiguous() for k, v in resamplers.items()},
              out / RESAMPLERS_NAME, metadata={"format": "pt"})
    GameStateConfig(
        text_config=config, representation_dim=resamplers["output_resampler.proj.2.weight"].shape[0]
    ).write_layout_file(out)
    _replace_dir(staged_llm, out / LLM_FOLDER)
    _replace_dir(staged_tokenizer, out / TOKENIZER_FOLDER)
    logger.info("converted %s → %s (%s)", release_bin, out, planner.dtype)

