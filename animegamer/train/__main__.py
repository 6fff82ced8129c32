"""`python -m animegamer.train {vae,decoder,game-state,adapt,all} --dataset DIR --out DIR --config
RECIPE.yaml [--config MORE.yaml ...] [--resume] [--max-steps N] [--name NAME]`, also under
`accelerate launch -m animegamer.train ...` or `torchrun -m animegamer.train ...`. `--vae DIR`
(decoder, all) takes a trained VAE instead of training the recipe's `vae` section.

Before any compute it checks the dataset, the recipe (every phase it will run, and the folders
they start from) and, on `--resume`, that each phase's checkpoints were made by the same recipe
(`checks`).

Outputs under OUT: vae/ (a small world's own VAE, when the recipe has a `vae` section), decoder/
(phase a's pipeline), game_state/ (phase b), decoder_adapted/ (phase c), character/ (`all`: the
character folder the engine plays, with its model card), checkpoints/<phase>/step-N/,
logs/<phase>/losses.jsonl and latents/ (the VAE latent cache).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from accelerate import Accelerator

from animegamer.train.recipe import GameStateRecipe, Recipe, RecipeError, load_recipe

COMMANDS = ("vae", "decoder", "game-state", "adapt", "all")
VAE = "vae"
CHARACTER = "character"


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m animegamer.train", description="Train a character's models."
    )
    parser.add_argument("command", choices=COMMANDS, help="the phase to run, or all of them")
    parser.add_argument("--dataset", type=Path, required=True, help="a dataset folder")
    parser.add_argument("--out", type=Path, required=True, help="the training folder")
    parser.add_argument(
        "--config", type=Path, action="append", required=True,
        help="the recipe (YAML); repeat it to combine files of one phase each",
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue each phase from its latest checkpoint"
    )
    parser.add_argument(
        "--max-steps", type=int, default=None,
        help="stop each phase at this optimizer step (checkpointed; --resume continues)",
    )
    parser.add_argument(
        "--game-state", type=Path, default=None,
        help="adapt: the game-state model folder (default OUT/game_state)",
    )
    parser.add_argument(
        "--vae", type=Path, default=None,
        help="decoder, all: a trained VAE folder for the recipe's tiny decoder, instead of "
        "training the recipe's 'vae' section (the VAE a world's characters share)",
    )
    parser.add_argument(
        "--name", default=None,
        help="all: the trained character's name in its folder (default: the dataset's first "
        "character; a world of several characters, like Nano, names itself)",
    )
    parser.add_argument(
        "--push-to-hub", metavar="REPO", default=None,
        help="all: publish the character folder to this Hub model repo (HF_TOKEN)",
    )
    parser.add_argument("--private", action="store_true", help="with --push-to-hub")
    parser.add_argument(
        "--report-to", default=None,
        help="accelerate trackers for the losses (tensorboard, wandb, all); default none",
    )
    return parser


def _report(accelerator: Accelerator, phase: str, result: Path | None) -> None:
    if result is None:
        accelerator.print(f"{phase}: stopped by --max-steps; continue with --resume")
    else:
        accelerator.print(f"{phase}: wrote {result}")


def config_name(args: argparse.Namespace) -> str:
    return " + ".join(str(path) for path in args.config)


def game_state_settings(
    args: argparse.Namespace, recipe: Recipe, num_processes: int
) -> GameStateRecipe:
    """Phase b's recipe section, with a batch the processes can share."""
    settings = recipe.game_state
    if settings is None:
        raise RecipeError(f"{config_name(args)}: the recipe has no 'game_state' section (phase b)")
    if settings.batch_size % num_processes:
        raise RecipeError(
            f"{config_name(args)}: game_state.batch_size {settings.batch_size} is not a multiple "
            f"of the {num_processes} processes"
        )
    return settings


def train_game_state(
    args: argparse.Namespace, recipe: Recipe, accelerator: Accelerator
) -> Path:
    """Phase b (`animegamer.train.game_state_phase`) with phase a's shot encoder. The
    accelerator accumulates one window per micro-step there, so its accumulation is set for
    the phase and restored after."""
    from animegamer.train import game_state_phase
    from animegamer.train.decoder_phase import DECODER, load_shot_encoder

    settings = game_state_settings(args, recipe, accelerator.num_processes)
    encoder = load_shot_encoder(args.out / DECODER)
    previous = accelerator.gradient_accumulation_steps
    accelerator.gradient_accumulation_steps = game_state_phase.gradient_accumulation_steps(
        settings.batch_size, accelerator.num_processes
    )
    try:
        return game_state_phase.train_game_state(
            args.dataset, args.out, settings, encoder, accelerator, args.resume, args.max_steps
        )
    finally:
        accelerator.gradient_accumulation_steps = previous


def train_vae(args: argparse.Namespace, recipe: Recipe) -> Recipe:
    """The world's own VAE (OUT/vae); returns the recipe whose tiny decoder init uses it."""
    from animegamer.train.loop import losses_path
    from animegamer.train.vae import train_vae as train

    if recipe.vae is None:
        raise RecipeError(f"{config_name(args)}: the recipe has no 'vae' section")
    train([args.dataset], args.out / VAE, recipe.vae, args.max_steps,
          losses_path(args.out, VAE))
    return with_trained_vae(recipe, args.out / VAE)


def with_trained_vae(recipe: Recipe, vae: Path) -> Recipe:
    """`recipe` with its tiny decoder init taking the VAE at `vae` (where it names none)."""
    decoder = recipe.decoder
    if decoder is None or decoder.init.tiny is None or decoder.init.tiny.vae is not None:
        return recipe
    tiny = decoder.init.tiny.model_copy(update={"vae": vae})
    init = decoder.init.model_copy(update={"tiny": tiny})
    return recipe.model_copy(update={"decoder": decoder.model_copy(update={"init": init})})


def assemble(args: argparse.Namespace, recipe: Recipe, game_state: Path) -> Path:
    """`all`'s last step: the character folder OUT/character."""
    from animegamer.data.dataset import read_rows
    from animegamer.train.character import TrainingSummary, assemble_character
    from animegamer.train.decoder_phase import ADAPTED
    from animegamer.train.loop import LOGS

    rows = read_rows(args.dataset).get("train", [])
    name = args.name or (rows[0]["character"] if rows else args.dataset.name)
    phases = [VAE, "decoder", "game_state", "adapt"]
    summary = TrainingSummary(
        dataset=str(args.dataset),
        recipe=recipe.model_dump(mode="json"),
        phase_dirs={phase: args.out / LOGS / phase for phase in phases},
    )
    return assemble_character(args.out / CHARACTER, name, game_state, args.out / ADAPTED, summary)


PHASES = {"decoder": "decoder", "game-state": "game_state", "adapt": "adapt"}
"""Command → the phase's checkpoint folder and recipe section."""


def phases_of(command: str) -> list[str]:
    """The checkpointed phases (`PHASES` values) a command runs."""
    if command == "all":
        return list(PHASES.values())
    return [PHASES[command]] if command in PHASES else []


def check_inputs(args: argparse.Namespace, recipe: Recipe) -> list[str]:
    """Everything that can be refused before compute, even before the `Accelerator` (see the
    module doc); returns the phases that have no checkpoint yet (`record_recipes` then)."""
    from animegamer.train.checks import check_dataset, check_init_folders, check_resume_recipe

    phases = phases_of(args.command)
    for phase in phases:
        section = getattr(recipe, phase)
        if section is None:
            raise RecipeError(f"{config_name(args)}: the recipe has no '{phase}' section")
    game_state_init = None
    if "game_state" in phases:
        processes = int(os.environ.get("WORLD_SIZE", "1"))
        game_state_init = game_state_settings(args, recipe, processes).init
    check_init_folders(phases, recipe, game_state_init)
    decodes = bool({"decoder", "adapt"} & set(phases))
    check_dataset(args.dataset, features=bool(phases), clips=decodes, character=args.name)
    return [
        phase for phase in phases
        if check_resume_recipe(args.out, phase, recipe, config_name(args))
    ]


def record_recipes(
    args: argparse.Namespace, recipe: Recipe, phases: list[str], accelerator: Accelerator
) -> None:
    """The recipe record (`checks.record_recipe`) of each phase without checkpoints."""
    from animegamer.train.checks import record_recipe

    if accelerator.is_main_process:
        for phase in phases:
            record_recipe(args.out, phase, recipe, config_name(args))
    accelerator.wait_for_everyone()


def launched_without_cuda() -> bool:
    """Whether several processes were launched (torchrun) on a machine without CUDA: accelerate
    then needs `cpu=True` to join them over gloo (`accelerate launch --multi_gpu` is torchrun
    too); without it each process would train alone, all writing the same folder."""
    import torch

    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available()


def run(args: argparse.Namespace) -> None:
    from accelerate.utils import DistributedDataParallelKwargs, ProjectConfiguration

    from animegamer.train import decoder_phase

    recipe = load_recipe(*args.config)
    if args.max_steps is not None and args.max_steps < 1:
        raise ValueError(f"--max-steps must be at least 1, got {args.max_steps}")
    if args.vae is not None:
        if args.command not in ("decoder", "all"):
            raise ValueError(f"--vae is for the decoder and all commands, not {args.command}")
        recipe = with_trained_vae(recipe, args.vae)
    fresh = check_inputs(args, recipe)
    accelerator = Accelerator(
        mixed_precision=recipe.mixed_precision,
        gradient_accumulation_steps=recipe.gradient_accumulation_steps,
        cpu=launched_without_cuda(),
        project_config=ProjectConfiguration(project_dir=str(args.out)),
        log_with=args.report_to,
        # phase b under DDP: a window without history leaves the input resampler unused
        kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)],
    )
    record_recipes(args, recipe, fresh, accelerator)
    if args.report_to:
        accelerator.init_trackers("animegamer-train", config=recipe.model_dump(mode="json"))
    common = {"resume": args.resume, "max_steps": args.max_steps}
    game_state = args.game_state
    if args.command == VAE or (
        args.command == "all" and recipe.vae is not None and args.vae is None
    ):
        if accelerator.is_main_process and not (args.resume and (args.out / VAE).is_dir()):
            recipe = train_vae(args, recipe)
        accelerator.wait_for_everyone()
        recipe = with_trained_vae(recipe, args.out / VAE)
        _report(accelerator, "vae", args.out / VAE)
    if args.command in ("decoder", "all"):
        result = decoder_phase.train_decoder(args.dataset, args.out, recipe, accelerator, **common)
        _report(accelerator, "decoder", result)
        if result is None:
            return
    if args.command in ("game-state", "all"):
        game_state = train_game_state(args, recipe, accelerator)
        _report(accelerator, "game-state", game_state)
    if args.command in ("adapt", "all"):
        result = decoder_phase.adapt(
            args.dataset, args.out, recipe, accelerator, game_state=game_state, **common
        )
        _report(accelerator, "adapt", result)
        if args.command == "all" and result is not None and accelerator.is_main_process:
            # the card shows the recipe as written, not with the VAE path this run filled in
            character = assemble(args, load_recipe(*args.config), game_state)
            _report(accelerator, "character", character)
            if args.push_to_hub:
                from animegamer.characters.conversion.character import publish

                commit = publish(character, args.push_to_hub, private=args.private,
                                 keep_card=True)
                accelerator.print(f"published {commit.commit_url}; pin revision {commit.oid}")
    accelerator.end_training()


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        run(args)
    except (ValueError, OSError, ImportError, FloatingPointError) as error:
        message = " ".join(str(error).split()) or type(error).__name__
        print(f"error: {message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
