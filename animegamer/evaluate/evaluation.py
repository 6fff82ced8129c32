"""A benchmark played and scored as a function: `evaluate(EvaluationOptions(...))` writes one
report per window (`reporting`) and, for several windows, the window study beside them.

    from animegamer.evaluate.evaluation import EvaluationOptions, evaluate

    result = evaluate(EvaluationOptions("Qiqi", Path("benchmarks/games/qiqi.json"),
                                        Path("runs/qiqi")))
    result.reports[0].summary["clip_t"]

A rerun with the same `out` continues where the last one stopped (OUT/turns.jsonl).
"""

from __future__ import annotations

import dataclasses
import json
import platform
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from animegamer.characters.conversion.character import WORLD_KEY, read_manifest
from animegamer.characters.conversion.errors import ConversionError
from animegamer.characters.registry import RegistryError, load_registry
from animegamer.data.flow import LEVEL_COUNT, MotionLevels
from animegamer.evaluate.backbones import DEFAULT_CLIP, FeatureCache, load_clip, load_dreamsim
from animegamer.evaluate.benchmark import (
    Benchmark,
    BenchmarkRunner,
    RunOptions,
    levels_from_values,
    load_benchmark,
    reference_image,
)
from animegamer.evaluate.metrics import TurnScorer
from animegamer.evaluate.reporting import compare, write_report
from animegamer.nano import NANO_WORLD
from animegamer.nano.probes import NanoProbes
from animegamer.serving.casting import create_registry_engine
from animegamer.serving.clips import ClipStore
from animegamer.serving.devices import choose_placement
from animegamer.serving.engine import TurnEngine
from animegamer.serving.loading import load_character_models
from animegamer.serving.settings import EngineKind, Settings
from animegamer.serving.stand_ins import create_preview_engine

JUDGE_PROMPT = Path(__file__).resolve().parent / "prompts" / "judge.txt"


@dataclass(frozen=True)
class EvaluationOptions:
    character: str
    benchmark: Path
    """A benchmark JSON file or a dataset folder (its test split, teacher-forced)."""
    out: Path
    """The report folder (resumable)."""
    turns: int = 10
    limit: int | None = None
    """Play only the first N games."""
    engine: EngineKind = EngineKind.REAL
    models: Path | None = None
    """A character folder in the project layout (e.g. a trained Nano) instead of the registry."""
    windows: tuple[int, ...] = (1,)
    """Turns the game-state model sees; several make a window study (OUT/window-N/ each)."""
    steps: int | None = None
    seed: int = 0
    clip: str = DEFAULT_CLIP
    reference: Path | None = None
    levels: Path | None = None
    """Motion levels JSON (`MotionLevels.to_dict`); default the dataset's or the decoder's."""
    judge: str | None = None
    probes: str = "auto"
    """`auto` (the Nano probes when `models` is a Nano character), `nano` or `none`."""
    progress: bool = True


@dataclass(frozen=True)
class WindowReport:
    window: int
    folder: Path
    turns: int
    seconds: float
    summary: Mapping[str, Any]
    """`metrics.json`'s summary: each metric's mean (and max where it has one)."""


@dataclass
class EvaluationResult:
    reports: list[WindowReport] = field(default_factory=list)
    study: list[Path] = field(default_factory=list)
    """windows.md and windows.html when several windows were played."""


def make_engine(options: EvaluationOptions, settings: Settings) -> TurnEngine:
    if options.engine == EngineKind.PREVIEW:
        return create_preview_engine(settings)
    if options.models is not None:
        placement = choose_placement(settings.low_vram, settings.zero_gpu)
        folder = options.models
        engine = TurnEngine(
            lambda character, placement: load_character_models(folder, placement),
            kind=EngineKind.REAL, placement=placement, num_inference_steps=settings.steps,
            guidance_scale=settings.guidance_scale, clips=ClipStore(settings.output_dir),
        )
        engine.load(options.character)
        return engine
    registry = load_registry(settings.registry_path)
    name = registry.get(options.character).name
    return create_registry_engine(settings, registry, [name]).engine_for(name)


def reference_for(options: EvaluationOptions, settings: Settings,
                  found: Path | None) -> Path | None:
    if options.reference is not None or found is not None:
        return options.reference or found
    try:
        character = load_registry(settings.registry_path).get(options.character)
    except RegistryError:
        return None
    if character.avatar is None:
        return None
    return settings.registry_path.parent / character.avatar


def levels_for(options: EvaluationOptions, found: MotionLevels | None,
               engine: TurnEngine) -> tuple[MotionLevels, str]:
    if options.levels is not None:
        levels = MotionLevels.from_dict(json.loads(options.levels.read_text()))
        return levels, str(options.levels)
    if found is not None:
        return found, "the dataset's levels.json"
    decoder = engine.models_for(options.character).decoder
    values = [decoder.motion_scope(level) for level in range(1, LEVEL_COUNT + 1)]
    return levels_from_values(values), "the decoder's motion-scope table (geometric midpoints)"


def probes_for(options: EvaluationOptions) -> tuple[NanoProbes | None, str]:
    """The world probes to run (None: not run) and the report's note on them."""
    if options.probes == "nano":
        return NanoProbes(), "nano (--probes nano)"
    if options.probes == "none" or options.models is None:
        return None, ""
    try:
        world = read_manifest(options.models).get(WORLD_KEY)
    except ConversionError:
        return None, ""
    if world != NANO_WORLD:
        return None, ""
    return NanoProbes(), f"nano ({options.models} is a character of the Nano world)"


def settings_for(options: EvaluationOptions) -> Settings:
    settings = dataclasses.replace(
        Settings.from_env(), engine=options.engine, window=max(options.windows),
        output_dir=options.out / "clips",
    )
    if options.steps:
        settings = dataclasses.replace(settings, steps=options.steps, preview_steps=options.steps)
    settings.validate()
    return settings


@dataclass(frozen=True)
class Scoring:
    """What every window shares: the engine, the scorer, the judge, the probes, the meta."""

    engine: TurnEngine
    scorer: TurnScorer
    judge: Any
    probes: NanoProbes | None
    meta: dict[str, Any]


def prepare(options: EvaluationOptions, settings: Settings, benchmark: Benchmark) -> Scoring:
    engine = make_engine(options, settings)
    engine.models_for(options.character).decoder.set_progress_bar_config(disable=True)
    levels, levels_source = levels_for(options, benchmark.levels, engine)
    reference = reference_for(options, settings, benchmark.reference)
    dreamsim, dreamsim_note = load_dreamsim(settings.cache_dir / "dreamsim")
    judge, judge_note = None, "not run (--judge MODEL)"
    if options.judge:
        from animegamer.evaluate.backbones import load_judge

        judge, judge_note = load_judge(options.judge), options.judge
    probes, probes_note = probes_for(options)
    cache = FeatureCache(options.out / "cache" / "features")
    scorer = TurnScorer(load_clip(options.clip), cache, levels, reference_image(reference),
                        dreamsim)
    meta = {
        "character": options.character, "benchmark": str(options.benchmark),
        "teacher_forced": any(game.teacher_forced for game in benchmark.games),
        "engine": engine.kind, "steps": options.steps or engine.num_inference_steps,
        "seed": options.seed, "clip": options.clip, "dreamsim": dreamsim_note,
        "judge": judge_note, "levels": levels_source,
        "reference": str(reference) if reference else "none",
        "device": torch.cuda.get_device_name() if torch.cuda.is_available()
        else platform.processor() or "cpu",
        **({"probes": probes_note} if probes is not None else {}),
    }
    return Scoring(engine, scorer, judge, probes, meta)


def play_window(options: EvaluationOptions, benchmark: Benchmark, scoring: Scoring,
                window: int) -> WindowReport:
    out = options.out if len(options.windows) == 1 else options.out / f"window-{window}"
    started = time.perf_counter()
    runner = BenchmarkRunner(
        scoring.engine, options.character, scoring.scorer,
        RunOptions(out, window=window, seed=options.seed, steps=options.steps,
                   progress=options.progress),
        scoring.judge, JUDGE_PROMPT.read_text(encoding="utf-8"), scoring.probes,
    )
    records = runner.run(benchmark)
    wall = round(time.perf_counter() - started, 1)
    metrics = write_report(out, records, {**scoring.meta, "window": window,
                                          "wall_seconds_this_run": wall})
    return WindowReport(window, out, len(records), wall, metrics["summary"])


def evaluate(options: EvaluationOptions, say: Callable[[str], None] = print) -> EvaluationResult:
    """Play and score the benchmark once per window, telling `say` each report's numbers.
    Raises `BenchmarkError`, `RegistryError`, `SettingsError`, `HubError`, `EngineError` or
    `OSError` with a one-line message."""
    options = dataclasses.replace(options, windows=tuple(dict.fromkeys(options.windows)))
    settings = settings_for(options)
    benchmark = load_benchmark(options.benchmark, options.character, options.turns,
                               options.limit)
    scoring = prepare(options, settings, benchmark)
    result = EvaluationResult()
    for window in options.windows:
        report = play_window(options, benchmark, scoring, window)
        say(f"window {window}: {report.turns} turns in {report.seconds} s; report: "
            f"{report.folder / 'report.md'}")
        for key, entry in report.summary.items():
            say(f"  {key}: {entry.get('max', entry['mean'])}")
        result.reports.append(report)
    if len(result.reports) > 1:
        folders = [report.folder for report in result.reports]
        labels = [f"window {w}" for w in options.windows]
        result.study = list(compare(folders, options.out, labels, name="windows"))
        say("window study: " + ", ".join(map(str, result.study)))
    return result
