"""How close a quantized character plays to the unquantized one (issue 41's fidelity bar).

Three measures, each against the same weights unquantized:

* the game-state model's generated state tokens (the raw ids, not their parse: a parse that
  fails reads as all zeros, which would hide any difference) on random game windows;
* the cosine similarity of its representation [226, D] on those windows (the worst one);
* the relative error ‖q − r‖ / ‖r‖ of one decoder transformer step on a random latent.

`tests/test_quantization.py` asserts the bar on the Nano models on the CPU (int8);
`benchmarks/quantized.py` prints the numbers, for every preset on CUDA.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.nn import functional

from animegamer.game.representation import REPRESENTATION_TOKENS
from animegamer.game.rules import MAX_WINDOW, GameStates
from animegamer.models.game_state import GameStateModel
from animegamer.models.tokens import STATE_TOKENS_GENERATED, HistoryTurn, build_prompt
from animegamer.models.transformers.transformer_animegamer import AnimeGamerTransformer3DModel
from animegamer.nano.vocabulary import CHARACTERS, NANO_VOCABULARY

STATE_RANGE = range(-5, 6)


@dataclass(frozen=True)
class GameWindow:
    """A turn to predict: the window's past turns with their representations, oldest first,
    and the new instruction."""

    history: tuple[tuple[HistoryTurn, torch.Tensor], ...]
    instruction: str


@dataclass(frozen=True)
class GameStateFidelity:
    windows: int
    equal_state_tokens: int
    min_cosine: float
    mean_cosine: float


def random_instruction(rng: random.Random) -> str:
    """An instruction of the release's template from the Nano world's words."""
    vocabulary = NANO_VOCABULARY
    return (
        f"Character: {rng.choice(CHARACTERS)}; Motion: {rng.choice(vocabulary.adverbs)} "
        f"{rng.choice(vocabulary.motions)}; Background: {rng.choice(vocabulary.times)} "
        f"{rng.choice(vocabulary.places)}."
    )


def random_windows(count: int, representation_dim: int, seed: int = 0,
                   max_window: int = MAX_WINDOW) -> list[GameWindow]:
    """`count` windows of 1..`max_window` turns: random instructions and states, standard
    normal history representations."""
    rng = random.Random(seed)
    generator = torch.Generator().manual_seed(seed)
    windows = []
    for _ in range(count):
        history = tuple(
            (
                HistoryTurn(random_instruction(rng), GameStates(
                    rng.randint(1, 5), rng.choice(STATE_RANGE), rng.choice(STATE_RANGE),
                    rng.choice(STATE_RANGE))),
                torch.randn(REPRESENTATION_TOKENS, representation_dim, generator=generator),
            )
            for _ in range(rng.randrange(max_window))
        )
        windows.append(GameWindow(history, random_instruction(rng)))
    return windows


@torch.no_grad()
def predict_state_ids(model: GameStateModel, window: GameWindow) -> tuple[torch.Tensor, list[int]]:
    """The representation [1, 226, D] and the generated state-token ids of one window, on the
    model's own path (`representation_source`), without the shared prefill."""
    assert model.tokenizer is not None
    turns = [turn for turn, _ in window.history]
    representations = [r.to(model.device, model.dtype) for _, r in window.history]
    prompt = build_prompt(model.tokenizer, turns, window.instruction)
    if model.config.representation_source == "queries":
        return model.represent_and_generate(prompt.input_ids, representations)
    representation = model.represent(prompt.input_ids, representations)
    ids = model.generate_state_ids(prompt.input_ids, representations,
                                   max_new_tokens=STATE_TOKENS_GENERATED)
    return representation, ids.tolist()


def game_state_fidelity(reference: GameStateModel, quantized: GameStateModel,
                        windows: Sequence[GameWindow]) -> GameStateFidelity:
    """Compare the two models window by window."""
    equal, cosines = 0, []
    for window in windows:
        expected_representation, expected_ids = predict_state_ids(reference, window)
        representation, ids = predict_state_ids(quantized, window)
        equal += ids == expected_ids
        cosines.append(functional.cosine_similarity(
            representation.float().flatten().cpu(), expected_representation.float().flatten().cpu(),
            dim=0).item())
    return GameStateFidelity(len(windows), equal, min(cosines), sum(cosines) / len(cosines))


@torch.no_grad()
def decoder_step_relative_error(
    reference: AnimeGamerTransformer3DModel,
    quantized: AnimeGamerTransformer3DModel,
    seed: int = 0,
    latent_frames: int = 2,
    timestep: int = 500,
) -> float:
    """‖q − r‖ / ‖r‖ of one transformer forward on a random latent of `latent_frames` frames at
    the configured height and width, a random representation and motion scope 5."""
    config = reference.config
    generator = torch.Generator().manual_seed(seed)
    latent = torch.randn(1, latent_frames, config["out_channels"], config["sample_height"],
                         config["sample_width"], generator=generator)
    context = torch.randn(1, REPRESENTATION_TOKENS, reference.uncond_representation.shape[-1],
                          generator=generator)
    scene = {}  # a Nano decoder that draws on a scene takes one (random, as the rest)
    if config.get("scene_channels"):
        scene = {"scene": torch.randn(1, config["scene_channels"], config["sample_height"],
                                      config["sample_width"], generator=generator)}

    def forward(model: AnimeGamerTransformer3DModel) -> torch.Tensor:
        device, dtype = model.device, model.dtype
        output = model(
            hidden_states=latent.to(device, dtype), encoder_hidden_states=context.to(device, dtype),
            timestep=torch.tensor([timestep], device=device),
            ofs=torch.tensor([5.0], device=device), return_dict=False,
            **{name: value.to(device, dtype) for name, value in scene.items()},
        )[0]
        return output.float().cpu()

    expected = forward(reference)
    return ((forward(quantized) - expected).norm() / expected.norm()).item()
