"""AnimeGamer's vocabulary, tokenizer builder, prompt builder and attention masks.

The tokenizer is Mistral's (32000 ids) plus 284 added tokens at fixed ids 32000..32283. The
prompt for a turn is a window of past turns (instruction, video block, state block) followed by
the current turn (instruction, video block, `<ML>`). Every video block holds 226 frame
positions: in history blocks they carry the input resampler's projection of that turn's
representation, in the current (query) block they are plain token embeddings whose final hidden
states become the next representation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch
from tokenizers import AddedToken
from transformers import LlamaTokenizer, PreTrainedTokenizerFast

from animegamer.game.representation import REPRESENTATION_TOKENS
from animegamer.game.rules import STATE_DELTA_RANGE, GameStates, normalise_field

BASE_VOCAB_SIZE = 32000
NUM_FRAME_TOKENS = 256
STATE_RANGE = range(STATE_DELTA_RANGE[0], STATE_DELTA_RANGE[1] + 1)
"""Values of the `<Strength_v>` tokens: the game's state deltas."""

FRAME_TOKENS = [f"<frame_{i:05d}>" for i in range(NUM_FRAME_TOKENS)]
VIDEO_TAGS = ["<img>", "</img>", "<vid>", "</vid>", "<frame>", "</frame>"]
STRENGTH_TOKENS = [f"<Strength_{v}>" for v in STATE_RANGE]
STATE_TAGS = ["<visual>", "<ML>", "</ML>", "<SC>", "</SC>", "<ET>", "</ET>", "<ST>", "</ST>",
              "<TURN>", "</TURN>"]
ADDED_TOKENS: list[str] = FRAME_TOKENS + VIDEO_TAGS + STRENGTH_TOKENS + STATE_TAGS
"""The 284 added tokens in id order (ids 32000..32283)."""
VOCAB_SIZE = BASE_VOCAB_SIZE + len(ADDED_TOKENS)

BOS_ID = 1
EOS_ID = 2
FRAME0_ID = BASE_VOCAB_SIZE
IMG_ID, IMG_END_ID, VID_ID, VID_END_ID, FRAME_ID, FRAME_END_ID = range(32256, 32262)
STRENGTH_MIN_ID = 32262
(VISUAL_ID, ML_ID, ML_END_ID, SC_ID, SC_END_ID, ET_ID, ET_END_ID, ST_ID, ST_END_ID,
 TURN_ID, TURN_END_ID) = range(32273, 32284)
SPECIAL_IDS = frozenset(range(IMG_ID, FRAME_END_ID + 1)) | frozenset(range(VISUAL_ID, VOCAB_SIZE))

TOKENIZER_CHECK = ("<TURN>Character", [TURN_ID, 15962])
"""A tag followed by text must not give the text a leading ▁ (Mistral vocabulary only)."""


class TokenizerError(ValueError):
    """A tokenizer does not hold AnimeGamer's vocabulary at the expected ids."""


def strength_id(value: int) -> int:
    """Id of `<Strength_{value}>`, value in -5..5."""
    if value not in STATE_RANGE:
        raise ValueError(f"state value {value} outside -5..5")
    return STRENGTH_MIN_ID + value - STATE_RANGE.start


def strength_value(token_id: int) -> int | None:
    """Value v of a `<Strength_v>` id, or None for any other id."""
    offset = token_id - STRENGTH_MIN_ID
    return STATE_RANGE[offset] if 0 <= offset < len(STATE_RANGE) else None


STATE_TOKENS_GENERATED = 10
"""Generated ids that hold the states: `<S_ml></ML><SC><S_sc></SC><ET><S_et></ET><ST><S_st>`."""


STATE_GRAMMAR: tuple[int | None, ...] = (
    None, ML_END_ID, SC_ID, None, SC_END_ID, ET_ID, None, ET_END_ID, ST_ID, None,
)
"""The generated state ids: a fixed id, or None where a `<Strength_v>` goes."""
STRENGTH_IDS = range(STRENGTH_MIN_ID, STRENGTH_MIN_ID + len(STATE_RANGE))


def parse_state_ids(generated: Sequence[int]) -> GameStates | None:
    """States from the ids generated after the prompt's `<ML>`, or None when malformed.

    The release reads ids 0, 3, 6 and 9 and nothing else; so do we.
    """
    ids = list(generated)
    if len(ids) < STATE_TOKENS_GENERATED:
        return None
    values: list[int] = []
    for i in (0, 3, 6, 9):
        value = strength_value(int(ids[i]))
        if value is None:
            return None
        values.append(value)
    ml, sc, et, st = values
    return GameStates(ml, sc, et, st)


def add_animegamer_tokens(tokenizer: PreTrainedTokenizerFast) -> PreTrainedTokenizerFast:
    """Add the 284 tokens to a 32000-id base tokenizer, in id order, and check the ids."""
    if len(tokenizer) != BASE_VOCAB_SIZE:
        raise TokenizerError(f"base tokenizer has {len(tokenizer)} ids, expected {BASE_VOCAB_SIZE}")

    def plain(tokens: list[str]) -> list[AddedToken]:
        return [AddedToken(t, special=False, normalized=True) for t in tokens]

    def special(tokens: list[str]) -> list[AddedToken]:
        return [AddedToken(t, special=True, normalized=False) for t in tokens]

    tokenizer.add_tokens(plain(FRAME_TOKENS))
    tokenizer.add_special_tokens({"additional_special_tokens": special(VIDEO_TAGS)})
    tokenizer.add_tokens(plain(STRENGTH_TOKENS))
    tokenizer.add_special_tokens(
        {"additional_special_tokens": special(STATE_TAGS)}, replace_extra_special_tokens=False
    )
    check_tokenizer(tokenizer)
    return tokenizer


def check_tokenizer(tokenizer: PreTrainedTokenizerFast, *, mistral_vocab: bool = False) -> None:
    """Raise TokenizerError unless every added token sits at its fixed id."""
    if len(tokenizer) != VOCAB_SIZE:
        raise TokenizerError(f"tokenizer has {len(tokenizer)} ids, expected {VOCAB_SIZE}")
    # transformers' id/token converters have no overloads: a list in gives a list out, one
    # token or id in gives one out.
    ids = cast(list[int], tokenizer.convert_tokens_to_ids(ADDED_TOKENS))
    wrong = [(t, i) for offset, (t, i) in enumerate(zip(ADDED_TOKENS, ids, strict=True))
             if i != BASE_VOCAB_SIZE + offset]
    if wrong:
        raise TokenizerError(f"added tokens at wrong ids (token, id): {wrong[:10]}")
    if (tokenizer.bos_token_id, tokenizer.eos_token_id) != (BOS_ID, EOS_ID):
        raise TokenizerError("BOS/EOS must be ids 1/2")
    video = "".join(["<img>", "<frame>", *FRAME_TOKENS[:3], "</frame>", "</img>"])
    if tokenizer.encode(video, add_special_tokens=False) != [
        IMG_ID, FRAME_ID, FRAME0_ID, FRAME0_ID + 1, FRAME0_ID + 2, FRAME_END_ID, IMG_END_ID
    ]:
        raise TokenizerError("frame tokens do not encode to single ids (normaliser?)")
    text, expected = TOKENIZER_CHECK
    got = tokenizer.encode(text, add_special_tokens=False)
    if mistral_vocab and got != expected:
        raise TokenizerError(f"{text!r} encodes to {got}, expected {expected}")
    if got[0] != TURN_ID or cast(str, tokenizer.convert_ids_to_tokens(got[1])).startswith("▁"):
        raise TokenizerError(f"{text!r} encodes to {got}: text after a tag got a leading ▁")


def build_tokenizer(base_dir: str | Path) -> PreTrainedTokenizerFast:
    """Mistral's tokenizer from `base_dir` (tokenizer.model or tokenizer.json) + the 284 tokens.

    `LlamaTokenizer` builds its own pipeline (Metaspace, no normaliser): AutoTokenizer may pick
    another class, and Mistral's legacy tokenizer.json normaliser splits `<frame_*>` tokens.
    """
    return add_animegamer_tokens(LlamaTokenizer.from_pretrained(str(base_dir)))


LOADING_KEYS = ("is_local", "local_files_only")
"""What `from_pretrained` records about where it loaded from, not about the tokenizer."""


def load_tokenizer(directory: str | Path) -> PreTrainedTokenizerFast:
    """A tokenizer saved by `build_tokenizer(...).save_pretrained`, read from its tokenizer.json
    by the class that wrote it, so saving it again writes the same files (a character trained
    on from a folder keeps that folder's tokenizer files)."""
    tokenizer = LlamaTokenizer.from_pretrained(str(directory))
    for key in LOADING_KEYS:
        tokenizer.init_kwargs.pop(key, None)
    check_tokenizer(tokenizer)
    return tokenizer


@dataclass(frozen=True)
class HistoryTurn:
    """A past turn as the prompt sees it: its instruction and its own predicted states."""

    instruction: str
    states: GameStates


@dataclass
class Prompt:
    """Token ids of one prompt and where its 226-position frame blocks are."""

    input_ids: torch.Tensor
    history_blocks: list[slice]
    query_block: slice

    @property
    def length(self) -> int:
        return self.input_ids.shape[1]

    @classmethod
    def from_ids(cls, input_ids: torch.Tensor) -> Prompt:
        """Locate the frame blocks of a prompt: every `<frame>` opens one, the last is the query."""
        ids = input_ids.reshape(-1)
        expected = torch.arange(FRAME0_ID, FRAME0_ID + REPRESENTATION_TOKENS, device=ids.device)
        blocks = []
        for start in (ids == FRAME_ID).nonzero().flatten().tolist():
            block = slice(start + 1, start + 1 + REPRESENTATION_TOKENS)
            inner = ids[block]
            if inner.shape[0] != REPRESENTATION_TOKENS or not torch.equal(inner, expected):
                raise ValueError(f"frame block at position {start} is not <frame_00000..00225>")
            blocks.append(block)
        if not blocks:
            raise ValueError("prompt has no frame block")
        return cls(input_ids=input_ids.reshape(1, -1), history_blocks=blocks[:-1],
                   query_block=blocks[-1])


def _video_block_ids() -> list[int]:
    frames = list(range(FRAME0_ID, FRAME0_ID + REPRESENTATION_TOKENS))
    return [IMG_ID, FRAME_ID, *frames, FRAME_END_ID, IMG_END_ID]


def state_block_ids(states: GameStates) -> list[int]:
    """The trained state block, doubled `</ST>` included."""
    return [
        ML_ID, strength_id(states.ml), ML_END_ID,
        SC_ID, strength_id(states.sc), SC_END_ID,
        ET_ID, strength_id(states.et), ET_END_ID,
        ST_ID, strength_id(states.st), ST_END_ID, ST_END_ID,
        TURN_END_ID,
    ]


def build_prompt(
    tokenizer: PreTrainedTokenizerFast, history: Sequence[HistoryTurn], instruction: str
) -> Prompt:
    """The prompt for the current turn after the window's `history` (oldest first).

    An empty history reproduces the released demo (window 1).
    """
    ids = [BOS_ID]
    blocks: list[slice] = []

    def turn_text(text: str) -> list[int]:
        # One string: alone, the instruction would get a leading ▁.
        return tokenizer.encode("<TURN>" + normalise_field(text), add_special_tokens=False)

    for turn in history:
        ids += turn_text(turn.instruction)
        blocks.append(slice(len(ids) + 2, len(ids) + 2 + REPRESENTATION_TOKENS))
        ids += _video_block_ids() + state_block_ids(turn.states)
    ids += turn_text(instruction)
    query = slice(len(ids) + 2, len(ids) + 2 + REPRESENTATION_TOKENS)
    ids += [*_video_block_ids(), ML_ID]
    return Prompt(torch.tensor([ids], dtype=torch.long), blocks, query)


def attention_mask_4d(prompt: Prompt, dtype: torch.dtype = torch.float32,
                      device: torch.device | str | None = None) -> torch.Tensor:
    """Additive mask [1, 1, L, L]: causal, and bidirectional inside the query frame block.

    0 = attend, finfo(dtype).min = blocked. History blocks stay causal, as in training.
    """
    length = prompt.length
    allowed = torch.ones(length, length, dtype=torch.bool, device=device).tril()
    allowed[prompt.query_block, prompt.query_block] = True
    mask = torch.zeros(length, length, dtype=dtype, device=device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]
