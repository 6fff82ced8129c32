"""AnimeGamer-Nano end to end, as functions: `build_datasets` renders one dataset per character,
`train_world` trains one model set per character (as the release has one per film) and can
install them where the app plays them without a GPU.

    from animegamer.nano import build_datasets, train_world

    built = build_datasets(Path("runs/nano-data"), shots=240)
    trained = train_world(Path("runs/nano-data"), Path("runs/nano"), install=True)

`train_world` trains the world's VAE once on every character's clips (RUN/vae/), then each
character's phases a, b, c on its own dataset only (`animegamer.train.train` with
`recipes/nano.yaml` and that VAE, into RUN/<character>/). Installing puts `assets/nano/vae/`
once, and `assets/nano/<character>/`, whose manifest names the shared VAE
(`convert.character.vae_folder`).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from animegamer.data.episodes import TEST_FRACTION
from animegamer.data.errors import DataError
from animegamer.nano import NANO_WORLD
from animegamer.nano.tower import TowerTraining
from animegamer.nano.vocabulary import world_words
from animegamer.paths import DEFAULT_NANO_DIR, PACKAGE_ROOT

NANO_RECIPE = PACKAGE_ROOT.parent / "recipes" / "nano.yaml"
QUICK_RECIPE = PACKAGE_ROOT.parent / "recipes" / "nano-quick.yaml"
NANO_WORDS = "nano-world"
"""The word list a Nano recipe names for its tokenizer's whole-word tokens (`world_words`)."""
NANO_MAX_BYTES = 60 * 1024**2
"""What the repository ships of Nano's weights (every character and the shared VAE), at most."""
VAE = "vae"
"""The world's VAE, shared by its characters: RUN/vae/ and assets/nano/vae/."""


@dataclass(frozen=True)
class WorldDataset:
    character: str
    folder: Path
    rows: dict[str, int]
    """Shots per split."""
    episodes: int
    seconds: float


@dataclass
class NanoTraining:
    """What `train_world` wrote: the world's VAE, each character's folder by key, and the
    installed folder (None when not installed)."""

    vae: Path
    characters: dict[str, Path] = field(default_factory=dict)
    installed: Path | None = None


def character_key(character: str) -> str:
    """A character's folder name: its name in lower case (datasets, runs, assets/nano)."""
    return character.casefold()


def nano_word_lists() -> dict[str, tuple[str, ...]]:
    """The word lists a Nano recipe may name (`load_recipe`'s `word_lists`)."""
    return {NANO_WORDS: world_words()}


def build_datasets(
    out: Path, shots: int = 240, seed: int = 0, episode_length: int = 8,
    characters: Sequence[str] = ("Qiqi", "Sosuke"), test_fraction: float = TEST_FRACTION,
    tower_steps: int | None = None, workers: int = 2,
) -> list[WorldDataset]:
    """Render one dataset per character, OUT/<character>/ (`shots` each, in the data
    pipeline's format). `DataError` for arguments it cannot use, before anything is written."""
    from animegamer.nano.world import WorldOptions, build_world

    tower_steps = TowerTraining().steps if tower_steps is None else tower_steps
    if min(shots, episode_length, workers, tower_steps) < 1:
        raise DataError("--shots, --episode-length, --workers and --tower-steps must be at least 1")
    if not 0 <= test_fraction < 1:
        raise DataError("--test-fraction must be in [0, 1)")
    keys = [character_key(character) for character in characters]
    if len(set(keys)) != len(keys):
        raise DataError(f"--characters names a character twice: {' '.join(characters)}")
    built = []
    for character in characters:
        options = WorldOptions(
            out=out / character_key(character), shots=shots, seed=seed,
            episode_length=episode_length, characters=(character,), test_fraction=test_fraction,
            workers=workers, tower=TowerTraining(steps=tower_steps, seed=seed),
        )
        started = time.perf_counter()
        try:
            report = build_world(options)
        except (ValueError, FileExistsError) as error:
            raise DataError(str(error)) from None
        built.append(WorldDataset(character, options.out, dict(report["stages"]["rows"]),
                                  report["episodes"]["count"], time.perf_counter() - started))
    return built


def character_datasets(folder: Path) -> dict[str, Path]:
    """The character datasets `build_datasets` wrote under `folder`, by folder name."""
    from animegamer.data import layout

    datasets = {path.parent.name: path.parent
                for path in sorted(Path(folder).glob(f"*/{layout.REPORT}"))}
    if not datasets:
        raise DataError(f"{folder} holds no character dataset (`python -m animegamer.nano world "
                        f"--out {folder}` writes one per character)")
    return datasets


def train_world(
    dataset: Path, out: Path, recipe: Path = NANO_RECIPE, resume: bool = False,
    install_to: Path | None = None, say: Callable[[str], None] = print, vae: Path | None = None,
    start_from: Path | None = None,
) -> NanoTraining:
    """Train the world's VAE (or take the trained one at `vae`), then each character of the
    `build_datasets` folder `dataset` (see the module doc); with `install_to` (the app's:
    `DEFAULT_NANO_DIR`), install them there. `start_from`: a folder `install` wrote (the
    committed `assets/nano`): each character goes on from its folder there, on its shared VAE
    (a sitting: `recipes/nano-sitting.yaml`). Raises `DataError`, `ConversionError` or one of
    `animegamer.train`'s `TRAINING_ERRORS`."""
    from animegamer.nano.renderer import world_scene
    from animegamer.train.recipe import load_recipe
    from animegamer.train.run import CHARACTER, TrainOptions, check_continuation, train

    check_continuation(load_recipe(recipe, word_lists=nano_word_lists()), str(recipe), start_from)
    datasets = character_datasets(dataset)
    starts = sitting_starts(start_from, datasets, vae) if start_from is not None else {}
    if vae is not None and not (Path(vae) / "config.json").is_file():
        raise DataError(f"--vae {vae}: not a VAE folder (no config.json)")
    if start_from is not None:
        vae = Path(start_from) / VAE
    trained = vae or train_world_vae(list(datasets.values()), out, recipe, resume, say)
    result = NanoTraining(Path(trained))
    for key, folder in datasets.items():
        say(f"nano train: {key}" + (f", going on from {starts[key]}" if starts else ""))
        options = TrainOptions(resume=resume, vae=None if starts else result.vae,
                               word_lists=nano_word_lists(), scenes=world_scene,
                               start_from=starts.get(key))
        train(recipe, folder, out / key, "all", options, say=say)
        result.characters[key] = out / key / CHARACTER
    if install_to is not None:
        result.installed = install(result.vae, result.characters, install_to)
    return result


def sitting_starts(start_from: Path, datasets: Mapping[str, Path],
                   vae: Path | None) -> dict[str, Path]:
    """Each character's folder under `start_from` (an installed Nano folder), by key;
    `DataError` before any training when one is missing."""
    if vae is not None:
        raise DataError("--start-from goes on with the folder's own VAE; leave out --vae")
    start_from = Path(start_from)
    if not (start_from / VAE / "config.json").is_file():
        raise DataError(f"--start-from {start_from}: no {VAE}/config.json (a folder that "
                        "`nano train --install` wrote, e.g. assets/nano)")
    held = sorted(path.parent.name for path in start_from.glob("*/model_index.json"))
    missing = [key for key in datasets if key not in held]
    if missing:
        raise DataError(f"--start-from {start_from}: no trained {', '.join(missing)} there "
                        f"(it holds {', '.join(held) or 'none'})")
    return {key: start_from / key for key in datasets}


def train_world_vae(datasets: Sequence[Path], out: Path, recipe: Path, resume: bool,
                    say: Callable[[str], None] = print) -> Path:
    """The world's VAE (OUT/vae/), trained once on every character's train clips by the
    recipe's `vae` section; kept as it is on `resume` when it was finished."""
    from animegamer.train.loop import losses_path
    from animegamer.train.recipe import RecipeError, load_recipe
    from animegamer.train.vae import train_vae

    target = out / VAE
    if resume and (target / "config.json").is_file():
        say(f"vae: kept {target}")
        return target
    section = load_recipe(recipe, word_lists=nano_word_lists()).vae
    if section is None:
        raise RecipeError(f"{recipe}: the recipe has no 'vae' section (the world's VAE)")
    train_vae(datasets, target, section, losses=losses_path(out, VAE))
    say(f"vae: wrote {target}")
    return target


def train_vae_sitting(dataset: Path, target: Path, recipe: Path, start_from: Path | None = None,
                      steps: int | None = None) -> Path:
    """One sitting of the world's VAE alone: the recipe's `vae` section (at most `steps` of it)
    on every character dataset under `dataset`, into `target`, going on from the VAE at
    `start_from` (e.g. the committed folder: a VAE that needs more than one sitting accumulates
    its steps, counted in `target`'s training.json)."""
    from animegamer.train.recipe import RecipeError, load_recipe
    from animegamer.train.vae import train_vae

    section = load_recipe(recipe, word_lists=nano_word_lists()).vae
    if section is None:
        raise RecipeError(f"{recipe}: the recipe has no 'vae' section (the world's VAE)")
    if start_from is not None and not (Path(start_from) / "config.json").is_file():
        raise DataError(f"--start-from {start_from}: not a VAE folder (no config.json)")
    if steps is not None and steps < 1:
        raise DataError("--steps must be at least 1")
    train_vae(list(character_datasets(dataset).values()), target, section, max_steps=steps,
              start_from=start_from)
    return target


def install(vae: Path, characters: Mapping[str, Path], target: Path = DEFAULT_NANO_DIR) -> Path:
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
