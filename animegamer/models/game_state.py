"""The game-state model: a causal language model (stock `MistralForCausalLM`) plus two MLP
resamplers, as one `transformers.PreTrainedModel` (the Llava pattern).

One forward pass over the prompt, with a bidirectional query block, gives the next shot's
representation (`GameStateConfig.representation_source` says which hidden states feed the output
resampler); greedy generation with the release's frame-token rule gives the state tokens.
History representations enter through the input resampler at the history frame blocks.

Its folder is a character folder's game-state part: `llm/` (loadable by
`AutoModelForCausalLM`), `resamplers.safetensors`, `tokenizer/` and `game_state_config.json`.
`save_pretrained` writes exactly that, the converter writes it from a release, and
`from_pretrained` reads it (also without `game_state_config.json`, as converted before).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from accelerate.utils.memory import clear_device_cache
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import (
    AutoModelForCausalLM,
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)
from transformers.cache_utils import Cache
from transformers.utils import ModelOutput

from animegamer.game.representation import REPRESENTATION_TOKENS
from animegamer.game.rules import Instruction
from animegamer.models.game_state_config import GameStateConfig
from animegamer.models.game_state_defaults import LLM_FOLDER, RESAMPLERS_NAME, TOKENIZER_FOLDER
from animegamer.models.generation_rules import FrameTokenRule, StateGrammarRule, states_or_zeros
from animegamer.models.tokens import (
    EOS_ID,
    STATE_TOKENS_GENERATED,
    GameStates,
    HistoryTurn,
    Prompt,
    attention_mask_4d,
    build_prompt,
    load_tokenizer,
)

__all__ = [
    "GameStateConfig",
    "GameStateModel",
    "GameStateOutput",
    "GameStates",
    "PlayedTurn",
    "Resampler",
]

RELEASE_MAX_NEW_TOKENS = 200
"""What the released demo generates; the states are in the first `STATE_TOKENS_GENERATED`."""
RESAMPLER_NAMES = ("input_resampler", "output_resampler")


class Resampler(nn.Module):
    """`Linear(in, out) → GELU → Linear(out, out)`, parameters `proj.{0,2}.*` (release names)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.proj = nn.Sequential(
            nn.Linear(in_features, out_features), nn.GELU(), nn.Linear(out_features, out_features)
        )

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.proj(hidden)


class PlayedTurn(Protocol):
    """A past turn as `predict` reads it (`game.Turn` is one): its instruction and its states."""

    @property
    def instruction(self) -> Instruction | str: ...

    @property
    def states(self) -> GameStates: ...


@dataclass
class GameStateOutput(ModelOutput):
    """`forward`'s output: the representation [1, 226, D], the LM logits and, given labels, the
    causal-LM loss."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    representation: torch.Tensor | None = None


def _text(instruction: Instruction | str) -> str:
    return instruction if isinstance(instruction, str) else instruction.text


class GameStateModel(PreTrainedModel):
    """The MLLM of a character: `language_model`, `input_resampler`, `output_resampler`, and the
    tokenizer (`tokenizer`, not a module: set by `from_pretrained`, saved by `save_pretrained`).

    Prompts are single sequences (`input_ids` [1, L] or [L]).
    """

    config_class = GameStateConfig
    config: GameStateConfig
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True

    def __init__(self, config: GameStateConfig, language_model: PreTrainedModel | None = None):
        """`language_model` (already built or loaded) stands in for a fresh one from
        `config.text_config`: loading a 7B model must not initialise one first."""
        super().__init__(config)
        self.language_model: PreTrainedModel = (
            language_model if language_model is not None
            else AutoModelForCausalLM.from_config(config.text_config)
        )
        hidden = config.get_text_config().hidden_size
        self.input_resampler = Resampler(config.representation_dim, hidden)
        self.output_resampler = Resampler(hidden, config.representation_dim)
        self.tokenizer: PreTrainedTokenizerFast | None = None
        self._offload_device: torch.device | None = None
        """Low-VRAM mode's execution device (`enable_model_cpu_offload`); None: off."""
        self.post_init()
        if language_model is not None:
            self.input_resampler.to(language_model.device, language_model.dtype)
            self.output_resampler.to(language_model.device, language_model.dtype)

    # ---- loading and saving: the character-folder layout ----

    @classmethod
    def from_pretrained(  # type: ignore[override]
        cls,
        pretrained_model_name_or_path: str | Path,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        *,
        attn_implementation: str = "sdpa",
        quantization_config: Any = None,
    ) -> GameStateModel:
        """Load a character folder (see the module docstring); bf16 on GPU, fp32 on CPU.

        The language model streams tensor by tensor from its memory-mapped shards straight to
        `device` and `dtype`; `quantization_config` (transformers', e.g. from
        `animegamer.serving.quantization`) quantizes it as it loads. The resamplers stay in `dtype`.
        """
        path = Path(pretrained_model_name_or_path)
        language_model = AutoModelForCausalLM.from_pretrained(
            path / LLM_FOLDER, dtype=dtype, attn_implementation=attn_implementation,
            device_map={"": torch.device(device)}, quantization_config=quantization_config,
        )
        tensors = load_file(path / RESAMPLERS_NAME)
        config = GameStateConfig.from_layout(
            path, language_model.config,
            representation_dim=tensors["output_resampler.proj.2.weight"].shape[0],
        )
        model = cls(config, language_model=language_model)
        model.load_resamplers(tensors)
        model.tokenizer = load_tokenizer(path / TOKENIZER_FOLDER)
        return model.eval()

    def save_pretrained(  # type: ignore[override]
        self,
        save_directory: str | Path,
        *,
        is_main_process: bool = True,
        state_dict: Mapping[str, torch.Tensor] | None = None,
        max_shard_size: int | str = "5GB",
    ) -> None:
        """Write the character-folder layout that `from_pretrained` reads.

        `state_dict` (e.g. gathered by accelerate from a sharded run) replaces the model's own.
        """
        if not is_main_process:
            return
        directory = Path(save_directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = dict(self.state_dict() if state_dict is None else state_dict)
        prefix = "language_model."
        self.language_model.save_pretrained(
            directory / LLM_FOLDER, max_shard_size=max_shard_size,
            state_dict={k.removeprefix(prefix): v for k, v in state.items()
                        if k.startswith(prefix)},
        )
        resamplers = {k: v.detach().contiguous() for k, v in state.items()
                      if k.startswith(RESAMPLER_NAMES)}
        save_file(resamplers, directory / RESAMPLERS_NAME, metadata={"format": "pt"})
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(directory / TOKENIZER_FOLDER)
        self.config.write_layout_file(directory)

    def load_resamplers(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Load both resamplers from release-named tensors (`input_resampler.proj.0.weight`, …);
        exactly their keys, at their shapes, or ValueError/RuntimeError."""
        expected = {k for k in self.state_dict() if k.startswith(RESAMPLER_NAMES)}
        if set(tensors) != expected:
            raise ValueError(f"resampler tensors {sorted(tensors)} are not {sorted(expected)}")
        self.load_state_dict(dict(tensors), strict=False)

    # ---- transformers plumbing ----

    def get_input_embeddings(self) -> nn.Module:
        return self.language_model.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.language_model.set_input_embeddings(value)

    @property
    def representation_dim(self) -> int:
        return self.config.representation_dim

    # ---- the network ----

    def embed_prompt(
        self, input_ids: torch.Tensor, history_representations: Sequence[torch.Tensor]
    ) -> tuple[Prompt, torch.Tensor]:
        """Token embeddings, each history frame block replaced by its projected representation."""
        prompt = Prompt.from_ids(input_ids.to(self.device))
        if len(prompt.history_blocks) != len(history_representations):
            raise ValueError(f"prompt has {len(prompt.history_blocks)} history blocks but "
                             f"{len(history_representations)} representations were given")
        embeds = self.get_input_embeddings()(prompt.input_ids)
        if history_representations:
            stacked = torch.stack([r.reshape(REPRESENTATION_TOKENS, -1)
                                   for r in history_representations])
            projected = self.input_resampler(stacked.to(self.device, self.dtype))
            for block, vectors in zip(prompt.history_blocks, projected, strict=True):
                embeds[0, block] = vectors
        return prompt, embeds

    def representation_positions(self, prompt: Prompt) -> slice:
        """Where the representation is read: the last 226 positions (`last_226`, the release at
        play time) or the target turn's frame queries (`queries`, as trained)."""
        if self.config.representation_source == "queries":
            return prompt.query_block
        return slice(prompt.length - REPRESENTATION_TOKENS, prompt.length)

    def forward(
        self,
        input_ids: torch.Tensor,
        history_representations: Sequence[torch.Tensor] = (),
        labels: torch.Tensor | None = None,
        logits_to_keep: int = 0,
    ) -> GameStateOutput:
        """One pass over a prompt (or a training sequence: prompt + the target's state tokens),
        the query block bidirectional (`tokens.attention_mask_4d`); `labels` (-100 = ignored)
        give the causal-LM loss. `logits_to_keep`: logits of the last N positions only (0: all,
        as the loss needs)."""
        prompt, embeds = self.embed_prompt(input_ids, history_representations)
        mask = attention_mask_4d(prompt, self.dtype, self.device)
        hidden = self.language_model.model(
            inputs_embeds=embeds, attention_mask=mask, use_cache=False
        ).last_hidden_state
        logits = self.language_model.lm_head(hidden[:, -logits_to_keep:])
        loss = None
        if labels is not None:
            loss = self.language_model.loss_function(
                logits=logits, labels=labels.reshape(1, -1).to(logits.device),
                vocab_size=self.config.get_text_config().vocab_size,
            )
        representation = self.output_resampler(hidden[:, self.representation_positions(prompt)])
        return GameStateOutput(loss=loss, logits=logits, representation=representation)

    @torch.no_grad()
    def represent(self, input_ids: torch.Tensor,
                  history_representations: Sequence[torch.Tensor] = ()) -> torch.Tensor:
        """The next shot's representation [1, 226, D], read where `representation_source` says.

        With the release's `last_226`, the LAST 226 positions (frames 3..225,
        `</frame></img><ML>`), not the query block itself, feed the output resampler.
        """
        return self(input_ids, history_representations, logits_to_keep=1).representation

    @torch.no_grad()
    def generate_state_ids(self, input_ids: torch.Tensor,
                           history_representations: Sequence[torch.Tensor] = (),
                           max_new_tokens: int = RELEASE_MAX_NEW_TOKENS) -> torch.Tensor:
        """Greedy continuation of the prompt (ids after `<ML>`), stopping at EOS."""
        prompt, embeds = self.embed_prompt(input_ids, history_representations)
        return self._generate(prompt, embeds, None, max_new_tokens)

    def _generate(self, prompt: Prompt, embeds: torch.Tensor, cache: Cache | None,
                  max_new_tokens: int, in_grammar: bool = False) -> torch.Tensor:
        """transformers' greedy `generate` under `FrameTokenRule` (and `StateGrammarRule` when
        `in_grammar`), from the prompt's embeddings; `cache` holds the KV of a prefix of the
        prompt already computed (generate runs the rest). Returns the generated ids."""
        rules: list[LogitsProcessor] = [FrameTokenRule()]
        if in_grammar:
            rules.append(StateGrammarRule(prompt.length))
        # A causal LM's `GenerationMixin.generate`: `PreTrainedModel` does not declare it, and
        # transformers types its `self` with a Protocol that its own models fail under mypy.
        output = self.language_model.generate(  # type: ignore[operator]
            input_ids=prompt.input_ids,
            inputs_embeds=embeds,
            attention_mask=torch.ones_like(prompt.input_ids),
            past_key_values=cache,
            logits_processor=LogitsProcessorList(rules),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=EOS_ID,
            pad_token_id=EOS_ID,
        )
        return output[0, prompt.length:]

    def predict_states(self, input_ids: torch.Tensor,
                       history_representations: Sequence[torch.Tensor] = ()) -> GameStates:
        """Parsed `(ML, SC, ET, ST)`; malformed output gives all zeros and a warning.

        Only the first `STATE_TOKENS_GENERATED` ids are generated: greedy decoding is causal, so
        the release's 200 tokens would start with exactly these and it reads nothing else.
        """
        generated = self.generate_state_ids(input_ids, history_representations,
                                            max_new_tokens=STATE_TOKENS_GENERATED)
        return states_or_zeros(generated.tolist())

    def predict(
        self,
        history: Iterable[tuple[PlayedTurn, torch.Tensor]],
        instruction: Instruction | str,
        *,
        shared_prefill: bool = False,
    ) -> tuple[torch.Tensor, GameStates]:
        """The next turn: its representation [1, 226, D] and its states.

        `history`: the window's past turns, oldest first, each with its representation [226, D]
        (an empty history is the release's window 1). The prompt is built once, here.
        `shared_prefill` (release path, `last_226`): compute the history prefix once for both
        passes (`represent_and_predict_states`); off by default, as it rounds differently.
        Models trained here (`queries`) always run one pass. In low-VRAM mode
        (`enable_model_cpu_offload`) the weights are on the device only meanwhile.
        """
        if self.tokenizer is None:
            raise ValueError("this GameStateModel has no tokenizer (set `.tokenizer`)")
        turns, representations = [], []
        for turn, representation in history:
            turns.append(HistoryTurn(_text(turn.instruction), turn.states))
            representations.append(representation)
        prompt = build_prompt(self.tokenizer, turns, _text(instruction))
        with self._weights_on_device():
            if self.config.representation_source == "queries":
                representation, generated = self.represent_and_generate(
                    prompt.input_ids, representations
                )
                return representation, states_or_zeros(generated)
            if shared_prefill:
                representation, generated = self.represent_and_predict_states(
                    prompt.input_ids, representations
                )
                return representation, states_or_zeros(generated)
            representation = self.represent(prompt.input_ids, representations)
            return representation, self.predict_states(prompt.input_ids, representations)

    @torch.no_grad()
    def represent_and_generate(
        self, input_ids: torch.Tensor, history_representations: Sequence[torch.Tensor] = ()
    ) -> tuple[torch.Tensor, list[int]]:
        """The representation and the generated state ids from one pass over the prompt, for
        models trained here (`representation_source="queries"`).

        The prompt runs once with the training mask (the query block bidirectional): its hidden
        states at the queries are the representation, and its KV cache is where the state tokens
        are decoded from, greedily, each new token attending to everything before it. So the
        prompt is computed once (the release path runs it twice), and the states are read under
        the attention pattern the model was trained with. The cache is cut before the prompt's
        last token, which `generate` then runs: that token is causal under both masks, so its
        logits are the training pass's. The release's weights keep their own path (`represent`
        + `predict_states`), which the reference vectors pin.
        """
        prompt, embeds = self.embed_prompt(input_ids, history_representations)
        mask = attention_mask_4d(prompt, self.dtype, self.device)
        output = self.language_model.model(inputs_embeds=embeds, attention_mask=mask,
                                           use_cache=True)
        hidden = output.last_hidden_state
        representation = self.output_resampler(hidden[:, self.representation_positions(prompt)])
        cache = output.past_key_values
        cache.crop(-1)  # drop the last token, which generate runs again
        generated = self._generate(
            prompt, embeds, cache, STATE_TOKENS_GENERATED, in_grammar=True
        )
        return representation, generated.tolist()

    @torch.no_grad()
    def represent_and_predict_states(
        self, input_ids: torch.Tensor, history_representations: Sequence[torch.Tensor] = ()
    ) -> tuple[torch.Tensor, list[int]]:
        """The release path (`represent` + `predict_states`) with one shared prefill.

        Everything before the query block (the history and the current instruction) is causal
        in both passes, so its KV cache is computed once: a copy of it continues with the
        query block under the training mask (the representation), the original goes to
        `generate`, which continues causally and decodes the state ids greedily. Equal to the
        two passes up to rounding; `predict(..., shared_prefill=True)` takes this path.
        """
        prompt, embeds = self.embed_prompt(input_ids, history_representations)
        start = prompt.query_block.start
        decoder = self.language_model.model
        prefix = decoder(inputs_embeds=embeds[:, :start], use_cache=True).past_key_values
        mask = attention_mask_4d(prompt, self.dtype, self.device)[:, :, start:]
        queries = decoder(
            inputs_embeds=embeds[:, start:], attention_mask=mask,
            past_key_values=copy.deepcopy(prefix), use_cache=True,
        ).last_hidden_state
        positions = self.representation_positions(prompt)
        representation = self.output_resampler(
            queries[:, positions.start - start:positions.stop - start]
        )
        generated = self._generate(prompt, embeds, prefix, STATE_TOKENS_GENERATED)
        return representation, generated.tolist()

    # ---- low-VRAM mode ----

    def enable_model_cpu_offload(self, device: str | torch.device = "cuda") -> None:
        """Low-VRAM mode, as a diffusers pipeline's `enable_model_cpu_offload`: the weights stay
        in CPU memory and `predict` moves them to `device` for the turn, then back.

        The move is explicit (`Module.to`) rather than accelerate's forward hook: a turn runs
        the language model's submodules and `generate`, not this model's `forward`, so a hook
        on it would not fire on every path."""
        self._offload_device = torch.device(device)
        self.to("cpu")  # type: ignore[arg-type]

    @contextmanager
    def _weights_on_device(self) -> Iterator[None]:
        """In low-VRAM mode, the weights on the execution device for the block, and back in
        CPU memory after it, even when it fails (a no-op otherwise)."""
        if self._offload_device is None:
            yield
            return
        self.to(self._offload_device)  # type: ignore[arg-type]
        try:
            yield
        finally:
            self.to("cpu")  # type: ignore[arg-type]
            clear_device_cache()
