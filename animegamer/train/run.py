"""A training run as a function: `train(recipe, dataset, out, phases=...)`.

    from animegamer.train import train

    result = train("recipes/tiny-cpu.yaml", "runs/kiki/dataset", "runs/kiki/run", phases="all")
    result.written["character"]  # the character folder the engine plays

Before any compute it checks the dataset, the recipe (every phase it will run, and the folders
they start from) and, on `resume`, that each phase's checkpoints were made by the same recipe
(`checks`). Outputs under OUT: vae/ (a small world's own VAE, when the recipe has a `vae`
section), decoder/ (phase a's pipeline), game_state/ (phase b), decoder_adapted/ (phase c),
character/ (`all`: the character folder the engine plays, with its model card),
checkpoints/<phase>/step-N/, logs/<phase>/losses.jsonl and latents/ (the VAE latent cache).
It runs as well under `accelerate launch` or `torchrun` (one call per process).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from animegamer.train.recipe import GameStateRecipe, Recipe, RecipeError, load_recipe

if TYPE_CHECKING:
    from accelerate import Accelerator

    from animegamer.models.scene_latent import SceneSource

COMMANDS = ("vae", "decoder", "game-state", "adapt", "all")
"""What `phases` may name: one phase, or all of them."""
VAE = "vae"
CHARACTER = "character"
PHASES = {"decoder": "decoder", "game-state": "game_state", "adapt": "adapt"}
"""Command → the phase's checkpoint folder and recipe section."""
TRAINING_ERRORS = (ValueError, OSError, ImportError, FloatingPointError)
"""What `train` raises for input or a run it cannot use (`RecipeError` is a ValueError)."""


@dataclass(frozen=True)
class TrainOptions:
    """A run's settings besides the recipe, the dataset and the output folder."""

    resume: bool = False
    """Continue each phase from its latest checkpoint."""
    max_steps: int | None = None
    """Stop each phase at this optimizer step (checkpointed; `resume` continues)."""
    game_state: Path | None = None
    """adapt: the game-state model folder (default OUT/game_state)."""
    vae: Path | None = None
    """decoder, all: a trained VAE folder instead of training the recipe's `vae` section."""
    name: str | None = None
    """all: the character's name in its folder (default: the dataset's first character)."""
    push_to_hub: str | None = None
    """all: publish the character folder to this Hub model repo (HF_TOKEN)."""
    private: bool = False
    report_to: str | None = None
    """accelerate trackers for the losses (tensorboard, wandb, all)."""
    word_lists: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """The word lists the recipe may name (`load_recipe`): a world's command gives its own."""
    scenes: SceneSource | None = None
    """decoder, adapt, all: the world's backgrounds, for a decoder that draws on them
    (`scene_channels`): a world's command gives its own; by default the dataset's
    (`DatasetScenes`)."""
    start_from: Path | None = None
    """decoder, game-state, all: a character folder (a committed one, `assets/nano/qiqi`) whose
    weights the phases go on training instead of the recipe's `init` sections (`continuing`):
    a model that needs more than one sitting accumulates its training."""


@dataclass(frozen=True)
class TrainRequest:
    """One `train` call's arguments, as the phases read them."""

    phases: str
    dataset: Path
    out: Path
    recipes: tuple[Path, ...]
    options: TrainOptions

    @property
    def recipe_name(self) -> str:
        return " + ".join(str(path) for path in self.recipes)


@dataclass
class TrainResult:
    """What the run wrote, by phase (`vae`, `decoder`, `game-state`, `adapt`, `character`)."""

    written: dict[str, Path] = field(default_factory=dict)
    stopped: str | None = None
    """The phase `max_steps` stopped (continue with `resume`), or None."""
    published: str | None = None
    """The Hub commit URL of the published character, or None."""


def game_state_settings(
    request: TrainRequest, recipe: Recipe, num_processes: int
) -> GameStateRecipe:
    """Phase b's recipe section, with a batch the processes can share."""
    settings = recipe.game_state
    if settings is None:
        raise RecipeError(
            f"{request.recipe_name}: the recipe has no 'game_state' section (phase b)"
        )
    if settings.batch_size % num_processes:
        raise RecipeError(
            f"{request.recipe_name}: game_state.batch_size {settings.batch_size} is not a "
            f"multiple of the {num_processes} processes"
        )
    return settings


def train_game_state(request: TrainRequest, recipe: Recipe, accelerator: Accelerator) -> Path:
    """Phase b (`animegamer.train.game_state_phase`) with phase a's shot encoder. The
    accelerator accumulates one window per micro-step there, so its accumulation is set for
    the phase and restored after."""
    from animegamer.train import game_state_phase
    from animegamer.train.decoder_phase import DECODER, load_shot_encoder

    settings = game_state_settings(request, recipe, accelerator.num_processes)
    encoder = load_shot_encoder(request.out / DECODER)
    previous = accelerator.gradient_accumulation_steps
    accelerator.gradient_accumulation_steps = game_state_phase.gradient_accumulation_steps(
        settings.batch_size, accelerator.num_processes
    )
    try:
        return game_state_phase.train_game_state(
            request.dataset, request.out, settings, encoder, accelerator,
            request.options.resume, request.options.max_steps,
        )
    finally:
        accelerator.gradient_accumulation_steps = previous


def train_vae(request: TrainRequest, recipe: Recipe) -> Recipe:
    """The world's own VAE (OUT/vae); returns the recipe whose tiny decoder init uses it."""
    from animegamer.train.loop import losses_path
    from animegamer.train.vae import train_vae as train

    if recipe.vae is None:
        raise RecipeError(f"{request.recipe_name}: the recipe has no 'vae' section")
    train([request.dataset], request.out / VAE, recipe.vae, request.options.max_steps,
          losses_path(request.out, VAE))
    return with_trained_vae(recipe, request.out / VAE)


def with_trained_vae(recipe: Recipe, vae: Path) -> Recipe:
    """`recipe` with its tiny decoder init taking the VAE at `vae` (where it names none)."""
    decoder = recipe.decoder
    if decoder is None or decoder.init.tiny is None or decoder.init.tiny.vae is not None:
        return recipe
    tiny = decoder.init.tiny.model_copy(update={"vae": vae})
    init = decoder.init.model_copy(update={"tiny": tiny})
    return recipe.model_copy(update={"decoder": decoder.model_copy(update={"init": init})})


def continuing(recipe: Recipe, character: Path) -> Recipe:
    """`recipe` going on from the character folder `character`: phase a from its pipeline
    (with the VAE it shares), phase b from its game-state model, and no `vae` section (the
    folder's VAE stays)."""
    from animegamer.train.recipe import CharacterInit, DecoderInit

    update: dict[str, object] = {"vae": None}
    if recipe.decoder is not None:
        init = DecoderInit(pipeline=character)
        update["decoder"] = recipe.decoder.model_copy(update={"init": init})
    if recipe.game_state is not None:
        init_b = CharacterInit(character=character)
        update["game_state"] = recipe.game_state.model_copy(update={"init": init_b})
    return recipe.model_copy(update=update)


def continued_note(start_from: Path | None) -> str:
    """The card's word on a run that went on from an earlier character folder (by its name
    only: the card names no path of the training machine)."""
    if start_from is None:
        return ""
    return (f"These weights went on training from an earlier `{Path(start_from).name}` folder "
            "(`start_from`): its steps come before this recipe's, whose `init` sections that "
            "folder replaced.")


def assemble(request: TrainRequest, recipe: Recipe, game_state: Path) -> Path:
    """`all`'s last step: the character folder OUT/character, with the dataset's scenes
    (`scenes/`) when its decoder drew on them."""
    from animegamer.data.dataset import read_rows
    from animegamer.data.scenes import DatasetScenes
    from animegamer.train.character import TrainingSummary, assemble_character
    from animegamer.train.decoder_phase import ADAPTED
    from animegamer.train.loop import LOGS

    rows = read_rows(request.dataset).get("train", [])
    name = request.options.name or (rows[0]["character"] if rows else request.dataset.name)
    phases = [VAE, "decoder", "game_state", "adapt"]
    summary = TrainingSummary(
        dataset=str(request.dataset),
        recipe=recipe.model_dump(mode="json"),
        phase_dirs={phase: request.out / LOGS / phase for phase in phases},
        notes=continued_note(request.options.start_from),
    )
    character = assemble_character(
        request.out / CHARACTER, name, game_state, request.out / ADAPTED, summary,
        play_guidance=None if recipe.decoder is None else recipe.decoder.play_guidance,
    )
    config = json.loads((character / "transformer" / "config.json").read_text())
    scenes = request.options.scenes
    if config.get("scene_channels") and isinstance(scenes, DatasetScenes):
        scenes.table.save(character)  # what it trained on
    return character


def phases_of(command: str) -> list[str]:
    """The checkpointed phases (`PHASES` values) a command runs."""
    if command == "all":
        return list(PHASES.values())
    return [PHASES[command]] if command in PHASES else []


def check_inputs(request: TrainRequest, recipe: Recipe) -> list[str]:
    """Everything that can be refused before compute, even before the `Accelerator` (see the
    module doc); returns the phases that have no checkpoint yet (`record_recipes` then)."""
    from animegamer.train.checks import check_dataset, check_init_folders, check_resume_recipe

    phases = phases_of(request.phases)
    for phase in phases:
        if getattr(recipe, phase) is None:
            raise RecipeError(f"{request.recipe_name}: the recipe has no '{phase}' section")
    game_state_init = None
    if "game_state" in phases:
        processes = int(os.environ.get("WORLD_SIZE", "1"))
        game_state_init = game_state_settings(request, recipe, processes).init
    check_init_folders(phases, recipe, game_state_init)
    decodes = bool({"decoder", "adapt"} & set(phases))
    check_dataset(request.dataset, features=bool(phases), clips=decodes,
                  character=request.options.name)
    return [
        phase for phase in phases
        if check_resume_recipe(request.out, phase, recipe, request.recipe_name)
    ]


def record_recipes(
    request: TrainRequest, recipe: Recipe, phases: list[str], accelerator: Accelerator
) -> None:
    """The recipe record (`checks.record_recipe`) of each phase without checkpoints."""
    from animegamer.train.checks import record_recipe

    if accelerator.is_main_process:
        for phase in phases:
            record_recipe(request.out, phase, recipe, request.recipe_name)
    accelerator.wait_for_everyone()


def launched_without_cuda() -> bool:
    """Whether several processes were launched (torchrun) on a machine without CUDA: accelerate
    then needs `cpu=True` to join them over gloo (`accelerate launch --multi_gpu` is torchrun
    too); without it each process would train alone, all writing the same folder."""
    import torch

    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available()


def make_accelerator(request: TrainRequest, recipe: Recipe) -> Accelerator:
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs, ProjectConfiguration

    return Accelerator(
        mixed_precision=recipe.mixed_precision,
        gradient_accumulation_steps=recipe.gradient_accumulation_steps,
        cpu=launched_without_cuda(),
        project_config=ProjectConfiguration(project_dir=str(request.out)),
        log_with=request.options.report_to,
        # phase b under DDP: a window without history leaves the input resampler unused
        kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)],
    )


def checked_recipe(request: TrainRequest) -> Recipe:
    """The recipe of the run, with the given VAE; `ValueError` for options that conflict."""
    options = request.options
    recipe = load_recipe(*request.recipes, word_lists=options.word_lists)
    if request.phases not in COMMANDS:
        raise ValueError(f"phases {request.phases!r}: one of {', '.join(COMMANDS)}")
    if options.max_steps is not None and options.max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, got {options.max_steps}")
    if options.vae is not None:
        if request.phases not in ("decoder", "all"):
            raise ValueError(f"--vae is for the decoder and all commands, not {request.phases}")
        recipe = with_trained_vae(recipe, options.vae)
    check_continuation(recipe, request.recipe_name, options.start_from)
    if options.start_from is not None:
        if options.vae is not None:
            raise ValueError("--start-from goes on with the folder's own VAE; leave out --vae")
        recipe = continuing(recipe, options.start_from)
    return recipe


def check_continuation(recipe: Recipe, name: str, start_from: Path | None) -> None:
    """`RecipeError` for a sitting's recipe (`continues`) without the folder it goes on from."""
    if recipe.continues and start_from is None:
        raise RecipeError(f"{name} goes on from trained weights (continues: true): give "
                          "--start-from FOLDER (e.g. assets/nano)")


def train(
    recipe: str | Path | Sequence[str | Path],
    dataset: str | Path,
    out: str | Path,
    phases: str = "all",
    options: TrainOptions | None = None,
    say: Callable[[str], None] = print,
) -> TrainResult:
    """Train `phases` (one of `COMMANDS`) of a character on `dataset` into `out`, by the
    recipe (one YAML file, or several of one phase each); `say` hears each phase's outcome
    (on the main process). Raises one of `TRAINING_ERRORS` for input it cannot use, before any
    compute where it can."""
    from animegamer.data.scenes import DatasetScenes

    paths = (recipe,) if isinstance(recipe, str | Path) else tuple(recipe)
    options = options or TrainOptions()
    # one source for every phase: the dataset's own scenes are read once, if ever
    options = dataclasses.replace(options, scenes=options.scenes or DatasetScenes(Path(dataset)))
    request = TrainRequest(phases, Path(dataset), Path(out), tuple(Path(p) for p in paths),
                           options)
    loaded = checked_recipe(request)
    fresh = check_inputs(request, loaded)
    accelerator = make_accelerator(request, loaded)
    record_recipes(request, loaded, fresh, accelerator)
    if request.options.report_to:
        accelerator.init_trackers("animegamer-train", config=loaded.model_dump(mode="json"))
    result = TrainResult()
    run_phases(request, loaded, accelerator, result, say)
    accelerator.end_training()
    return result


def _record(result: TrainResult, phase: str, written: Path | None,
            accelerator: Accelerator, say: Callable[[str], None]) -> bool:
    """Note a phase's outcome; False when `max_steps` stopped it."""
    if written is None:
        result.stopped = phase
        line = f"{phase}: stopped by --max-steps; continue with --resume"
    else:
        result.written[phase] = written
        line = f"{phase}: wrote {written}"
    if accelerator.is_main_process:
        say(line)
    return written is not None


def run_vae(request: TrainRequest, recipe: Recipe, accelerator: Accelerator,
            result: TrainResult, say: Callable[[str], None]) -> Recipe:
    """The world's VAE (on the main process, kept on `resume` when there), and the recipe
    whose tiny decoder uses it."""
    options = request.options
    if accelerator.is_main_process and not (options.resume and (request.out / VAE).is_dir()):
        recipe = train_vae(request, recipe)
    accelerator.wait_for_everyone()
    _record(result, VAE, request.out / VAE, accelerator, say)
    return with_trained_vae(recipe, request.out / VAE)


def finish_character(request: TrainRequest, game_state: Path, result: TrainResult,
                     accelerator: Accelerator, say: Callable[[str], None]) -> None:
    """`all`'s character folder, and its Hub upload when asked."""
    # the card shows the recipe as written, not with the VAE path this run filled in
    written = load_recipe(*request.recipes, word_lists=request.options.word_lists)
    character = assemble(request, written, game_state)
    _record(result, CHARACTER, character, accelerator, say)
    if request.options.push_to_hub:
        from animegamer.characters.conversion.character import publish

        commit = publish(character, request.options.push_to_hub,
                         private=request.options.private, keep_card=True)
        result.published = commit.commit_url
        say(f"published {commit.commit_url}; pin revision {commit.oid}")


def run_phases(request: TrainRequest, recipe: Recipe, accelerator: Accelerator,
               result: TrainResult, say: Callable[[str], None]) -> None:
    from animegamer.train import decoder_phase

    options, command = request.options, request.phases
    if command == VAE or (command == "all" and recipe.vae is not None and options.vae is None):
        recipe = run_vae(request, recipe, accelerator, result, say)
    if command in ("decoder", "all"):
        written = decoder_phase.train_decoder(
            request.dataset, request.out, recipe, accelerator, options.resume, options.max_steps,
            scenes=options.scenes,
        )
        if not _record(result, "decoder", written, accelerator, say):
            return
    game_state = options.game_state
    if command in ("game-state", "all"):
        game_state = train_game_state(request, recipe, accelerator)
        _record(result, "game-state", game_state, accelerator, say)
    if command in ("adapt", "all"):
        written = decoder_phase.adapt(
            request.dataset, request.out, recipe, accelerator, options.resume, options.max_steps,
            game_state=game_state, scenes=options.scenes,
        )
        adapted = _record(result, "adapt", written, accelerator, say)
        if command == "all" and adapted and accelerator.is_main_process:
            assert game_state is not None
            finish_character(request, game_state, result, accelerator, say)
