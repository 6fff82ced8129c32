"""Phase (b) of training (docs/design.md §11): the game-state model learns states and
representations.

A sample is a window of 1..5 consecutive shots of an episode (`episodes.episode_windows`). Its
sequence is the play-time prompt of the target turn (`tokens.build_prompt`: the history turns
with their instructions, their frame blocks and their *labelled* states, then the target's
instruction, its 226 query positions and `<ML>`) followed by the target's state tokens

    <Strength_ML> </ML> <SC> <Strength_SC> </SC> <ET> <Strength_ET> </ET> <ST> <Strength_ST>
    </ST> </ST> </TURN> EOS

(the rest of the trained state block after the prompt's `<ML>`, and EOS, where the release's
generation stops). Labels are -100 on the whole prompt (context, history states, query block and
`<ML>`) and the ids themselves on these 14 positions: the CE is on the target's state tokens
only. The states are the dataset's labels as they are: ML = `motion_level` (1..5), SC/ET 0/1,
ST ±1 (the game multiplies the deltas by 5, `game.apply_states`; `tokens.parse_state_ids` reads
them back).

History frame blocks carry `input_resampler(E_a(shot))`, the frozen shot encoder's projection of
each history shot's cached features; the model reads the representation at the target's query
positions (`representation_source="queries"`), and the loss is
`CE + mse_weight · MSE(output_resampler(query hidden states), E_a(target shot))`.

Trainable: a LoRA (peft) on the language model's q/k/v/o/gate/up/down projections; the norms,
both embedding matrices (input embeddings and lm_head) and both resamplers train fully, by
setting `requires_grad` on the original modules after `get_peft_model` froze them (not peft's
`modules_to_save`, which would keep a second copy of each embedding matrix). At the end the LoRA
is merged (`merge_and_unload`) and the model saved in the character-folder layout.

The loop runs through `accelerate`: mixed precision (autocast over fp32 weights), several
processes (each takes its share of a step's windows), `save_state`/`load_state` checkpoints
(of the trained parameters, optimizer and RNG states; the frozen weights come from `init`). The
model takes one sequence at a time, so a step of `batch_size` windows is accumulated
(`accelerator.accumulate`, one window per micro-step, which DeepSpeed also follows).
Which window comes at which step depends only on the seed and the step, so a resumed run
continues the same data order. A NaN or infinite loss stops the run before that step is logged
or checkpointed (`loop.check_finite`). A run whose processes hold shards of the parameters (FSDP,
DeepSpeed ZeRO-3) is merged from the full state dict gathered from the shards (`merged_model`).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from animegamer.cli.progress import progress
from animegamer.data.dataset import read_rows
from animegamer.game.representation import REPRESENTATION_TOKENS
from animegamer.game.rules import GameStates
from animegamer.models.game_state import GameStateConfig, GameStateModel
from animegamer.models.shot_encoder import AnimeGamerShotEncoder
from animegamer.models.tokens import (
    EOS_ID,
    VOCAB_SIZE,
    HistoryTurn,
    Prompt,
    build_prompt,
    build_tokenizer,
    state_block_ids,
)
from animegamer.train.loop import (
    check_finite,
    configure_deepspeed,
    latest_checkpoint,
    losses_path,
    resume_point,
    save_checkpoint,
    shards_parameters,
)
from animegamer.train.recipe import (
    BaseLLMInit,
    CharacterInit,
    GameStateRecipe,
    TinyGameStateInit,
)
from animegamer.train.windows import EpisodeWindow, episode_windows

__all__ = [
    "TrainingSample",
    "WindowSchedule",
    "accelerator_options",
    "build_game_state_model",
    "fully_trained_modules",
    "gradient_accumulation_steps",
    "merged_model",
    "representation_width",
    "row_states",
    "shot_representations",
    "target_representations",
    "target_state_ids",
    "train_game_state",
    "training_sample",
    "window_losses",
    "window_prompt",
    "with_lora",
]

logger = logging.getLogger(__name__)

PHASE_FOLDER = "game_state"
NORM_NAMES = ("input_layernorm", "post_attention_layernorm", "norm")
"""Mistral's RMSNorms (each decoder layer's two and the final one): they train fully."""


# ---- samples ----


def row_states(row: dict[str, Any]) -> GameStates:
    """A dataset row's state labels as the state tokens write them."""
    return GameStates(ml=row["motion_level"], sc=row["sc"], et=row["et"], st=row["st"])


def window_prompt(tokenizer: PreTrainedTokenizerFast, window: EpisodeWindow) -> Prompt:
    """The play-time prompt of the window's target turn, its history teacher-forced (the data's
    instructions and states)."""
    history = [HistoryTurn(row["instruction"], row_states(row)) for row in window.history]
    return build_prompt(tokenizer, history, window.target["instruction"])


@dataclass
class TrainingSample:
    """One training sequence [1, L] and its labels [1, L] (-100 but on the target ids)."""

    input_ids: torch.Tensor
    labels: torch.Tensor
    target_length: int


def target_state_ids(states: GameStates) -> list[int]:
    """What the model learns to generate after the prompt's `<ML>` (see the module docstring)."""
    return [*state_block_ids(states)[1:], EOS_ID]


def training_sample(tokenizer: PreTrainedTokenizerFast, window: EpisodeWindow) -> TrainingSample:
    prompt = window_prompt(tokenizer, window)
    target = torch.tensor([target_state_ids(row_states(window.target))], dtype=torch.long)
    ignored = torch.full_like(prompt.input_ids, -100)
    return TrainingSample(
        input_ids=torch.cat([prompt.input_ids, target], dim=1),
        labels=torch.cat([ignored, target], dim=1),
        target_length=target.shape[1],
    )


def representation_width(encoder: AnimeGamerShotEncoder) -> int:
    """D, the width of the encoder's representations (the decoder's hidden size)."""
    config: Any = encoder.config
    return int(config.width)


def _features(dataset: Path, row: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    if not row.get("features_path"):
        raise ValueError(f"shot {row.get('shot_id')} has no cached features: build the dataset "
                         "with features")
    tensors = load_file(dataset / row["features_path"])
    return tensors["text_features"], tensors["image_features"]


@torch.no_grad()
def shot_representations(encoder: AnimeGamerShotEncoder, dataset: Path,
                         rows: Sequence[dict[str, Any]]) -> torch.Tensor:
    """E_a of each row's shot from its cached features: [len(rows), 226, D]."""
    if not rows:
        return torch.empty(0, REPRESENTATION_TOKENS, representation_width(encoder),
                           device=encoder.device, dtype=encoder.dtype)
    text, image = zip(*(_features(dataset, row) for row in rows), strict=True)
    return encoder.project(torch.stack(text).to(encoder.device),
                           torch.stack(image).to(encoder.device))


@torch.no_grad()
def target_representations(
    model: GameStateModel,
    windows: Sequence[EpisodeWindow],
    history_representations: Sequence[Sequence[torch.Tensor]],
) -> torch.Tensor:
    """The model's representation of each window's target shot, [B, 226, D], its history
    teacher-forced: the data's instructions and states, and `history_representations[i]` (one
    [226, D] per history shot of window i, e.g. `shot_representations` of `window.history`)."""
    if model.tokenizer is None:
        raise ValueError("the game-state model has no tokenizer")
    if len(windows) != len(history_representations):
        raise ValueError(f"{len(windows)} windows but {len(history_representations)} histories")
    representations = [
        model.represent(window_prompt(model.tokenizer, window).input_ids, list(history))[0]
        for window, history in zip(windows, history_representations, strict=True)
    ]
    return torch.stack(representations)


class WindowSchedule:
    """The training windows in order, epoch after epoch (epoch e is `episode_windows` with seed
    `seed + e`): position p's window depends only on p, so a resumed run sees the same order."""

    def __init__(self, rows: Sequence[dict[str, Any]], max_turns: int, seed: int) -> None:
        self.rows, self.max_turns, self.seed = rows, max_turns, seed
        self._epoch = 0
        self._windows = episode_windows(rows, max_turns, seed)
        if not self._windows:
            raise ValueError("the dataset has no training rows")

    def window(self, position: int) -> EpisodeWindow:
        epoch, offset = divmod(position, len(self._windows))
        if epoch != self._epoch:
            self._epoch = epoch
            self._windows = episode_windows(self.rows, self.max_turns, self.seed + epoch)
        return self._windows[offset]

    def batch(self, step: int, size: int) -> list[EpisodeWindow]:
        return [self.window(step * size + i) for i in range(size)]


# ---- the model ----


def build_game_state_model(init: CharacterInit | BaseLLMInit | TinyGameStateInit,
                           representation_dim: int) -> GameStateModel:
    """The model phase (b) starts from (fp32, on CPU), reading the representation at the query
    positions (`representation_source="queries"`)."""
    if isinstance(init, CharacterInit):
        model = GameStateModel.from_pretrained(init.character)
        if model.representation_dim != representation_dim:
            raise ValueError(f"{init.character} has representations of width "
                             f"{model.representation_dim}, the shot encoder {representation_dim}")
        model.config.representation_source = "queries"
    elif isinstance(init, BaseLLMInit):
        tokenizer = build_tokenizer(init.base_llm)
        llm = AutoModelForCausalLM.from_pretrained(init.base_llm, dtype=torch.float32)
        llm.resize_token_embeddings(VOCAB_SIZE)
        config = GameStateConfig(text_config=llm.config, representation_dim=representation_dim,
                                 representation_source="queries")
        model = GameStateModel(config, language_model=llm)
        model.tokenizer = tokenizer
    else:
        from animegamer.models.tiny_game_state import tiny_game_state_model

        model = tiny_game_state_model(representation_dim, seed=init.tiny.seed,
                                      words=init.tiny.words, hidden_size=init.tiny.hidden_size,
                                      num_hidden_layers=init.tiny.num_hidden_layers,
                                      representation_source="queries")
    return model


def fully_trained_modules(model: GameStateModel) -> list[nn.Module]:
    """Modules trained in full: both embedding matrices, the norms, both resamplers."""
    llm = model.language_model
    norms = [module for name, module in llm.named_modules()
             if name.rsplit(".", 1)[-1] in NORM_NAMES]
    return [llm.get_input_embeddings(), llm.get_output_embeddings(), *norms,
            model.input_resampler, model.output_resampler]


def with_lora(model: GameStateModel, recipe: GameStateRecipe) -> Any:
    """`model` as a `peft.PeftModel` with the recipe's LoRA on the language model and the
    fully trained modules unfrozen; `merge_and_unload()` gives the `GameStateModel` back."""
    from peft import LoraConfig, get_peft_model

    if recipe.gradient_checkpointing:
        model.activation_checkpointing_enable({"use_reentrant": False})
    config = LoraConfig(r=recipe.lora_rank, lora_alpha=recipe.lora_alpha,
                        lora_dropout=recipe.lora_dropout,
                        target_modules=list(recipe.lora_target_modules))
    peft_model = get_peft_model(model, config)
    for module in fully_trained_modules(model):
        module.requires_grad_(True)
    return peft_model.train()


def window_losses(
    model: nn.Module, tokenizer: PreTrainedTokenizerFast, encoder: AnimeGamerShotEncoder,
    dataset: Path, window: EpisodeWindow, mse_weight: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, CE, representation loss) of one window; logits only where the labels are (not
    the whole prompt)."""
    representations = shot_representations(encoder, dataset, window.rows)
    sample = training_sample(tokenizer, window)
    kept = sample.target_length + 1
    output = model(input_ids=sample.input_ids, history_representations=list(representations[:-1]),
                   labels=sample.labels[:, -kept:], logits_to_keep=kept)
    mse = nn.functional.mse_loss(output.representation.float(), representations[-1:].float())
    return output.loss + mse_weight * mse, output.loss, mse


# ---- checkpoints and the loss log ----


def gradient_accumulation_steps(batch_size: int, num_processes: int) -> int:
    """Micro-steps per optimizer step: the model takes one window at a time, so each process
    accumulates its share of the batch (what the `Accelerator` must be created with)."""
    if batch_size % num_processes:
        raise ValueError(f"batch_size {batch_size} is not a multiple of the {num_processes} "
                         "processes")
    return batch_size // num_processes


def accelerator_options(recipe: GameStateRecipe, num_processes: int) -> dict[str, Any]:
    """What the `Accelerator` of this phase must be created with (add mixed precision, trackers,
    …): the accumulation of `gradient_accumulation_steps`, and DDP told that some parameters
    may get no gradient in a step (the input resampler, when a process's windows have no
    history)."""
    from accelerate.utils import DistributedDataParallelKwargs

    return {
        "gradient_accumulation_steps": gradient_accumulation_steps(recipe.batch_size,
                                                                   num_processes),
        "kwargs_handlers": [DistributedDataParallelKwargs(find_unused_parameters=True)],
    }


def _saves_plain_state_dicts(accelerator: Any) -> bool:
    """Whether `save_state` writes the model's state dict itself (not DeepSpeed, FSDP or
    Megatron, which save their own way and keep everything)."""
    from accelerate.utils import DistributedType

    return accelerator.distributed_type not in (
        DistributedType.DEEPSPEED, DistributedType.FSDP, DistributedType.MEGATRON_LM)


def _checkpoint_trainable_only(accelerator: Any, model: nn.Module) -> Any:
    """Make `save_state` keep only the trained parameters (the frozen base weights are rebuilt
    from `init`: 7B of fp32 weights per checkpoint otherwise); `load_state(strict=False)` reads
    them back. Returns the hook's handle."""
    trained = {name for name, parameter in model.named_parameters() if parameter.requires_grad}

    def keep_trained(models: list[nn.Module], weights: list[dict[str, Any]], _: str) -> None:
        for prepared, state in zip(models, weights, strict=True):
            if prepared is model:
                for name in [name for name in state if name not in trained]:
                    del state[name]

    return accelerator.register_save_state_pre_hook(keep_trained)


def merged_model(accelerator: Any, peft_model: nn.Module, recipe: GameStateRecipe,
                 representation_dim: int) -> GameStateModel | None:
    """The trained model with its LoRA merged, on the main process (None on the others).

    A sharded run (`shards_parameters`) has no process holding the trained weights whole: every
    process takes part in gathering the full state dict (`accelerator.get_state_dict`, which
    the main process receives), loaded into a fresh copy of the initial model with the same
    LoRA, then merged. The fresh copy draws its LoRA initialisation from a forked RNG, so the
    run's random state is untouched.
    """
    if not shards_parameters(accelerator):
        if not accelerator.is_main_process:
            return None
        return accelerator.unwrap_model(peft_model).merge_and_unload()
    state = accelerator.get_state_dict(peft_model)
    if not accelerator.is_main_process:
        return None
    with torch.random.fork_rng(devices=[]):
        full = with_lora(build_game_state_model(recipe.init, representation_dim), recipe)
    full.load_state_dict(state)
    return full.merge_and_unload()


@dataclass
class _Trainer:
    """One optimizer step over a global batch of windows (this process takes its share)."""

    accelerator: Any
    model: nn.Module
    optimizer: torch.optim.Optimizer
    trainable: list[nn.Parameter]
    encoder: AnimeGamerShotEncoder
    tokenizer: PreTrainedTokenizerFast
    dataset: Path
    recipe: GameStateRecipe

    def step(self, batch: Sequence[EpisodeWindow]) -> dict[str, float]:
        """One window per micro-step through `accelerator.accumulate` (no gradient sync, no
        optimizer step until the last), and the global batch's mean loss, CE and MSE."""
        accelerator = self.accelerator
        windows = batch[accelerator.process_index::accelerator.num_processes]
        totals = torch.zeros(3, device=accelerator.device)
        for window in windows:
            with accelerator.accumulate(self.model):
                loss, ce, mse = window_losses(self.model, self.tokenizer, self.encoder,
                                              self.dataset, window, self.recipe.mse_weight)
                accelerator.backward(loss)
                if accelerator.sync_gradients and self.recipe.max_grad_norm is not None:
                    accelerator.clip_grad_norm_(self.trainable, self.recipe.max_grad_norm)
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
            totals += torch.stack([loss, ce, mse]).detach().float() / len(windows)
        if not accelerator.sync_gradients:
            raise RuntimeError("gradient accumulation is out of step with the batches")
        loss, ce, mse = accelerator.reduce(totals, reduction="mean").tolist()
        return {"loss": loss, "ce": ce, "mse": mse}


# ---- the loop ----


def train_game_state(
    dataset: Path,
    out: Path,
    recipe: GameStateRecipe | dict[str, Any],
    shot_encoder: AnimeGamerShotEncoder,
    accelerator: Any,
    resume: bool = False,
    max_steps: int | None = None,
) -> Path:
    """Train phase (b) on the dataset's train split; returns OUT/game_state (a character
    folder's game-state part: llm/, resamplers.safetensors, tokenizer/, game_state_config.json).

    `accelerator`: an `accelerate.Accelerator` (mixed precision, processes) created with
    `gradient_accumulation_steps=gradient_accumulation_steps(batch_size, num_processes)`. `resume`
    continues from the newest checkpoint under OUT/checkpoints/game_state (a fresh run refuses a
    folder that has some). `max_steps`: stop this call at that step (checkpointed, and the model
    saved as of then); a later `resume=True` continues to `recipe.steps`. The phase releases
    what the accelerator held before (`free_memory`) and when it is done.
    """
    from accelerate.utils import set_seed

    recipe = recipe if isinstance(recipe, GameStateRecipe) else GameStateRecipe.model_validate(
        recipe)
    accumulation = gradient_accumulation_steps(recipe.batch_size, accelerator.num_processes)
    if accelerator.gradient_accumulation_steps != accumulation:
        raise ValueError(f"batch_size {recipe.batch_size} on {accelerator.num_processes} "
                         f"processes needs an Accelerator with gradient_accumulation_steps="
                         f"{accumulation}, not {accelerator.gradient_accumulation_steps}")
    dataset, out = Path(dataset), Path(out)
    folder, losses = out / PHASE_FOLDER, losses_path(out, PHASE_FOLDER)
    start, checkpoint = resume_point(out, PHASE_FOLDER, resume, accelerator)
    rows = read_rows(dataset).get("train", [])
    schedule = WindowSchedule(rows, recipe.max_turns, recipe.seed)

    accelerator.free_memory()  # checkpoints hold this phase's model and optimizer only
    set_seed(recipe.seed)
    encoder = shot_encoder.to(accelerator.device).eval().requires_grad_(False)
    model = build_game_state_model(recipe.init, representation_width(encoder))
    tokenizer = model.tokenizer
    if tokenizer is None:
        raise ValueError("the initial game-state model has no tokenizer")
    peft_model = with_lora(model, recipe)
    trainable = [p for p in peft_model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=recipe.lr, weight_decay=recipe.weight_decay)
    configure_deepspeed(accelerator, 1, recipe.max_grad_norm)  # a window a micro-step
    peft_model, optimizer = accelerator.prepare(peft_model, optimizer)
    # FSDP2 replaces the parameters by sharded ones: clip what the optimizer now steps
    trainable = [p for p in peft_model.parameters() if p.requires_grad]
    if (isinstance(peft_model, nn.parallel.DistributedDataParallel)
            and not peft_model.find_unused_parameters):
        raise ValueError("DDP needs find_unused_parameters=True here (a 1-turn window leaves "
                         "the input resampler without gradient): see accelerator_options")
    plain = _saves_plain_state_dicts(accelerator)
    hook = _checkpoint_trainable_only(accelerator, peft_model) if plain else None

    if checkpoint is not None:
        accelerator.load_state(str(checkpoint), **({"strict": False} if plain else {}))
        logger.info("resuming from %s (step %d)", checkpoint, start)
    stop = recipe.steps if max_steps is None else min(recipe.steps, max_steps)

    trainer = _Trainer(accelerator, peft_model, optimizer, trainable, encoder, tokenizer, dataset,
                       recipe)
    bar = progress(range(start, stop), initial=start, total=stop, desc="game state",
                   disable=not accelerator.is_local_main_process)
    try:
        for step in bar:
            record = {"step": step + 1, **trainer.step(schedule.batch(step, recipe.batch_size))}
            if not math.isfinite(record["loss"]):
                bar.close()
                found = latest_checkpoint(out, PHASE_FOLDER)
                check_finite(record["loss"], PHASE_FOLDER, step + 1, found[1] if found else None)
            accelerator.log({k: v for k, v in record.items() if k != "step"}, step=step + 1)
            bar.set_postfix(loss=f"{record['loss']:.4f}")
            if accelerator.is_main_process:
                with losses.open("a", encoding="utf-8") as file:
                    file.write(json.dumps(record) + "\n")
            if (step + 1) % recipe.checkpoint_every == 0 or step + 1 == stop:
                save_checkpoint(accelerator, out, PHASE_FOLDER, step + 1, recipe.keep_checkpoints)
    finally:
        if hook is not None:
            hook.remove()
    accelerator.wait_for_everyone()
    merged = merged_model(accelerator, peft_model, recipe, representation_width(encoder))
    if merged is not None:
        merged.save_pretrained(folder)
    accelerator.wait_for_everyone()
    accelerator.free_memory()
    return folder
