"""Command line: `python -m animegamer.data {build,show} ...`.

    build  --videos DIR --character NAME --reference-image IMG --out DATASET
           (--annotations FILE | --annotator MODEL) [--features none|real|tiny] [--limit N]
           [--num-proc N] [--size H W]
    show   DATASET [--png FILE] [--split train|test] [--count N]

`build` also writes DATASET/answers_template.jsonl: one line per kept shot with empty answer
fields, to fill in and pass back as --annotations.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from animegamer.data.annotate import Annotator, AnswerFile, VisionLanguageModel
from animegamer.data.build import BuildOptions, BuildResult, build, check_inputs
from animegamer.data.episodes import EPISODE_GAP_S, TEST_FRACTION
from animegamer.data.errors import DataError
from animegamer.data.extract import MIN_MOVING, ExtractOptions
from animegamer.data.features import FEATURE_KINDS, feature_extractor
from animegamer.data.flow import FLOW_METHODS
from animegamer.data.shots import ADAPTIVE_THRESHOLD, CUT_THRESHOLD
from animegamer.data.show import show

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m animegamer.data", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("build", help="videos → an annotated dataset (resumable)")
    make.add_argument("--videos", type=Path, required=True, help="folder of videos (searched "
                      "recursively)")
    make.add_argument("--character", required=True, help="the character's name")
    make.add_argument("--reference-image", type=Path, required=True, help="a picture of them")
    make.add_argument("--out", type=Path, required=True, help="the dataset folder")
    source = make.add_mutually_exclusive_group(required=True)
    source.add_argument("--annotations", type=Path, help="JSONL answers keyed by video and start")
    source.add_argument("--annotator", help="vision-language model id or folder (transformers)")
    make.add_argument("--features", choices=FEATURE_KINDS, default="none",
                      help="cache shot features: none; real (the registry's CLIP ViT-B-16 and T5 "
                      "towers, downloaded once); tiny (random towers: tests)")
    make.add_argument("--limit", type=int, help="stop after this many shots")
    make.add_argument("--num-proc", type=int, default=1, help="processes for the clip stage")
    make.add_argument("--batch-size", type=int, default=8, help="shots per annotator batch")
    make.add_argument("--size", type=int, nargs=2, metavar=("H", "W"), default=(480, 720),
                      help="clip height and width (default 480 720)")
    make.add_argument("--cut-threshold", type=float, default=CUT_THRESHOLD,
                      help="PySceneDetect's content threshold (colour and edge change)")
    make.add_argument("--adaptive-threshold", type=float, default=ADAPTIVE_THRESHOLD,
                      help="PySceneDetect's adaptive threshold (a content spike this many times "
                      "its neighbours': cuts between shots on the same background)")
    make.add_argument("--min-moving", type=float, default=MIN_MOVING,
                      help="fraction of moving pixels below which a clip is static")
    make.add_argument("--flow", choices=FLOW_METHODS, default="farneback",
                      help="optical flow for the motion scope")
    make.add_argument("--test-fraction", type=float, default=TEST_FRACTION,
                      help="share of the videos whose shots form the test split")
    make.add_argument("--episode-gap", type=float, default=EPISODE_GAP_S,
                      help="seconds between shots that still continue an episode")
    make.add_argument("--allow-unmatched", action="store_true",
                      help="build on when more than a tenth of the answers match no shot, or "
                      "their starts look like another unit (the summary gives the count)")
    look = commands.add_parser("show", help="contact sheet and statistics of a dataset")
    look.add_argument("dataset", type=Path)
    look.add_argument("--png", type=Path, help="where to write the sheet "
                      "(default DATASET/contact_sheet.png)")
    look.add_argument("--split", default="train")
    look.add_argument("--count", type=int, default=24, help="shots on the sheet")
    return parser


def _check(args: argparse.Namespace) -> None:
    height, width = args.size
    if min(height, width) < 16 or max(height, width) > 2048:
        raise DataError(f"--size {height} {width}: each side must be in 16..2048")
    if args.limit is not None and args.limit < 1:
        raise DataError("--limit must be at least 1")
    if args.num_proc < 1 or args.batch_size < 1:
        raise DataError("--num-proc and --batch-size must be at least 1")
    if not 0 <= args.test_fraction < 1:
        raise DataError("--test-fraction must be in [0, 1)")
    if not 0 < args.min_moving < 1:
        raise DataError("--min-moving must be in (0, 1)")


SHOWN = 5
"""Unmatched answers and unanswered shots the summary names (all are in the report)."""


def _listed(items: Sequence[dict], describe: Callable[[dict], str]) -> str:
    shown = "; ".join(describe(item) for item in items[:SHOWN])
    return shown + (f"; and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def answer_lines(answers: dict) -> list[str]:
    """What the summary says about the answers: unmatched ones and shots without one."""
    lines = [f"answers: {answers['matched']} shots answered, {len(answers['unmatched'])} "
             f"answers matched no shot, {len(answers['shots_without_answer'])} shots without one"]
    if answers["unmatched"]:
        lines.append("  matched no shot: " + _listed(answers["unmatched"], lambda a: (
            f"line {a['line']} ({a['video']} at {a['start']} s): {a['reason']}")))
    if answers.get("unit"):
        unit = answers["unit"]
        lines.append(f"  their starts look like {unit['unit']} ({unit['fits']} match a shot "
                     f"read so): write seconds ({unit['example']})")
    if answers["shots_without_answer"]:
        lines.append("  no answer: " + _listed(answers["shots_without_answer"], lambda s: (
            f"{s['video']} {s['start']:.3f}-{s['end']:.3f} s")))
    return lines


def summary(result: BuildResult) -> str:
    """The build in a few lines (the report has everything)."""
    report, stages = result.report, result.report["stages"]
    videos = report["videos"]
    skipped = ", ".join(f"{kind} {n}" for kind, n in report["skipped"].items()) or "none"
    rows = ", ".join(f"{split} {n}" for split, n in stages["rows"].items()) or "none"
    if report.get("split"):
        rows += f" (test split: {report['split']['how']})"
    damaged = {**videos["failed"], **videos["partial"]}
    return "\n".join([
        f"videos: {videos['found']} found, {videos['done']} done, "
        f"{len(videos['failed'])} failed, {len(videos['partial'])} partial, "
        f"{videos['not_reached']} not reached",
        *(f"  {reason}" for reason in damaged.values()),
        f"shots: {len(_cuts(videos))} cuts, {stages['segments']} segments "
        f"({stages['segments_too_short']} under 2 s), {stages['clips']} clips, "
        f"{stages['shots']} kept, {stages['annotated']} annotated",
        *answer_lines(report["answers"]),
        f"skipped: {skipped}",
        f"shots per split: {rows}",
        "levels: " + (", ".join(f"{level}: {n}" for level, n in report["level_histogram"].items())
                      if report["levels"] else "none (no annotated shot)"),
        "seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in result.seconds.items()),
    ])


def _cuts(videos: dict) -> list[dict]:
    return [cut for cuts in videos["cuts"].values() for cut in cuts]


def run_build(args: argparse.Namespace) -> int:
    _check(args)
    height, width = args.size
    options = BuildOptions(
        videos=args.videos, character=args.character, reference_image=args.reference_image,
        out=args.out, limit=args.limit, num_proc=args.num_proc, batch_size=args.batch_size,
        test_fraction=args.test_fraction, episode_gap=args.episode_gap,
        allow_unmatched=args.allow_unmatched,
        extract=ExtractOptions(height, width, args.cut_threshold, args.min_moving, args.flow,
                               args.adaptive_threshold),
    )
    check_inputs(options)  # before a model is loaded for nothing
    annotator: Annotator = (
        AnswerFile(args.annotations) if args.annotations else VisionLanguageModel(args.annotator)
    )
    extractor = feature_extractor(args.features)
    result = build(options, annotator, extractor)
    print(summary(result))
    print(f"dataset: {args.out} (report: {args.out / 'report.json'})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "build":
            return run_build(args)
        png, text = show(args.dataset, args.png, args.split, args.count)
        print(text)
        print(f"contact sheet: {png}")
        return 0
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted: rerun the same command to continue where it stopped", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
