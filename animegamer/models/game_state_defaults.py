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
