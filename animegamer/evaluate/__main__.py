r"""`python -m animegamer.evaluate`: play a benchmark and write the paper's table as a report.

    python -m animegamer.evaluate --character Qiqi --benchmark benchmarks/games/qiqi.json \
        --out runs/qiqi [--turns 10] [--limit N] [--engine real|preview] [--window 3]
    python -m animegamer.evaluate --character Qiqi --benchmark DATASET --models CHARACTER_DIR \
        --out runs/nano-w1
    python -m animegamer.evaluate --character Qiqi --benchmark DATASET --models CHARACTER_DIR \
        --window 1 2 3 5 --out runs/nano-windows        (a window study)
    python -m animegamer.evaluate --compare runs/nano-w1 runs/nano-w3 --out runs/w1-vs-w3

A rerun with the same --out continues where the last one stopped (OUT/turns.jsonl).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from animegamer.characters.conversion.character import WORLD_KEY, read_manifest
from animegamer.characters.conversion.errors import ConversionError
from animegamer.characters.hub import HubError
from animegamer.characters.registry import RegistryError, load_registry
from animegamer.cli.exit_codes import EXIT_ERROR, EXIT_OK
from animegamer.cli.output import add_verbose_flag, configure_output, hide_progress_bars
from animegamer.data.flow import LEVEL_COUNT, MotionLevels
from animegamer.evaluate.backbones import DEFAULT_CLIP, FeatureCache, load_clip, load_dreamsim
from animegamer.evaluate.benchmark import (
    BenchmarkError,
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
from animegamer.serving.engine import EngineError, TurnEngine
from animegamer.serving.loading import load_character_models
from animegamer.serving.settings import EngineKind, Settings, SettingsError
from animegamer.serving.stand_ins import create_preview_engine

JUDGE_PROMPT = Path(__file__).resolve().parent / "prompts" / "judge.txt"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m animegamer.evaluate", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--character", help="the character the models play")
    parser.add_argument("--benchmark", type=Path, help="a benchmark JSON file or a dataset folder")
    parser.add_argument("--out", type=Path, required=True, help="report folder (resumable)")
    parser.add_argument("--turns", type=int, default=10, help="turns per game (default 10)")
    parser.add_argument("--limit", type=int, help="play only the first N games")
    parser.add_argument("--engine", choices=(EngineKind.REAL, EngineKind.PREVIEW),
                        default=EngineKind.REAL, type=EngineKind,
                        help="real models (registry or --models) or the tiny preview models")
    parser.add_argument("--models", type=Path,
                        help="a character folder in the project layout (e.g. a trained Nano)")
    parser.add_argument("--window", type=int, nargs="+", default=[1],
                        help="turns the game-state model sees; several (e.g. 1 2 3 5) make a "
                        "window study: OUT/window-N/ each and OUT/windows.{md,html}")
    parser.add_argument("--steps", type=int, help="diffusion steps (default: the engine's)")
    parser.add_argument("--seed", type=int, default=0, help="base seed of the decoder's noise")
    parser.add_argument("--clip", default=DEFAULT_CLIP,
                        help=f"CLIP checkpoint (default {DEFAULT_CLIP}; 'tiny': random, offline)")
    parser.add_argument("--reference", type=Path, help="the character's reference image")
    parser.add_argument("--levels", type=Path, help="motion levels JSON (MotionLevels.to_dict)")
    parser.add_argument("--judge", help="a vision-language model to score the six criteria")
    parser.add_argument("--probes", choices=("auto", "nano", "none"), default="auto",
                        help="the Nano world's probes (time, place, character, motion read from "
                        "each clip): auto runs them when --models is a character folder of the "
                        "Nano world (its manifest's world is nano)")
    parser.add_argument("--compare", type=Path, nargs=2, metavar="DIR",
                        help="write OUT/compare.{md,html} from two report folders and stop")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_verbose_flag(parser)
    return parser


def _engine(args: argparse.Namespace, settings: Settings) -> TurnEngine:
    if args.engine == EngineKind.PREVIEW:
        return create_preview_engine(settings)
    if args.models is not None:
        placement = choose_placement(settings.low_vram, settings.zero_gpu)
        folder: Path = args.models
        engine = TurnEngine(
            lambda character, placement: load_character_models(folder, placement),
            kind=EngineKind.REAL, placement=placement, num_inference_steps=settings.steps,
            guidance_scale=settings.guidance_scale, clips=ClipStore(settings.output_dir),
        )
        engine.load(args.character)
        return engine
    registry = load_registry(settings.registry_path)
    name = registry.get(args.character).name
    return create_registry_engine(settings, registry, [name]).engine_for(name)


def _reference(args: argparse.Namespace, settings: Settings, found: Path | None) -> Path | None:
    if args.reference is not None or found is not None:
        return args.reference or found
    try:
        character = load_registry(settings.registry_path).get(args.character)
    except RegistryError:
        return None
    if character.avatar is None:
        return None
    return settings.registry_path.parent / character.avatar


def _levels(args: argparse.Namespace, found: MotionLevels | None,
            engine: TurnEngine) -> tuple[MotionLevels, str]:
    if args.levels is not None:
        return MotionLevels.from_dict(json.loads(args.levels.read_text())), str(args.levels)
    if found is not None:
        return found, "the dataset's levels.json"
    decoder = engine.models_for(args.character).decoder
    values = [decoder.motion_scope(level) for level in range(1, LEVEL_COUNT + 1)]
    return levels_from_values(values), "the decoder's motion-scope table (geometric midpoints)"


def _probes(args: argparse.Namespace) -> tuple[NanoProbes | None, str]:
    """The world probes to run (None: not run) and the report's note on them."""
    if args.probes == "nano":
        return NanoProbes(), "nano (--probes nano)"
    if args.probes == "none" or args.models is None:
        return None, ""
    try:
        world = read_manifest(args.models).get(WORLD_KEY)
    except ConversionError:
        return None, ""
    if world != NANO_WORLD:
        return None, ""
    return NanoProbes(), f"nano ({args.models} is a character of the Nano world)"


def evaluate(args: argparse.Namespace) -> int:
    if args.character is None or args.benchmark is None:
        raise BenchmarkError("--character and --benchmark are needed (or --compare A B)")
    windows: list[int] = list(dict.fromkeys(args.window))
    settings = dataclasses.replace(
        Settings.from_env(), engine=args.engine, window=max(windows),
        output_dir=args.out / "clips",
        **({"steps": args.steps, "preview_steps": args.steps} if args.steps else {}),
    )
    settings.validate()
    benchmark = load_benchmark(args.benchmark, args.character, args.turns, args.limit)
    engine = _engine(args, settings)
    engine.models_for(args.character).decoder.set_progress_bar_config(disable=True)
    levels, levels_source = _levels(args, benchmark.levels, engine)
    reference = _reference(args, settings, benchmark.reference)
    dreamsim, dreamsim_note = load_dreamsim(settings.cache_dir / "dreamsim")
    judge, judge_note = None, "not run (--judge MODEL)"
    if args.judge:
        from animegamer.evaluate.backbones import load_judge

        judge, judge_note = load_judge(args.judge), args.judge
    probes, probes_note = _probes(args)
    cache = FeatureCache(args.out / "cache" / "features")
    scorer = TurnScorer(load_clip(args.clip), cache, levels, reference_image(reference), dreamsim)
    meta = {
        "character": args.character, "benchmark": str(args.benchmark),
        "teacher_forced": any(game.teacher_forced for game in benchmark.games),
        "engine": engine.kind, "steps": args.steps or engine.num_inference_steps,
        "seed": args.seed, "clip": args.clip, "dreamsim": dreamsim_note, "judge": judge_note,
        "levels": levels_source, "reference": str(reference) if reference else "none",
        "device": torch.cuda.get_device_name() if torch.cuda.is_available()
        else platform.processor() or "cpu",
        **({"probes": probes_note} if probes is not None else {}),
    }
    folders = []
    for window in windows:
        out = args.out if len(windows) == 1 else args.out / f"window-{window}"
        started = time.perf_counter()
        runner = BenchmarkRunner(
            engine, args.character, scorer,
            RunOptions(out, window=window, seed=args.seed, steps=args.steps,
                       progress=not args.no_progress),
            judge, JUDGE_PROMPT.read_text(encoding="utf-8"), probes,
        )
        records = runner.run(benchmark)
        wall = round(time.perf_counter() - started, 1)
        metrics = write_report(out, records, {**meta, "window": window,
                                              "wall_seconds_this_run": wall})
        print(f"window {window}: {len(records)} turns in {wall} s; report: {out / 'report.md'}")
        for key, entry in metrics["summary"].items():
            print(f"  {key}: {entry.get('max', entry['mean'])}")
        folders.append(out)
    if len(folders) > 1:
        paths = compare(folders, args.out, [f"window {w}" for w in windows], name="windows")
        print("window study: " + ", ".join(map(str, paths)))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_output(args.verbose)
    if not args.verbose:
        hide_progress_bars()
    try:
        if args.compare:
            for path in compare(args.compare, args.out):
                print(path)
            return EXIT_OK
        return evaluate(args)
    except (BenchmarkError, RegistryError, SettingsError, HubError, EngineError,
            OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
