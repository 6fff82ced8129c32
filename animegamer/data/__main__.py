"""Command line: `python -m animegamer.data {build,show} ...`.

    build  --videos DIR --character NAME --reference-image IMG --out DATASET
           (--annotations FILE | --annotator MODEL) [--features none|real|tiny] [--limit N]
           [--num-proc N] [--size H W] [--cut-threshold X] [--adaptive-threshold X]
           [--discontinuity-threshold X] [--allow-unmatched]
    show   DATASET [--png FILE] [--split train|test] [--count N]

`build` also writes DATASET/answers_template.jsonl: one line per kept shot with empty answer
fields, to fill in and pass back as --annotations.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from animegamer.cli.exit_codes import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK
from animegamer.cli.output import add_verbose_flag, configure_output, hide_progress_bars
from animegamer.data.build import BuildOptions
from animegamer.data.cut_flags import add_cut_arguments, cut_options
from animegamer.data.episodes import EPISODE_GAP_S, TEST_FRACTION
from animegamer.data.errors import DataError
from animegamer.data.extract import MIN_MOVING, ExtractOptions
from animegamer.data.features import FEATURE_KINDS
from animegamer.data.flow import FLOW_METHODS
from animegamer.data.from_videos import build_dataset, summary
from animegamer.data.show import show


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
    add_cut_arguments(make)
    make.add_argument("--min-moving", type=float, default=MIN_MOVING,
                      help="fraction of moving pixels below which a clip is static")
    make.add_argument("--flow", choices=FLOW_METHODS, default="farneback",
                      help="optical flow for the motion scope")
    make.add_argument("--test-fraction", type=float, default=TEST_FRACTION,
                      help="share of the shots held out for the test split (whole videos "
                      "from 10 videos on, else episodes inside the videos)")
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
    for command in (make, look):
        add_verbose_flag(command)
    return parser


def run_build(args: argparse.Namespace) -> int:
    height, width = args.size
    options = BuildOptions(
        videos=args.videos, character=args.character, reference_image=args.reference_image,
        out=args.out, limit=args.limit, num_proc=args.num_proc, batch_size=args.batch_size,
        test_fraction=args.test_fraction, episode_gap=args.episode_gap,
        allow_unmatched=args.allow_unmatched,
        extract=ExtractOptions(height, width, cut_options(args), args.min_moving, args.flow),
    )
    result = build_dataset(options, args.annotations, args.annotator, args.features)
    print(summary(result))
    print(f"dataset: {args.out} (report: {args.out / 'report.json'})")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_output(args.verbose)
    if not args.verbose:
        hide_progress_bars(datasets=True)
    try:
        if args.command == "build":
            return run_build(args)
        png, text = show(args.dataset, args.png, args.split, args.count)
        print(text)
        print(f"contact sheet: {png}")
        return EXIT_OK
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted: rerun the same command to continue where it stopped", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
