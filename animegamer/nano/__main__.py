"""AnimeGamer-Nano from one command each:

    python -m animegamer.nano world --out DATASETS [--shots N] [--seed S] [--episode-length L]
        [--characters Qiqi Sosuke] [--tower-steps N]
    python -m animegamer.nano train --dataset DATASETS --out RUN [--quick | --recipe R] [--resume]
        [--install]

`world` renders one dataset per character, DATASETS/<character>/ (N shots each, in the data
pipeline's format). `train` trains one model set per character, as the release has one per
film: the world's VAE once on every character's clips (RUN/vae/), then each character's phases
a, b, c on its own dataset only (`python -m animegamer.train all --vae RUN/vae` with
`recipes/nano.yaml`, into RUN/<character>/). `--install` puts the trained folders where the app
plays them without a GPU: `assets/nano/vae/` once, and `assets/nano/<character>/`, whose
manifest names the shared VAE (`convert.character.vae_folder`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from animegamer.characters.conversion.errors import ConversionError
from animegamer.data.episodes import TEST_FRACTION
from animegamer.data.errors import DataError
from animegamer.nano import NANO_WORLD
from animegamer.nano.tower import TowerTraining
from animegamer.paths import DEFAULT_NANO_DIR, PACKAGE_ROOT

EXIT_ERROR = 2
NANO_RECIPE = PACKAGE_ROOT.parent / "recipes" / "nano.yaml"
QUICK_RECIPE = PACKAGE_ROOT.parent / "recipes" / "nano-quick.yaml"
NANO_MAX_BYTES = 60 * 1024**2
"""What the repository ships of Nano's weights (every character and the shared VAE), at most."""
VAE = "vae"
"""The world's VAE, shared by its characters: RUN/vae/ and assets/nano/vae/."""


def _add_world(commands: argparse._SubParsersAction) -> None:
    world = commands.add_parser("world", help="render the world as one dataset per character")
    world.add_argument("--out", type=Path, required=True,
                       help="the folder of the datasets (one per character: OUT/<character>/)")
    world.add_argument("--shots", type=int, default=240,
                       help="shots of each character (default 240)")
    world.add_argument("--seed", type=int, default=0, help="the world's seed (default 0)")
    world.add_argument("--episode-length", type=int, default=8,
                       help="shots per episode (default 8)")
    world.add_argument("--characters", nargs="+", default=["Qiqi", "Sosuke"],
                       help="who plays, each in a dataset of its own (default Qiqi Sosuke)")
    world.add_argument("--test-fraction", type=float, default=TEST_FRACTION,
                       help=f"share of the episodes in the test split (default {TEST_FRACTION})")
    world.add_argument("--tower-steps", type=int, default=TowerTraining().steps,
                       help="training steps of the world's image tower, which the features come "
                            f"from (default {TowerTraining().steps}; tests use a few)")
    world.add_argument("--workers", type=int, default=2,
                       help="threads measuring and encoding shots (default 2)")
    world.set_defaults(run=run_world)


def _add_train(commands: argparse._SubParsersAction) -> None:
    train = commands.add_parser("train", help="train each character's models on its dataset")
    train.add_argument("--dataset", type=Path, required=True,
                       help="a `world` folder: one dataset per character")
    train.add_argument("--out", type=Path, required=True,
                       help="the training folder (RUN/vae/ and one RUN/<character>/ each)")
    train.add_argument("--recipe", type=Path, default=None,
                       help="the training recipe (default recipes/nano.yaml)")
    train.add_argument("--quick", action="store_true",
                       help="recipes/nano-quick.yaml: the same path in about a minute (tests)")
    train.add_argument("--resume", action="store_true", help="continue an interrupted run")
    train.add_argument("--install", action="store_true",
                       help=f"copy the trained characters to {DEFAULT_NANO_DIR} for the app")
    train.set_defaults(run=run_train)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m animegamer.nano", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    _add_world(commands)
    _add_train(commands)
    return parser


def character_key(character: str) -> str:
    """A character's folder name: its name in lower case (datasets, runs, assets/nano)."""
    return character.casefold()


def run_world(args: argparse.Namespace) -> int:
    from animegamer.nano.world import WorldOptions, build_world

    if min(args.shots, args.episode_length, args.workers, args.tower_steps) < 1:
        raise DataError("--shots, --episode-length, --workers and --tower-steps must be at least 1")
    if not 0 <= args.test_fraction < 1:
        raise DataError("--test-fraction must be in [0, 1)")
    keys = [character_key(character) for character in args.characters]
    if len(set(keys)) != len(keys):
        raise DataError(f"--characters names a character twice: {' '.join(args.characters)}")
    for character in args.characters:
        options = WorldOptions(
            out=args.out / character_key(character), shots=args.shots, seed=args.seed,
            episode_length=args.episode_length, characters=(character,),
            test_fraction=args.test_fraction, workers=args.workers,
            tower=TowerTraining(steps=args.tower_steps, seed=args.seed),
        )
        started = time.perf_counter()
        try:
            report = build_world(options)
        except (ValueError, FileExistsError) as error:
            raise DataError(str(error)) from None
        seconds = time.perf_counter() - started
        rows = report["stages"]["rows"]
        print(
            f"nano world: {character}: {args.shots} shots "
            f"({', '.join(f'{n} {s}' for s, n in rows.items())}) in "
            f"{report['episodes']['count']} episodes, seed {args.seed}, {seconds:.1f} s "
            f"({args.shots / seconds:.1f} shots/s) → {options.out}"
        )
    return 0


def character_datasets(folder: Path) -> dict[str, Path]:
    """The character datasets `world` wrote under `folder`, by folder name."""
    from animegamer.data import layout

    datasets = {path.parent.name: path.parent
                for path in sorted(Path(folder).glob(f"*/{layout.REPORT}"))}
    if not datasets:
        raise DataError(f"{folder} holds no character dataset (`python -m animegamer.nano world "
                        f"--out {folder}` writes one per character)")
    return datasets


def run_train(args: argparse.Namespace) -> int:
    from animegamer.train.__main__ import CHARACTER
    from animegamer.train.__main__ import main as train

    datasets = character_datasets(args.dataset)
    recipe = args.recipe or (QUICK_RECIPE if args.quick else NANO_RECIPE)
    train_world_vae(list(datasets.values()), args.out, recipe, args.resume)
    for key, dataset in datasets.items():
        print(f"nano train: {key}")
        command = ["all", "--dataset", str(dataset), "--out", str(args.out / key),
                   "--config", str(recipe), "--vae", str(args.out / VAE)]
        code = train([*command, "--resume"] if args.resume else command)
        if code:
            return code
    if not args.install:
        return 0
    characters = {key: args.out / key / CHARACTER for key in datasets}
    install(args.out / VAE, characters, DEFAULT_NANO_DIR)
    print(f"installed: {DEFAULT_NANO_DIR} ({', '.join(characters)}; the app plays them "
          "without a GPU)")
    return 0


def train_world_vae(datasets: Sequence[Path], out: Path, recipe: Path, resume: bool) -> Path:
    """The world's VAE (OUT/vae/), trained once on every character's train clips by the
    recipe's `vae` section; kept as it is on `resume` when it was finished."""
    from animegamer.train.loop import losses_path
    from animegamer.train.recipe import RecipeError, load_recipe
    from animegamer.train.vae import train_vae

    target = out / VAE
    if resume and (target / "config.json").is_file():
        print(f"vae: kept {target}")
        return target
    section = load_recipe(recipe).vae
    if section is None:
        raise RecipeError(f"{recipe}: the recipe has no 'vae' section (the world's VAE)")
    train_vae(datasets, target, section, losses=losses_path(out, VAE))
    print(f"vae: wrote {target}")
    return target


def install(vae: Path, characters: Mapping[str, Path], target: Path) -> Path:
    """Put the shared `vae` in target/vae/ and each trained character folder in
    target/<key>/ without its own VAE, its manifest naming the shared one, within the
    repository's size budget; `target` is replaced only once the new one is complete."""
    from animegamer.characters.conversion.character import check_layout

    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(vae, staging / VAE, ignore=shutil.ignore_patterns("*.jsonl"))
    for key, character in characters.items():
        check_layout(character)
        shutil.copytree(character, staging / key, ignore=shutil.ignore_patterns(VAE))
        share_vae(staging / key, VAE)
        check_layout(staging / key)
    size = sum(p.stat().st_size for p in staging.rglob("*") if p.is_file())
    if size > NANO_MAX_BYTES:
        shutil.rmtree(staging)
        raise DataError(f"the Nano folders hold {size / 1024**2:.1f} MiB; the repository ships "
                        f"at most {NANO_MAX_BYTES / 1024**2:.0f} MiB of Nano weights")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def share_vae(character: Path, vae: str) -> None:
    """Make the manifest of `character` name the VAE folder `vae` beside it, and the Nano
    world (`NANO_WORLD`: evaluation runs the world's probes on it)."""
    from animegamer.characters.conversion.character import MANIFEST_NAME, SHARED_VAE_KEY, WORLD_KEY

    path = character / MANIFEST_NAME
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest.update({SHARED_VAE_KEY: vae, WORLD_KEY: NANO_WORLD})
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command: Callable[[argparse.Namespace], int] = args.run
    try:
        return command(args)
    except (DataError, ConversionError, ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
