"""From a folder of videos to a playable, registered character: the data build, the three
training phases and the assembly, then the registry entry.

Everything the user gave is checked before anything is written (`prepare`): the recipe, the
videos folder, the reference image, every line of the answers file, the registry and, for a
recipe with the real towers, that they are at hand. Each stage is resumable (the build records
what it did in the dataset's `work` folder under `OUT/dataset`, training checkpoints in
`OUT/run/checkpoints/`), so a rerun of the same command continues where a stop left it.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from animegamer.characters.registry import RegistryError
from animegamer.create.register import check_name_free, distinct_instructions, entry, register
from animegamer.create.shell import python_line
from animegamer.data.annotate import Annotator, AnswerFile, VisionLanguageModel
from animegamer.data.build import BuildOptions, BuildResult, build, check_inputs, find_videos
from animegamer.data.dataset import read_rows
from animegamer.data.errors import DataError
from animegamer.data.extract import ExtractOptions
from animegamer.data.features import ShotFeatureExtractor, feature_extractor
from animegamer.data.from_videos import summary
from animegamer.data.shots import CutOptions
from animegamer.game.rules import make_instruction
from animegamer.paths import DEFAULT_REGISTRY, PACKAGE_ROOT
from animegamer.train.loop import LOGS, read_losses
from animegamer.train.recipe import DataRecipe, Recipe, RecipeError, load_recipe

DEFAULT_RECIPE = PACKAGE_ROOT.parent / "recipes" / "cpu.yaml"
DATASET = "dataset"
RUN = "run"
CHARACTER = "character"
PHASES = ("vae", "decoder", "game_state", "adapt")
PLAY_TURNS = 3
"""Turns of the printed play command: the dataset's first distinct instructions."""
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"


class CreateError(Exception):
    """Input `create` cannot use; the message is one line that names the file and what to do."""


@dataclass(frozen=True)
class CreateOptions:
    videos: Path
    character: str
    reference_image: Path
    out: Path
    annotations: Path | None = None
    annotator: str | None = None
    recipes: tuple[Path, ...] = (DEFAULT_RECIPE,)
    registry: Path | None = None
    """Where `--register` writes the entry; None: not registered."""
    num_proc: int = 1
    allow_unmatched: bool = False
    """Train even when many answers match no shot (`animegamer.data.matching`)."""
    cuts: CutOptions = field(default_factory=CutOptions)
    """The cut detection's settings (`--cut-threshold` and the others)."""

    @property
    def dataset(self) -> Path:
        return self.out / DATASET

    @property
    def run(self) -> Path:
        return self.out / RUN

    @property
    def character_dir(self) -> Path:
        return self.run / CHARACTER


@dataclass
class Prepared:
    """What the checks made: the recipe, the build's options, the annotator and extractor."""

    recipe: Recipe
    data: DataRecipe
    build: BuildOptions
    annotator: Annotator
    extractor: ShotFeatureExtractor | None
    seconds: dict[str, float] = field(default_factory=dict)


def _recipe(options: CreateOptions) -> tuple[Recipe, DataRecipe]:
    recipe = load_recipe(*options.recipes)
    if recipe.data is None:
        names = " + ".join(map(str, options.recipes))
        raise CreateError(f"{names}: the recipe has no 'data' section (clip_size, features); "
                          "add one, or use recipes/cpu.yaml")
    return recipe, recipe.data


def _check_registry(options: CreateOptions) -> None:
    if options.registry is None:
        return
    if not re.fullmatch(_NAME, options.character):
        raise CreateError(f"--character {options.character!r}: a registered name is 1-64 "
                          "letters, digits, _ or -, starting with a letter or digit")
    check_name_free(options.registry, options.character, options.character_dir)


def prepare(options: CreateOptions) -> Prepared:
    """Check every input; nothing is written. Raises `CreateError` (one line) or the data,
    recipe and registry errors, whose messages are one line too."""
    recipe, data = _recipe(options)
    height, width = data.clip_size
    build_options = BuildOptions(
        videos=options.videos, character=options.character,
        reference_image=options.reference_image, out=options.dataset,
        num_proc=options.num_proc, extract=ExtractOptions(height, width, options.cuts),
        allow_unmatched=options.allow_unmatched,
    )
    check_inputs(build_options)
    find_videos(options.videos, options.dataset)
    _check_registry(options)
    annotator: Annotator
    if options.annotations is not None:
        annotator = AnswerFile(options.annotations)
    else:
        annotator = VisionLanguageModel(str(options.annotator))
    return Prepared(recipe, data, build_options, annotator, feature_extractor(data.features))


def build_stage(prepared: Prepared, say: Callable[[str], None]) -> BuildResult:
    started = time.perf_counter()
    result = build(prepared.build, prepared.annotator, prepared.extractor)
    prepared.seconds["data"] = time.perf_counter() - started
    for line in summary(result).splitlines():
        say(f"  {line}")
    rows = result.report["stages"]["rows"]
    if not rows.get("train"):
        report = prepared.build.out / "report.json"
        shots = result.report["stages"]["shots"]
        raise CreateError(f"none of the {shots} shots has a usable answer (see {report}, "
                          "'answers' and 'skips'): fix the answers and rerun the same command")
    return result


def train_stage(options: CreateOptions, prepared: Prepared, say: Callable[[str], None]) -> None:
    from animegamer.train.run import TRAINING_ERRORS, TrainOptions, train

    started = time.perf_counter()
    try:
        train(options.recipes, options.dataset, options.run, "all",
              TrainOptions(resume=True, name=options.character), say=lambda line: say(f"  {line}"))
    except TRAINING_ERRORS as error:
        message = " ".join(str(error).split()) or type(error).__name__
        raise CreateError(f"training stopped: {message}; rerun the same command to continue "
                          f"from the last checkpoint in {options.run / 'checkpoints'}") from error
    prepared.seconds["train"] = time.perf_counter() - started
    for phase, (steps, first, last) in phase_losses(options.run).items():
        say(f"  {phase}: {steps} steps, loss {first:.4f} → {last:.4f}")


def phase_plan(recipe: Recipe) -> str:
    """The training stage's phases and their steps, said before it starts (each phase then
    says how far it is and about how long it has left: `animegamer.cli.progress`)."""
    steps = {
        "vae": recipe.vae.steps if recipe.vae else 0,
        "decoder": recipe.decoder.warmup_steps + recipe.decoder.joint_steps if recipe.decoder
        else 0,
        "game state": recipe.game_state.steps if recipe.game_state else 0,
        "adapt": recipe.adapt.steps if recipe.adapt else 0,
    }
    return ", ".join(f"{phase} {count} steps" for phase, count in steps.items() if count)


def phase_losses(run: Path) -> dict[str, tuple[int, float, float]]:
    """Each trained phase's steps and first and last loss (from OUT/run/logs)."""
    losses = {}
    for phase in PHASES:
        log = run / LOGS / phase / "losses.jsonl"
        records = read_losses(log) if log.is_file() else []
        if records:
            first, last = records[0], records[-1]
            losses[phase] = (int(last["step"]), float(first["loss"]), float(last["loss"]))
    return losses


def register_stage(options: CreateOptions, say: Callable[[str], None]) -> bool:
    """List the character in `options.registry`; False when it was already there."""
    assert options.registry is not None
    rows = [row for split in read_rows(options.dataset).values() for row in split]
    new = entry(options.character, options.character_dir, options.registry, rows)
    added = register(options.registry, new)
    repo = new["weights"]["converted"]["repo"]
    state = "added to" if added else "already in"
    say(f"  {options.character} {state} {options.registry} (converted: {repo}, relative to "
        "the registry file's folder)")
    return added


def play_command(options: CreateOptions, rows: Sequence[dict]) -> str:
    """The command that plays the character's first `PLAY_TURNS` distinct instructions of
    `rows` (its dataset's), one line that runs verbatim in a fresh shell from any folder
    (`shell.python_line`)."""
    texts = [make_instruction({"character": options.character, **fields}).text
             for fields in distinct_instructions(rows)[:PLAY_TURNS]]
    arguments = ["play", "--character", options.character,
                 "--out", str((options.out / "play").resolve()), *texts]
    environment: dict[str, str] = {}
    if options.registry is not None and options.registry.resolve() != DEFAULT_REGISTRY.resolve():
        environment["ANIMEGAMER_CHARACTERS"] = str(options.registry.resolve())
    return python_line("animegamer", arguments, environment)


@dataclass(frozen=True)
class CreateResult:
    """What `create_character` made."""

    character_dir: Path
    """The character folder the engine plays (OUT/run/character)."""
    dataset: Path
    rows: dict[str, int]
    """The dataset's shots per split."""
    losses: dict[str, tuple[int, float, float]]
    """Each trained phase's steps, first and last loss."""
    registry: Path | None
    """The registry file that lists the character, or None (not registered)."""
    play_command: str | None
    """The shell line that plays its first instructions (when registered), from any folder."""
    seconds: dict[str, float]
    """Wall time of the `data` and `train` stages."""


def create_character(options: CreateOptions, say: Callable[[str], None] = print) -> CreateResult:
    """Run every stage, telling `say` what each did. Errors as `prepare`'s, and `CreateError`
    when a stage stops (a rerun with the same options continues)."""
    prepared = prepare(options)
    say(f"[1/3] data: {options.videos} → {options.dataset} "
        f"({prepared.data.clip_size[0]}×{prepared.data.clip_size[1]}, "
        f"{prepared.data.features} towers); each step reports its time left as it goes")
    build_stage(prepared, say)
    say(f"  time: {prepared.seconds['data']:.1f} s")
    say(f"[2/3] training: {' + '.join(map(str, options.recipes))} → {options.run}")
    say(f"  {phase_plan(prepared.recipe)}; each phase reports its time left as it goes")
    train_stage(options, prepared, say)
    say(f"  time: {prepared.seconds['train']:.1f} s; character folder: {options.character_dir}")
    splits = read_rows(options.dataset)
    result = CreateResult(
        character_dir=options.character_dir, dataset=options.dataset,
        rows={split: len(rows) for split, rows in splits.items()},
        losses=phase_losses(options.run), registry=options.registry, play_command=None,
        seconds=dict(prepared.seconds),
    )
    if options.registry is None:
        say("[3/3] registry: not registered (add --register to list it in assets/characters.yaml, "
            "or --register FILE)")
        say(f"done in {sum(prepared.seconds.values()):.0f} s. Register it to play it.")
        return result
    say(f"[3/3] registry: {options.registry}")
    register_stage(options, say)
    command = play_command(options, splits.get("train", []))
    say(f"done in {sum(prepared.seconds.values()):.0f} s. Play it:")
    say(command)
    return dataclasses.replace(result, play_command=command)


INPUT_ERRORS = (CreateError, DataError, RecipeError, RegistryError)
"""The errors `create_character` raises for input it cannot use, each one line."""
