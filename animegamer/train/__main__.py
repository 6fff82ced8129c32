"""`python -m animegamer.train {vae,decoder,game-state,adapt,all} --dataset DIR --out DIR --config
RECIPE.yaml [--resume] [--max-steps N] [--name NAME]`, also under `accelerate launch -m
animegamer.train ...`.

Outputs under OUT: vae/ (a small world's own VAE, when the recipe has a `vae` section), decoder/
(phase a's pipeline), game_state/ (phase b), decoder_adapted/ (phase c), character/ (`all`: the
character folder the engine plays, with its model card), checkpoints/<phase>/step-N/,
logs/<phase>/losses.jsonl and latents/ (the VAE latent cache).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from accelerate import Accelerator

from animegamer.train.recipe import Recipe, RecipeError, load_recipe

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
    parser.add_argument("--config", type=Path, required=True, help="the recipe (YAML)")
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
        "--name", default=None,
        help="all: the character's name in its folder's manifest (default: the dataset's)",
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


def train_game_state(
    args: argparse.Namespace, recipe: Recipe, accelerator: Accelerator
) -> Path:
    """Phase b (`animegamer.train.game_state_phase`) with phase a's shot encoder. Its recipe
    section is validated by that phase's own model; the accelerator accumulates one window
    per micro-step there, so its accumulation is set for the phase and restored after."""
    from pydantic import ValidationError

    from animegamer.train import game_state_phase
    from animegamer.train.decoder_phase import DECODER, load_shot_encoder

    if recipe.game_state is None:
        raise RecipeError(f"{args.config}: the recipe has no 'game_state' section (phase b)")
    try:
        settings = game_state_phase.GameStateRecipe.model_validate(recipe.game_state)
    except ValidationError as error:
        problems = "; ".join(
            ".".join(map(str, ("game_state", *e["loc"]))) + f": {e['msg']}" for e in error.errors()
        )
        raise RecipeError(f"{args.config}: {problems}") from None
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
        raise RecipeError(f"{args.config}: the recipe has no 'vae' section")
    train(args.dataset, args.out / VAE, recipe.vae, args.max_steps, losses_path(args.out, VAE))
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


def run(args: argparse.Namespace) -> None:
    from accelerate.utils import ProjectConfiguration

    from animegamer.train import decoder_phase

    recipe = load_recipe(args.config)
    if args.max_steps is not None and args.max_steps < 1:
        raise ValueError(f"--max-steps must be at least 1, got {args.max_steps}")
    accelerator = Accelerator(
        mixed_precision=recipe.mixed_precision,
        gradient_accumulation_steps=recipe.gradient_accumulation_steps,
        project_config=ProjectConfiguration(project_dir=str(args.out)),
        log_with=args.report_to,
    )
    if args.report_to:
        accelerator.init_trackers("animegamer-train", config=recipe.model_dump(mode="json"))
    common = {"resume": args.resume, "max_steps": args.max_steps}
    game_state = args.game_state
    if args.command == VAE or (args.command == "all" and recipe.vae is not None):
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
            character = assemble(args, recipe, game_state)
            _report(accelerator, "character", character)
            if args.push_to_hub:
                from animegamer.convert.character import publish

                commit = publish(character, args.push_to_hub, private=args.private,
                                 keep_card=True)
                accelerator.print(f"published {commit.commit_url}; pin revision {commit.oid}")
    accelerator.end_training()


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        run(args)
    except (ValueError, OSError, ImportError) as error:
        message = " ".join(str(error).split()) or type(error).__name__
        print(f"error: {message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
