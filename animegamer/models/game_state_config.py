"""Configuration of the game-state model (the Llava pattern: the language model's config inside).

No `from __future__ import annotations` here: the config is a strict dataclass, and its field
types are checked at run time (a `representation_source` typo is an error, not a silent default).
"""

import dataclasses
import json
from pathlib import Path
from typing import Any, ClassVar, Literal

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, PreTrainedConfig, __version__
from transformers.configuration_utils import SubConfigSpec

from animegamer.game.representation import REPRESENTATION_TOKENS
from animegamer.models.game_state_defaults import GAME_STATE_CONFIG_NAME
from animegamer.models.tokens import (
    FRAME0_ID,
    FRAME_END_ID,
    FRAME_ID,
    ML_ID,
    STRENGTH_MIN_ID,
    VOCAB_SIZE,
)

RepresentationSource = Literal["last_226", "queries"]


@strict
class GameStateConfig(PreTrainedConfig):
    r"""The game-state model: a causal language model plus two MLP resamplers.

    Args:
        text_config: the language model's config (default: Mistral-7B's with the AnimeGamer
            vocabulary).
        representation_dim: width of a shot representation (1920 for the release's decoder).
            The input resampler is `Linear(representation_dim, hidden) → GELU → Linear(hidden,
            hidden)`, the output resampler `Linear(hidden, representation_dim) → GELU →
            Linear(representation_dim, representation_dim)`, `hidden` the language model's width.
        representation_length: vectors in one representation (= frame positions of a prompt's
            video block).
        representation_source: which hidden states become the representation. `"last_226"`: the
            last 226 positions of the prompt (frames 3..225 and `</frame></img><ML>`), what the
            release does at play time and the default for converted releases; `"queries"`: the
            226 frame-query positions of the target turn, what the model is trained on (models
            trained by this project).
        frame_token_id, first_frame_token_id, frame_end_token_id, state_token_id,
        first_strength_token_id: `<frame>`, `<frame_00000>`, `</frame>`, `<ML>` and
            `<Strength_-5>`. The vocabulary fixes them (see `animegamer.models.tokens`); a config
            that disagrees is refused rather than misread.
    """

    model_type = "animegamer_game_state"
    sub_configs_defaults: ClassVar[dict[str, SubConfigSpec]] = {
        "text_config": SubConfigSpec(
            config_class=AutoConfig, model_type="mistral", init_kwargs={"vocab_size": VOCAB_SIZE}
        ),
    }

    text_config: dict | PreTrainedConfig | None = None
    representation_dim: int = 1920
    representation_length: int = REPRESENTATION_TOKENS
    representation_source: RepresentationSource = "last_226"
    frame_token_id: int = FRAME_ID
    first_frame_token_id: int = FRAME0_ID
    frame_end_token_id: int = FRAME_END_ID
    state_token_id: int = ML_ID
    first_strength_token_id: int = STRENGTH_MIN_ID
    tie_word_embeddings: bool = False

    def __post_init__(self, **kwargs: Any) -> None:
        # The base class sets `attn_implementation` (None when not given) on every sub-config;
        # a language model built or loaded before this config keeps its own.
        text_config = self.text_config
        kept = getattr(text_config, "_attn_implementation", None)
        super().__post_init__(**kwargs)
        if (kwargs.get("attn_implementation") is None and kept is not None
                and isinstance(text_config, PreTrainedConfig)):
            text_config._attn_implementation = kept

    def validate_vocabulary(self) -> None:
        fixed = {
            "representation_length": REPRESENTATION_TOKENS,
            "frame_token_id": FRAME_ID,
            "first_frame_token_id": FRAME0_ID,
            "frame_end_token_id": FRAME_END_ID,
            "state_token_id": ML_ID,
            "first_strength_token_id": STRENGTH_MIN_ID,
        }
        wrong = {name: getattr(self, name) for name, value in fixed.items()
                 if getattr(self, name) != value}
        if wrong:
            raise ValueError(f"{wrong} differ from the AnimeGamer vocabulary {fixed}")
        if self.representation_dim < 1:
            raise ValueError(f"representation_dim must be positive, got {self.representation_dim}")

    def write_layout_file(self, directory: str | Path) -> Path:
        """Write `game_state_config.json` into a character folder: this class's own fields, not
        `text_config` (it is `llm/config.json`) nor the generic ones (labels, …)."""
        inherited = {field.name for field in dataclasses.fields(PreTrainedConfig)}
        values = {"model_type": self.model_type, "transformers_version": __version__}
        values.update({field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                       if field.name not in inherited and field.name != "text_config"})
        path = Path(directory) / GAME_STATE_CONFIG_NAME
        path.write_text(json.dumps(values, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return path

    @classmethod
    def from_layout(cls, directory: str | Path, text_config: PreTrainedConfig,
                    representation_dim: int) -> "GameStateConfig":
        """The config of a character folder: its `game_state_config.json`, or, in a folder
        converted before that file existed, the release's defaults with `representation_dim`
        (read from the resamplers by the caller)."""
        path = Path(directory) / GAME_STATE_CONFIG_NAME
        if not path.is_file():
            return cls(text_config=text_config, representation_dim=representation_dim)
        values = json.loads(path.read_text(encoding="utf-8"))
        for key in ("model_type", "transformers_version", "text_config"):
            values.pop(key, None)
        return cls(text_config=text_config, **values)
