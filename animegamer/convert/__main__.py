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
import dataclasses
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from animegamer.characters.registry import DEFAULT_LATENT_SIZE, RegistryError
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
    from animegamer.characters import hub
    from animegamer.characters.conversion.character import cache_key, convert_release, publish
    from animegamer.characters.registry import load_registry
    from animegamer.serving.settings import Settings

    settings = Settings.from_env()
    character = load_registry(args.registry or settings.registry_path).get(args.name)
    if character.release is None:
        raise RegistryError(
            f"{character.name} has no release source to convert: its registry entry names only "
            "a converted repo"
        )
    check = not args.skip_resource_check and settings.resource_checks
    if args.out is None:
        release_only = dataclasses.replace(character, converted=None)
        cache_dir = args.cache_dir or settings.cache_dir
        out = hub.resolve_character(release_only, cache_dir, check_resources=check)
    else:
        out = args.out
        sources = hub.resolve_sources(character.release)
        if hub.is_trusted(out, cache_key(sources)):
            print(f"{out} already holds this conversion; not converting again")
        else:
            files = hub.download_release(character.release, sources)
            convert_release(files, out, name=character.name, check_resources_first=check)
    print(f"converted {character.name}: {out}")
    if args.push_to_hub:
        commit = publish(out, args.push_to_hub, private=args.private)
        print(
            f"published {commit.commit_url}; pin it in the registry as "
            f"converted: {{repo: {args.push_to_hub}, revision: {commit.oid}}}"
        )


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    known = {"HubError", "ConversionError", "RegistryError"}
    if not any(cls.__name__ in known for cls in type(error).__mro__):
        text = f"{type(error).__name__}: {text}"
    return text


if __name__ == "__main__":
    sys.exit(main())
