"""Command line: one command from a folder of videos to a playable, registered character.

    python -m animegamer.create --videos DIR --character NAME --reference-image IMG
        (--annotations FILE | --annotator MODEL) --out DIR [--recipe RECIPE ...]
        [--register [REGISTRY]] [--num-proc N] [--allow-unmatched]
        [--cut-threshold X] [--adaptive-threshold X] [--discontinuity-threshold X]
    python -m animegamer.create example --out DIR

The recipe (default recipes/cpu.yaml) decides the clip size and the feature towers as well as
the training. Outputs: OUT/dataset (the dataset, its report.json and answers_template.jsonl),
OUT/run (checkpoints, logs, and OUT/run/character, the character folder). Rerun the same
command after a stop to continue. `example` writes a small video set (Nano world shots, with
their answers and reference image) to try it on.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from animegamer.cli.exit_codes import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK
from animegamer.cli.output import add_verbose_flag, configure_output, hide_progress_bars
from animegamer.data.cut_flags import add_cut_arguments, cut_options
from animegamer.paths import DEFAULT_REGISTRY


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m animegamer.create", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--videos", type=Path, required=True, help="folder of videos (searched "
                        "recursively)")
    parser.add_argument("--character", required=True, help="the character's name")
    parser.add_argument("--reference-image", type=Path, required=True, help="a picture of them")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--annotations", type=Path, help="JSONL answers keyed by video and start")
    source.add_argument("--annotator", help="vision-language model id or folder (transformers)")
    parser.add_argument("--out", type=Path, required=True, help="the output folder")
    parser.add_argument("--recipe", type=Path, action="append", default=None,
                        help="the recipe: clip size, feature towers and training (default "
                        "recipes/cpu.yaml); repeat it to combine files of one phase each")
    parser.add_argument("--register", type=Path, nargs="?", const=DEFAULT_REGISTRY, default=None,
                        metavar="REGISTRY", help="add the character to this registry file "
                        "(default: the one the app reads, assets/characters.yaml)")
    parser.add_argument("--num-proc", type=int, default=1, help="processes for the clip stage")
    add_verbose_flag(parser)
    add_cut_arguments(parser)
    parser.add_argument("--allow-unmatched", action="store_true",
                        help="train even when more than a tenth of the answers match no shot, "
                        "or their starts look like another unit (the summary gives the count)")
    return parser


def example_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m animegamer.create example",
                                     description="Write a small video set to make a character "
                                     "from: videos/, reference.png, answers.jsonl.")
    parser.add_argument("--out", type=Path, required=True, help="the folder to write")
    return parser


def run_example(argv: Sequence[str]) -> int:
    from animegamer.create.example import EXAMPLE_CHARACTER, write_example
    from animegamer.create.shell import python_line

    args = example_parser().parse_args(argv)
    paths = write_example(args.out)
    print(f"wrote {paths['videos']} (videos), {paths['reference']}, {paths['answers']}")
    arguments = ["--videos", str(paths["videos"].resolve()), "--character", EXAMPLE_CHARACTER,
                 "--reference-image", str(paths["reference"].resolve()),
                 "--annotations", str(paths["answers"].resolve()),
                 "--out", str(Path("runs", EXAMPLE_CHARACTER.lower()).resolve())]
    print("make a character of them: " + python_line("animegamer.create", arguments))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["example"]:
        return run_example(argv[1:])
    args = build_parser().parse_args(argv)
    configure_output(args.verbose)
    if not args.verbose:
        hide_progress_bars(datasets=True)
    from animegamer.create.pipeline import (
        DEFAULT_RECIPE,
        INPUT_ERRORS,
        CreateOptions,
        create_character,
    )

    options = CreateOptions(
        videos=args.videos, character=args.character, reference_image=args.reference_image,
        out=args.out, annotations=args.annotations, annotator=args.annotator,
        recipes=tuple(args.recipe or (DEFAULT_RECIPE,)), registry=args.register,
        num_proc=max(1, args.num_proc), allow_unmatched=args.allow_unmatched,
        cuts=cut_options(args),
    )
    try:
        create_character(options)
    except INPUT_ERRORS as error:
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("interrupted: rerun the same command to continue where it stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
