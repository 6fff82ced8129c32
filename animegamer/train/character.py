"""The output of training: a character folder in exactly the layout the engine loads for a converted
release (`convert/character.py`), with a model card saying what it was trained on and how.

The phases write their own folders (`game_state/`, `decoder/` or `decoder_adapted/`); this module
copies them into one folder, writes the manifest (format, character, sources) and the card, and
checks the result with the same `check_layout` the engine and the Hub resolver use.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from animegamer.characters.conversion.character import (
    CARD_NAME,
    GUIDANCE_KEY,
    check_layout,
    write_manifest,
)
from animegamer.models.game_state_defaults import (
    GAME_STATE_CONFIG_NAME,
    LLM_FOLDER,
    RESAMPLERS_NAME,
    TOKENIZER_FOLDER,
)
from animegamer.models.latent_preview import PREVIEW_FILE, LatentPreview
from animegamer.pipelines.animegamer.model_index import write_model_index

GAME_STATE_PARTS = (LLM_FOLDER, RESAMPLERS_NAME, TOKENIZER_FOLDER, GAME_STATE_CONFIG_NAME)
DECODER_PARTS = ("transformer", "vae", "scheduler", "shot_encoder")
LOSS_LOG = "losses.jsonl"


@dataclass
class TrainingSummary:
    """What the card tells: the data, the recipe, each phase's losses, evaluation numbers."""

    dataset: str
    recipe: Mapping[str, Any]
    phase_dirs: Mapping[str, Path] = field(default_factory=dict)
    """Phase name → the folder holding its `losses.jsonl`."""
    metrics: Mapping[str, float] = field(default_factory=dict)
    notes: str = ""


def assemble_character(
    out: Path, name: str, game_state_dir: Path, decoder_dir: Path, summary: TrainingSummary,
    play_guidance: float | None = None,
) -> Path:
    """Write the character folder `out` from the game-state model's and the decoder's folders;
    returns `out`. An existing `out` is replaced only once the new folder is complete.
    `play_guidance`: the guidance its manifest says the decoder plays at (None: the engine's)."""
    out = Path(out)
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for source, parts in ((Path(game_state_dir), GAME_STATE_PARTS),
                          (Path(decoder_dir), DECODER_PARTS)):
        for part in parts:
            _copy(source / part, staging / part)
    for config in staging.rglob("config.json"):
        _drop_load_path(config)
    write_model_index(staging)
    sources = {"dataset": {"path": portable_path(summary.dataset)},
               "recipe": {"digest": _digest(summary.recipe)}}
    extra = {} if play_guidance is None else {GUIDANCE_KEY: play_guidance}
    write_manifest(staging, name, sources, extra)
    (staging / CARD_NAME).write_text(model_card(name, summary), encoding="utf-8")
    check_layout(staging)
    _write_preview(staging)
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return out


def _write_preview(folder: Path) -> None:
    """The live-preview map of the folder's VAE (`latent_preview`), so the folder is complete
    as trained rather than fitted into place by its first load."""
    from diffusers.models.autoencoders.autoencoder_kl_cogvideox import AutoencoderKLCogVideoX

    vae = AutoencoderKLCogVideoX.from_pretrained(folder / "vae")
    LatentPreview.fit(vae).save(folder / PREVIEW_FILE)


def _copy(source: Path, target: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, target)
    elif source.is_file():
        shutil.copy2(source, target)


def _drop_load_path(config: Path) -> None:
    """Remove `_name_or_path`, which diffusers writes as the folder a model was loaded from: a
    path on the training machine, meaningless (and private) in a published folder."""
    data = json.loads(config.read_text(encoding="utf-8"))
    if isinstance(data, dict) and data.pop("_name_or_path", None) is not None:
        config.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def portable_path(path: str) -> str:
    """`path` as the card and manifest show it: relative paths as given, absolute ones by their
    folder name (the training machine's layout is nobody else's)."""
    return Path(path).name if Path(path).is_absolute() else path


def _digest(recipe: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(recipe, sort_keys=True, default=str).encode()).hexdigest()[:16]


def read_losses(folder: Path) -> list[dict[str, float]]:
    """The loss records a phase wrote (`{"step": …, "loss": …, …}` per line, steps counted
    from 1)."""
    path = Path(folder) / LOSS_LOG
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def _loss_rows(phase_dirs: Mapping[str, Path]) -> str:
    rows = []
    for phase, folder in phase_dirs.items():
        losses = read_losses(folder)
        if losses:
            head, tail = losses[0], losses[-1]
            rows.append(f"| {phase} | {int(tail['step'])} | {head['loss']:.4f} | "
                        f"{tail['loss']:.4f} |")
    if not rows:
        return "No loss records were found.\n"
    header = "| phase | steps | first loss | last loss |\n|---|---|---|---|\n"
    return header + "\n".join(rows) + "\n"


def model_card(name: str, summary: TrainingSummary) -> str:
    """The character folder's README: data, recipe, losses, evaluation."""
    metrics = (
        "| metric | value |\n|---|---|\n"
        + "".join(f"| {k} | {v:.4f} |\n" for k, v in summary.metrics.items())
        if summary.metrics else "Not evaluated yet (`python -m animegamer.evaluate`).\n"
    )
    recipe = json.dumps(summary.recipe, indent=2, sort_keys=True, default=str)
    dataset = portable_path(summary.dataset)
    return f"""---
tags: [animegamer, video-generation]
---

# AnimeGamer — {name} (trained with this project)

A character for the AnimeGamer Space (arXiv 2504.01014), trained by
`python -m animegamer.train` on the dataset `{dataset}`. The folder has the layout of a
converted release (`llm/`, `resamplers.safetensors`, `tokenizer/`, `transformer/`,
`shot_encoder/`, `vae/`, `scheduler/`, `model_index.json`, `animegamer.json`): register it in
`assets/characters.yaml` under `weights.converted` (a local folder or a Hub repo) and the Space
plays it without code changes.

{summary.notes}

## Training

{_loss_rows(summary.phase_dirs)}
## Evaluation

{metrics}
## Recipe

```json
{recipe}
```
"""
