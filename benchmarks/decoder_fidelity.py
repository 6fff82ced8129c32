"""How faithfully a trained decoder paints a shot it is told about, apart from the game-state
model's guesses.

The evaluation plays whole games, so a wrong clip may be the game-state model's fault (a wrong
representation or motion level) or the decoder's. This renders each test shot of a dataset from
the decoder's own training condition: the shot encoder's representation of the true shot
(`truth`, what phase a trains on) or the game-state model's representation of it with the true
history before it (`teacher`, what phase c adapts to), always at the annotated motion level.
It prints, per source, the world probes' agreement with the instruction (Nano worlds) and
ACC-F / MAE-F of the clips' measured levels against the annotated ones, overall and per
character.

`--reference` takes the decoder's spatial reference (a Nano decoder's `reference_channels`: the
representation's image tokens laid on the latent) from another source than its attention
context: `truth`, `teacher`, or `zero-image` (the source's own with its image tokens zeroed).
That tells which of the two paths a wrong clip comes from (docs/nano.md, "Where the figure
scatters").

    .venv/bin/python benchmarks/decoder_fidelity.py --dataset datasets/nano/qiqi \
        --models assets/nano/qiqi \
        [--source truth teacher] [--every 4] [--steps 12] [--window 3] [--reference truth]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from animegamer.characters.conversion.character import shared_components
from animegamer.data import layout
from animegamer.data.dataset import read_rows
from animegamer.data.flow import MotionLevels, motion_scope
from animegamer.evaluate.metrics import level_errors, probe_scores
from animegamer.game.representation import TEXT_TOKENS
from animegamer.game.rules import INSTRUCTION_FIELDS, make_instruction
from animegamer.models.decoder_defaults import DEFAULT_GUIDANCE
from animegamer.models.game_state import GameStateModel
from animegamer.models.transformers.transformer_nano import NanoTransformer3DModel
from animegamer.nano.probes import PROBES, NanoProbes
from animegamer.nano.renderer import world_scene
from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline
from animegamer.train.game_state_phase import shot_representations, target_representations
from animegamer.train.windows import EpisodeWindow, episodes


def windows_of(rows: Sequence[dict[str, Any]], all_rows: Sequence[dict[str, Any]],
               window: int) -> list[EpisodeWindow]:
    """Each row as the last shot of a window of up to `window` consecutive shots."""
    by_episode = {shots[0]["episode_id"]: shots for shots in episodes(all_rows)}
    chosen = []
    for row in rows:
        shots = by_episode[row["episode_id"]]
        end = next(i for i, shot in enumerate(shots) if shot["shot_id"] == row["shot_id"]) + 1
        chosen.append(EpisodeWindow(tuple(shots[max(0, end - window):end])))
    return chosen


def representations(source: str, windows: Sequence[EpisodeWindow],
                    truth: dict[str, torch.Tensor], models: Path) -> torch.Tensor:
    """[N, 226, D]: the condition each window's target shot is rendered from; `truth` maps a
    shot id to the shot encoder's representation of that shot."""
    if source == "truth":
        return torch.stack([truth[w.target["shot_id"]] for w in windows])
    model = GameStateModel.from_pretrained(models, device="cpu", dtype=torch.float32)
    histories = [[truth[row["shot_id"]] for row in w.history] for w in windows]
    return target_representations(model, windows, histories)


@contextmanager
def reference_from(transformer: NanoTransformer3DModel,
                   condition: torch.Tensor | None) -> Iterator[None]:
    """The transformer's spatial reference of the conditional half taken from `condition`
    [226, D] instead of the context it attends to (None: unchanged)."""
    if condition is None:
        yield
        return
    own: Callable[..., torch.Tensor] = transformer.spatial_reference

    def swapped(context: torch.Tensor, *size: int) -> torch.Tensor:
        context = context.clone()
        context[context.shape[0] // 2:] = condition.to(context)  # [uncond, cond]
        return own(context, *size)

    setattr(transformer, "spatial_reference", swapped)  # noqa: B010 (mypy: a method)
    try:
        yield
    finally:
        del transformer.spatial_reference


def reference_conditions(name: str, source: torch.Tensor,
                         conditions_of: Callable[[str], torch.Tensor]) -> list[torch.Tensor | None]:
    """Each shot's spatial-reference condition under `--reference name` (None: its own)."""
    if name == "same":
        return [None] * len(source)
    if name == "zero-image":
        zeroed = source.clone()
        zeroed[:, TEXT_TOKENS:] = 0
        return list(zeroed)
    return list(conditions_of(name))


def report(source: str, records: Sequence[dict[str, Any]], seconds: float) -> None:
    print(f"{source}: {len(records)} shots, {seconds:.0f} s")
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        groups["all"].append(record)
        groups[record["character"]].append(record)
    for name, group in groups.items():
        agreed = {probe: [r[f"probe_{probe}"] for r in group
                          if r.get(f"probe_{probe}") is not None] for probe in PROBES}
        probes = "  ".join(f"{probe} {np.mean(values):.2f}"
                           for probe, values in agreed.items() if values)
        print(f"  {name:7s} n={len(group):3d}  ACC-F {np.mean([r['acc'] for r in group]):.3f}  "
              f"MAE-F {np.mean([r['mae'] for r in group]):.3f}  {probes}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, required=True)
    parser.add_argument("--models", type=Path, required=True, help="a character folder")
    parser.add_argument("--source", nargs="+", choices=("truth", "teacher"),
                        default=["truth", "teacher"])
    parser.add_argument("--split", default="test")
    parser.add_argument("--every", type=int, default=1, help="render every N-th shot")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--guidance", type=float, default=DEFAULT_GUIDANCE)
    parser.add_argument("--window", type=int, default=3, help="turns the game-state model sees")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reference", choices=("same", "truth", "teacher", "zero-image"),
                        default="same", help="where the spatial reference comes from")
    args = parser.parse_args()
    all_rows = read_rows(args.dataset).get(args.split, [])
    rows = all_rows[:: args.every]
    if not rows:
        sys.exit(f"{args.dataset} has no {args.split} rows")
    levels = MotionLevels.from_dict(json.loads((args.dataset / layout.LEVELS).read_text()))
    pipeline = AnimeGamerPipeline.from_pretrained(
        args.models, dtype=torch.float32, **shared_components(args.models, torch.float32)
    )
    if pipeline.shot_encoder is None:
        sys.exit(f"{args.models} has no shot_encoder/")
    pipeline.set_progress_bar_config(disable=True)
    drawn_on_scenes = bool(getattr(pipeline.transformer.config, "scene_channels", 0))
    probes = NanoProbes()
    windows = windows_of(rows, all_rows, args.window)
    shots = list({row["shot_id"]: row for w in windows for row in w.rows}.values())
    encoded = shot_representations(pipeline.shot_encoder, args.dataset, shots)
    truth = {row["shot_id"]: rep for row, rep in zip(shots, encoded, strict=True)}
    computed: dict[str, torch.Tensor] = {}

    def conditions_of(name: str) -> torch.Tensor:
        """A source's representations, computed once however many runs use them."""
        if name not in computed:
            computed[name] = representations(name, windows, truth, args.models)
        return computed[name]

    for source in args.source:
        started = time.perf_counter()
        conditions = conditions_of(source)
        references = reference_conditions(args.reference, conditions, conditions_of)
        records = []
        for index, (row, condition) in enumerate(zip(rows, conditions, strict=True)):
            with reference_from(pipeline.transformer, references[index]):
                output = pipeline(
                    condition[None], motion_level=int(row["motion_level"]),
                    num_inference_steps=args.steps, guidance_scale=args.guidance,
                    generator=torch.Generator("cpu").manual_seed(args.seed + index),
                    scene=[world_scene(row["time"], row["place"])] if drawn_on_scenes else None,
                )
            (clip,) = output.frames
            acc, mae = level_errors(levels.level(motion_scope(clip)), int(row["motion_level"]))
            instruction = make_instruction({name: row[name] for name in INSTRUCTION_FIELDS})
            records.append({"character": row["character"], "acc": acc, "mae": mae,
                            **probe_scores(probes, clip, instruction)})
        label = source if args.reference == "same" else f"{source}, reference {args.reference}"
        report(label, records, time.perf_counter() - started)


if __name__ == "__main__":
    main()
