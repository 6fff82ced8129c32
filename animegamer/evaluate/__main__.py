r"""`python -m animegamer.evaluate`: play a benchmark and write the paper's table as a report.

    python -m animegamer.evaluate --character Qiqi --benchmark benchmarks/games/qiqi.json \
        --out runs/qiqi [--turns 10] [--limit N] [--engine real|preview] [--window 3]
    python -m animegamer.evaluate --character Qiqi --benchmark DATASET --models CHARACTER_DIR \
        --out runs/nano-w1
    python -m animegamer.evaluate --character Qiqi --benchmark DATASET --models CHARACTER_DIR \
        --window 1 2 3 5 --out runs/nano-windows        (a window study)
    python -m animegamer.evaluate --compare runs/nano-w1 runs/nano-w3 --out runs/w1-vs-w3

A rerun with the same --out continues where the last one stopped (OUT/turns.jsonl). The
function behind it: `animegamer.evaluate.evaluation.evaluate`.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from animegamer.cli.exit_codes import EXIT_ERROR, EXIT_OK
from animegamer.cli.output import add_verbose_flag, configure_output, hide_progress_bars
from animegamer.serving.settings import EngineKind

if TYPE_CHECKING:
    from animegamer.evaluate.evaluation import EvaluationOptions

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
    parser.add_argument("--clip", help="CLIP checkpoint (default: OpenAI's CLIP ViT-B/32, "
                        "`backbones.DEFAULT_CLIP`; 'tiny': random, offline)")
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


def options_from(args: argparse.Namespace) -> EvaluationOptions:
    from animegamer.evaluate.benchmark import BenchmarkError
    from animegamer.evaluate.evaluation import EvaluationOptions

    if args.character is None or args.benchmark is None:
        raise BenchmarkError("--character and --benchmark are needed (or --compare A B)")
    options = EvaluationOptions(
        character=args.character, benchmark=args.benchmark, out=args.out, turns=args.turns,
        limit=args.limit, engine=args.engine, models=args.models, windows=tuple(args.window),
        steps=args.steps, seed=args.seed, reference=args.reference, levels=args.levels,
        judge=args.judge, probes=args.probes, progress=not args.no_progress,
    )
    return options if args.clip is None else dataclasses.replace(options, clip=args.clip)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_output(args.verbose)
    if not args.verbose:
        hide_progress_bars()
    from animegamer.characters.hub import HubError
    from animegamer.characters.registry import RegistryError
    from animegamer.evaluate.benchmark import BenchmarkError
    from animegamer.evaluate.evaluation import evaluate
    from animegamer.evaluate.reporting import compare
    from animegamer.serving.engine import EngineError
    from animegamer.serving.settings import SettingsError

    try:
        if args.compare:
            for path in compare(args.compare, args.out):
                print(path)
            return EXIT_OK
        evaluate(options_from(args))
    except (BenchmarkError, RegistryError, SettingsError, HubError, EngineError,
            OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
