"""The rules that hold the game-state model's greedy generation: the release's frame-token
chain (`FrameTokenRule`), the state grammar of models trained here (`StateGrammarRule`), and the
generated ids read as states (`states_or_zeros`)."""

from __future__ import annotations

import itertools
import logging
from typing import cast

import torch
from transformers import LogitsProcessor

from animegamer.models.tokens import (
    FRAME0_ID,
    FRAME_END_ID,
    FRAME_ID,
    STATE_GRAMMAR,
    STRENGTH_IDS,
    GameStates,
    parse_state_ids,
)

logger = logging.getLogger(__name__)

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


class StateGrammarRule(LogitsProcessor):
    """Holds the generated ids to `STATE_GRAMMAR` (models trained here): its fixed id where it
    names one, the best `<Strength_v>` elsewhere. The fixed ids carry nothing, and a briefly
    trained model (the CPU recipe's few steps) otherwise writes text tokens there, so its states
    would all be unreadable; a model that follows the grammar decodes the same."""

    def __init__(self, prompt_length: int):
        self.prompt_length = prompt_length

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        position = input_ids.shape[1] - self.prompt_length
        if position >= len(STATE_GRAMMAR):
            return scores
        allowed = torch.zeros(scores.shape[-1], dtype=torch.bool, device=scores.device)
        expected = STATE_GRAMMAR[position]
        if expected is None:
            allowed[STRENGTH_IDS.start:STRENGTH_IDS.stop] = True
        else:
            allowed[expected] = True
        return cast(torch.FloatTensor, scores.masked_fill(~allowed, float("-inf")))


def states_or_zeros(generated: list[int]) -> GameStates:
    """The parsed states; malformed output gives all zeros, marked `unreadable`, and a
    warning."""
    states = parse_state_ids(generated)
    if states is None:
        logger.warning("malformed state tokens %s; using zeros", generated)
        return GameStates(unreadable=True)
    return states
