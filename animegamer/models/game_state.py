"""The game-state model: a stock `MistralForCausalLM` plus two MLP resamplers.

`represent` runs one forward pass over the prompt with a bidirectional query block and maps the
last 226 hidden states through the output resampler: that is the next shot's representation.
`predict_states` generates the state tokens greedily with the release's frame-token rule.
History representations enter through the input resampler at the history frame blocks.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn
from transformers import (
    AutoModelForCausalLM,
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

from animegamer.tokens import (
    EOS_ID,
    FRAME0_ID,
    FRAME_END_ID,
    FRAME_ID,
    NUM_QUERY_TOKENS,
    STATE_TOKENS_GENERATED,
    GameStates,
    Prompt,
    attention_mask_4d,
    load_tokenizer,
    parse_state_ids,
)

__all__ = ["FrameTokenRule", "GameStateModel", "GameStates", "build_resampler"]

logger = logging.getLogger(__name__)

RELEASE_MAX_NEW_TOKENS = 200
"""What the released demo generates; the states are in the first `STATE_TOKENS_GENERATED`."""
GENERATED_FRAME_TOKENS = 100
"""Frame tokens the release's generation rule knows (`<frame_00000>`..`<frame_00099>`)."""


class FrameTokenRule(LogitsProcessor):
    """The release's logits rule for generated frame tokens.

    After `<frame>` or `<frame_i>` (i < 100) the next token of the chain
    `<frame>, <frame_00000>, …, <frame_00099>, </frame>` gets the row's max logit + 10 (forced
    continuation); otherwise the logits of `<frame_00000..00099>` and `</frame>` are set to 0.0
    (not −inf: they stay possible when every other logit is negative).
    """

    def __init__(self, num_frames: int = GENERATED_FRAME_TOKENS):
        chain = [FRAME_ID, *range(FRAME0_ID, FRAME0_ID + num_frames), FRAME_END_ID]
        self.successor = dict(itertools.pairwise(chain))
        self.zeroed = torch.tensor(chain[1:], dtype=torch.long)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        for row, last in enumerate(input_ids[:, -1].tolist()):
            forced = self.successor.get(last)
            if forced is None:
                scores[row, self.zeroed.to(scores.device)] = 0.0
            else:
                scores[row, forced] = scores[row].max() + 10.0
        return scores


def build_resampler(in_features: int, out_features: int) -> nn.Sequential:
    """`Linear(in, out) → GELU → Linear(out, out)`; keys `proj.{0,2}.*` under a prefix."""
    return nn.Sequential(
        nn.Linear(in_features, out_features), nn.GELU(), nn.Linear(out_features, out_features)
    )


def _load_resampler(tensors: dict[str, torch.Tensor], name: str) -> nn.Sequential:
    first = tensors[f"{name}.proj.0.weight"]
    resampler = build_resampler(first.shape[1], first.shape[0])
    prefix = f"{name}.proj."
    resampler.load_state_dict(
        {k.removeprefix(prefix): v for k, v in tensors.items() if k.startswith(prefix)}
    )
    return resampler


class GameStateModel:
    """The MLLM of a converted character folder (`llm/`, `resamplers.safetensors`, `tokenizer/`)."""

    def __init__(self, llm: PreTrainedModel, input_resampler: nn.Module,
                 output_resampler: nn.Module, tokenizer: PreTrainedTokenizerFast):
        self.llm = llm.eval()
        param = next(llm.parameters())
        self.input_resampler = input_resampler.to(param.device, param.dtype).eval()
        self.output_resampler = output_resampler.to(param.device, param.dtype).eval()
        self.tokenizer = tokenizer

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device = "cpu",
                        dtype: torch.dtype = torch.float32) -> GameStateModel:
        """Load a converted folder; bf16 on GPU, fp32 on CPU; SDPA attention."""
        path = Path(path)
        llm = AutoModelForCausalLM.from_pretrained(
            path / "llm", dtype=dtype, attn_implementation="sdpa",
            device_map={"": torch.device(device)},
        )
        tensors = load_file(path / "resamplers.safetensors")
        return cls(llm, _load_resampler(tensors, "input_resampler"),
                   _load_resampler(tensors, "output_resampler"), load_tokenizer(path / "tokenizer"))

    def to(self, device: str | torch.device) -> GameStateModel:
        """Move the LLM and both resamplers (the engine's low-VRAM offloading)."""
        for module in (self.llm, self.input_resampler, self.output_resampler):
            module.to(device)
        return self

    @property
    def device(self) -> torch.device:
        return next(self.llm.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.llm.parameters()).dtype

    @property
    def representation_dim(self) -> int:
        return self.output_resampler[2].out_features

    def embed_prompt(
        self, input_ids: torch.Tensor, history_representations: Sequence[torch.Tensor]
    ) -> tuple[Prompt, torch.Tensor]:
        """Token embeddings, each history frame block replaced by its projected representation."""
        prompt = Prompt.from_ids(input_ids.to(self.device))
        if len(prompt.history_blocks) != len(history_representations):
            raise ValueError(f"prompt has {len(prompt.history_blocks)} history blocks but "
                             f"{len(history_representations)} representations were given")
        embeds = self.llm.get_input_embeddings()(prompt.input_ids)
        if history_representations:
            stacked = torch.stack([r.reshape(NUM_QUERY_TOKENS, -1)
                                   for r in history_representations])
            projected = self.input_resampler(stacked.to(self.device, self.dtype))
            for block, vectors in zip(prompt.history_blocks, projected, strict=True):
                embeds[0, block] = vectors
        return prompt, embeds

    @torch.inference_mode()
    def represent(self, input_ids: torch.Tensor,
                  history_representations: Sequence[torch.Tensor] = ()) -> torch.Tensor:
        """The next shot's representation [1, 226, D].

        Like the release: the LAST 226 positions (frames 3..225, `</frame></img><ML>`), not the
        query block itself, are fed to the output resampler.
        """
        prompt, embeds = self.embed_prompt(input_ids, history_representations)
        mask = attention_mask_4d(prompt, self.dtype, self.device)
        hidden = self.llm.model(inputs_embeds=embeds, attention_mask=mask,
                                use_cache=False).last_hidden_state
        return self.output_resampler(hidden[:, -NUM_QUERY_TOKENS:])

    @torch.inference_mode()
    def generate_state_ids(self, input_ids: torch.Tensor,
                           history_representations: Sequence[torch.Tensor] = (),
                           max_new_tokens: int = RELEASE_MAX_NEW_TOKENS) -> torch.Tensor:
        """Greedy continuation of the prompt (ids after `<ML>`), stopping at EOS."""
        prompt, embeds = self.embed_prompt(input_ids, history_representations)
        output = self.llm.generate(
            input_ids=prompt.input_ids,
            inputs_embeds=embeds,
            attention_mask=torch.ones_like(prompt.input_ids),
            logits_processor=LogitsProcessorList([FrameTokenRule()]),
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
        states = parse_state_ids(generated.tolist())
        if states is None:
            logger.warning("malformed state tokens %s; using zeros", generated.tolist())
            return GameStates()
        return states
