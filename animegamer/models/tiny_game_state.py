"""Tiny random-weight game-state models: same architecture and files, built in well under a second.

For tests and the preview engine; they need no download and no `../shared`. The tiny tokenizer
is a character-level byte-fallback BPE with exactly 32000 base ids (`<unk>` 0, `<s>` 1, `</s>` 2)
run through the same `add_animegamer_tokens` as the real one. A small world's model may make its
vocabulary whole-word tokens (`words`), as a real LLM's BPE has its common words: a tiny model
then reads a word from one embedding instead of composing it from letters.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import LlamaTokenizer, MistralConfig, MistralForCausalLM, PreTrainedTokenizerFast

from animegamer.models.game_state import GameStateConfig, GameStateModel, Resampler
from animegamer.models.game_state_defaults import MISTRAL_7B_ARCHITECTURE
from animegamer.models.tokens import BASE_VOCAB_SIZE, VOCAB_SIZE, add_animegamer_tokens

TINY_LORA_RANK = 32
TINY_HEAD_DIM = 16
_SIZES = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
          "num_key_value_heads")
TINY_ARCHITECTURE: dict[str, Any] = {
    **{key: value for key, value in MISTRAL_7B_ARCHITECTURE.items() if key not in _SIZES},
    "head_dim": TINY_HEAD_DIM,
    "max_position_embeddings": 4096,
}
"""Mistral-7B's architecture but its sizes (given per model) and a shorter context."""
_LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
            "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
_LAYER_NORMS = ("input_layernorm", "post_attention_layernorm")
BASE_KEY_STYLES = ("base_layer", "plain", "absent")


def tiny_mistral_config(vocab_size: int = VOCAB_SIZE, hidden_size: int = 64,
                        num_hidden_layers: int = 2) -> MistralConfig:
    """The tiny Mistral architecture (default: 2 layers, hidden 64, 4 heads, 2 KV heads): heads
    of 16, half as many KV heads, an MLP twice the width."""
    architecture = dict(TINY_ARCHITECTURE, hidden_size=hidden_size,
                        intermediate_size=2 * hidden_size, num_hidden_layers=num_hidden_layers,
                        num_attention_heads=hidden_size // TINY_HEAD_DIM,
                        num_key_value_heads=max(1, hidden_size // 32))
    return MistralConfig(vocab_size=vocab_size, **architecture)


def build_tiny_base_tokenizer(words: Sequence[str] = ()) -> LlamaTokenizer:
    """A 32000-id Llama-style tokenizer: bytes, printable characters, `▁`+letter, `▁`+each of
    `words` (ASCII letters; built by a chain of merges, one letter at a time), fillers."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    for char in ["▁", *string.ascii_letters, *string.digits, *string.punctuation]:
        vocab.setdefault(char, len(vocab))
    merges = [("▁", letter) for letter in string.ascii_letters]
    vocab.update({a + b: len(vocab) + i for i, (a, b) in enumerate(merges)})
    for word in words:
        if not word.isascii() or not word.isalpha():
            raise ValueError(f"{word!r}: whole-word tokens are ASCII letters only")
        piece = "▁" + word[0]
        for letter in word[1:]:
            if (piece, letter) not in merges:
                merges.append((piece, letter))
            piece += letter
            vocab.setdefault(piece, len(vocab))
    filler = BASE_VOCAB_SIZE - len(vocab)
    vocab.update({f"▁unused{i}": len(vocab) + i for i in range(filler)})
    return LlamaTokenizer(vocab=vocab, merges=merges)


def build_tiny_tokenizer(words: Sequence[str] = ()) -> PreTrainedTokenizerFast:
    """The tiny base tokenizer plus the 284 AnimeGamer tokens at ids 32000..32283."""
    return add_animegamer_tokens(build_tiny_base_tokenizer(words))


def _seeded_model(config: MistralConfig, seed: int) -> MistralForCausalLM:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MistralForCausalLM(config).eval()


def _resampler_tensors(hidden: int, representation_dim: int, seed: int) -> dict[str, torch.Tensor]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + 1)
        modules = {"input_resampler": Resampler(representation_dim, hidden),
                   "output_resampler": Resampler(hidden, representation_dim)}
    return {f"{name}.{key}": value.detach().contiguous()
            for name, module in modules.items() for key, value in module.state_dict().items()}


def tiny_game_state_model(representation_dim: int = 64, seed: int = 0,
                          words: Sequence[str] = (), hidden_size: int = 64,
                          num_hidden_layers: int = 2, **config: Any) -> GameStateModel:
    """A random game-state model with the tiny tokenizer (`words` as whole-word tokens), in
    memory; `config` sets `GameStateConfig` fields (e.g. `representation_source`)."""
    llm = _seeded_model(tiny_mistral_config(hidden_size=hidden_size,
                                            num_hidden_layers=num_hidden_layers), seed)
    with torch.random.fork_rng(devices=[]):
        model = GameStateModel(
            GameStateConfig(text_config=llm.config, representation_dim=representation_dim,
                            **config),
            language_model=llm,
        )
    model.load_resamplers(_resampler_tensors(llm.config.hidden_size, representation_dim, seed))
    model.tokenizer = build_tiny_tokenizer(words)
    return model.eval()


def save_tiny_game_state(out: Path, representation_dim: int = 64, seed: int = 0) -> Path:
    """Write a random game-state model in the project layout (llm/, resamplers, tokenizer/)."""
    tiny_game_state_model(representation_dim, seed).save_pretrained(out)
    return Path(out)


def write_tiny_mllm_release(directory: Path, representation_dim: int = 64, seed: int = 0,
                            base_key_style: str = "base_layer") -> tuple[Path, Path]:
    """Write a synthetic release: `release/pytorch_model.bin` (PEFT keys) and `base_llm/`.

    `base_key_style` names the frozen base weights in the release as newer PEFT does
    (`….base_layer.weight`), as older PEFT does (`….weight`), or leaves them out ("absent":
    the converter must take them from `base_llm/`). LoRA factors and the trained norms are
    random and nonzero; embeddings and lm_head cover all 32284 ids and differ from the base.
    Returns `(release_bin, base_llm_dir)`.
    """
    if base_key_style not in BASE_KEY_STYLES:
        raise ValueError(f"base_key_style must be one of {BASE_KEY_STYLES}")
    directory = Path(directory)
    base = _seeded_model(tiny_mistral_config(BASE_VOCAB_SIZE), seed)
    base_dir = directory / "base_llm"
    base.save_pretrained(base_dir)
    build_tiny_base_tokenizer().save_pretrained(base_dir)

    config = base.config
    base_state = base.state_dict()
    prefix = "llm.base_model.model."
    release: dict[str, torch.Tensor] = {}
    generator = torch.Generator().manual_seed(seed + 2)

    def noise(*shape: int, scale: float = 0.02) -> torch.Tensor:
        return torch.randn(*shape, generator=generator) * scale

    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        release[prefix + name] = noise(VOCAB_SIZE, config.hidden_size)
    for i in range(config.num_hidden_layers):
        for linear in _LINEARS:
            name = f"model.layers.{i}.{linear}"
            weight = base_state[f"{name}.weight"]
            if base_key_style == "base_layer":
                release[f"{prefix}{name}.base_layer.weight"] = weight.clone()
            elif base_key_style == "plain":
                release[f"{prefix}{name}.weight"] = weight.clone()
            out_features, in_features = weight.shape
            release[f"{prefix}{name}.lora_A.default.weight"] = noise(TINY_LORA_RANK, in_features)
            release[f"{prefix}{name}.lora_B.default.weight"] = noise(out_features, TINY_LORA_RANK)
    norms = [f"model.layers.{i}.{n}" for i in range(config.num_hidden_layers) for n in _LAYER_NORMS]
    for name in [*norms, "model.norm"]:
        release[f"{prefix}{name}.original_module.weight"] = base_state[f"{name}.weight"].clone()
        release[f"{prefix}{name}.modules_to_save.default.weight"] = 1 + noise(
            config.hidden_size, scale=0.1)
    release.update(_resampler_tensors(config.hidden_size, representation_dim, seed))

    release_bin = directory / "release" / "pytorch_model.bin"
    release_bin.parent.mkdir(parents=True, exist_ok=True)
    torch.save(release, release_bin)
    return release_bin, base_dir
