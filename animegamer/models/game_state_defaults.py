"""File names of the game-state model's part of a character folder, each defined once.

This module imports nothing, so the layout checks, the Hub resolver and the converter share
these names without loading torch or transformers.
"""

from __future__ import annotations

LLM_FOLDER = "llm"
"""The language model (`AutoModelForCausalLM.from_pretrained(DIR / LLM_FOLDER)`)."""

RESAMPLERS_NAME = "resamplers.safetensors"
"""Both resamplers, release-named (`input_resampler.proj.0.weight`, …)."""

TOKENIZER_FOLDER = "tokenizer"
"""Mistral's tokenizer plus the 284 AnimeGamer tokens."""

GAME_STATE_CONFIG_NAME = "game_state_config.json"
"""`GameStateConfig` without its `text_config` (that is `LLM_FOLDER/config.json`). Folders
converted before it existed lack it; the config is then derived (release defaults)."""

MISTRAL_7B_ARCHITECTURE: dict = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 32768,
    "sliding_window": 4096,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
"""`MistralConfig` fields of Mistral-7B-Instruct-v0.1, the release's base model (its vocabulary
size is not among them: 32000 in the base, 32284 with AnimeGamer's tokens)."""

FULL_REPRESENTATION_DIM = 1920
"""The release's representation width: CogVideoX-2B's inner width (30 heads × 64)."""
