"""Command line: `python -m animegamer.convert {mllm,decoder,character} ...`.

    mllm       --release MLLM-X/pytorch_model.bin --base-llm MISTRAL_DIR --out CHAR_DIR
    decoder    --release VDM_Decoder-X --out CHAR_DIR
    character  --name Qiqi [--out DIR] [--push-to-hub REPO [--private]]

`character` downloads the named registry character's release, converts it into DIR (default:
the start-up cache, exactly as the Space would) and optionally publishes DIR as a converted repo
with a generated model card. Errors print one line on stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from animegamer.characters.registry import DEFAULT_LATENT_SIZE
from animegamer.cli.exit_codes import EXIT_ERROR, EXIT_OK
from animegamer.cli.output import add_verbose_flag, configure_output, hide_progress_bars


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m animegamer.convert",
        description="Convert AnimeGamer release checkpoints into the project layout.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    mllm = commands.add_parser(
        "mllm", help="release MLLM -> llm/, resamplers, tokenizer/, game_state_config.json"
    )
    mllm.add_argument("--release", type=Path, required=True, help="the release pytorch_model.bin")
    mllm.add_argument("--base-llm", type=Path, required=True, help="Mistral-7B-Instruct folder")
    mllm.add_argument("--out", type=Path, required=True, help="character folder to write into")

    decoder = commands.add_parser(
        "decoder", help="release VDM decoder -> transformer/, scheduler/, model_index.json"
    )
    decoder.add_argument("--release", type=Path, required=True, help="a VDM_Decoder-<name> folder")
    decoder.add_argument("--out", type=Path, required=True, help="character folder to write into")
    decoder.add_argument(
        "--latent-size", type=int, nargs=2, default=list(DEFAULT_LATENT_SIZE),
        metavar=("HEIGHT", "WIDTH"), help="latent height and width (default: 60 90, 480x720 video)",
    )

    character = commands.add_parser(
        "character", help="download, convert and optionally publish a registry character"
    )
    character.add_argument("--name", required=True, help="character name in the registry")
    character.add_argument(
        "--out", type=Path, help="new output folder (default: the start-up cache)"
    )
    character.add_argument(
        "--registry", type=Path, help="registry YAML (default: $ANIMEGAMER_CHARACTERS, else the "
        "shipped one)"
    )
    character.add_argument("--cache-dir", type=Path, help="start-up cache (default: as the Space)")
    character.add_argument("--push-to-hub", metavar="REPO", help="publish the converted folder")
    character.add_argument("--private", action="store_true", help="create REPO as private")
    character.add_argument(
        "--skip-resource-check", action="store_true", help="do not check free disk and RAM first"
    )
    for command in (mllm, decoder, character):
        add_verbose_flag(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_output(args.verbose, own_level=logging.INFO)  # the conversion's own progress
    if not args.verbose:
        hide_progress_bars()
    try:
        _run(args)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return EXIT_ERROR
    except Exception as error:
        print(f"error: {_one_line(error)}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def _run(args: argparse.Namespace) -> None:
    if args.command == "mllm":
        from animegamer.characters.conversion import mllm

        mllm.convert_mllm(args.release, args.base_llm, args.out)
        print(f"wrote {args.out}")
    elif args.command == "decoder":
        from animegamer.characters.conversion import decoder

        decoder.convert_decoder(args.release, args.out, latent_size=tuple(args.latent_size))
        print(f"wrote {args.out}")
    else:
        _character(args)


def _character(args: argparse.Namespace) -> None:
    from animegamer.convert.from_registry import convert_registry_character

    result = convert_registry_character(
        args.name, args.out, args.registry, args.cache_dir,
        check_resources=not args.skip_resource_check, push_to_hub=args.push_to_hub,
        private=args.private,
    )
    if result.published is not None:
        print(
            f"published {result.published}; pin it in the registry as "
            f"converted: {{repo: {args.push_to_hub}, revision: {result.revision}}}"
        )


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    known = {"HubError", "ConversionError", "RegistryError"}
    if not any(cls.__name__ in known for cls in type(error).__mro__):
        text = f"{type(error).__name__}: {text}"
    return text


if __name__ == "__main__":
    sys.exit(main())
