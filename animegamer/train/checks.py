"""What `python -m animegamer.train` checks before it spends any compute.

`check_dataset`: the dataset has train rows (of the character being trained), fitted motion
levels, every shot's cached features (both tensors) and clips of the decoder's frame count
(the first clip here; the latent cache checks every other one as it encodes it, still before
the first training step).
`check_resume_recipe`: a phase's checkpoints continue only under the recipe that made them. Each
phase's checkpoint folder holds `recipe.json`, the digest of the recipe's settings that change
the phase's result (its section, the seed, the precision, the accumulation) and where they came
from; a resume under other settings is refused, naming both recipes and the fields that differ.
A field the stored settings lack was added to the recipe after its checkpoints were made: at its
default, which keeps the code's earlier behaviour, it is no difference.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel
from pydantic_core import to_jsonable_python
from safetensors import safe_open

from animegamer.data.dataset import read_rows
from animegamer.train.decoder_samples import CLIP_FRAMES, ShotDataError, levels_of, read_clip
from animegamer.train.loop import CHECKPOINTS, latest_checkpoint
from animegamer.train.recipe import Recipe

FEATURE_KEYS = ("text_features", "image_features")
RECIPE_FILE = "recipe.json"
SHARED_FIELDS = ("seed", "mixed_precision", "gradient_accumulation_steps")
BOOKKEEPING = ("checkpoint_every", "keep_checkpoints", "log_every", "gradient_checkpointing")
"""Section fields a resume may change: they do not change the trained weights."""


class DatasetError(ShotDataError):
    """A dataset training cannot use; the message names the dataset and what is wrong."""


class ResumeError(ValueError):
    """A resume under a recipe other than the one that made the checkpoints."""


def check_dataset(
    dataset: Path, features: bool = True, clips: bool = True, character: str | None = None
) -> None:
    """Raise `DatasetError` unless the dataset can be trained on. `features`: every row's
    cached features must exist with both tensors; `clips`: the motion levels must be fitted and
    the clips have `CLIP_FRAMES` frames (checked on the first); `character`: the name the
    trained folder will carry, which must be the character of a one-character dataset (a world
    of several characters, like Nano's, names its folder freely)."""
    if not dataset.is_dir():
        raise DatasetError(f"{dataset}: no such dataset folder")
    rows = read_rows(dataset).get("train", [])
    if not rows:
        raise DatasetError(
            f"{dataset}: no train split rows (data/train-00000-of-00001.parquet is missing or "
            "empty)"
        )
    if character is not None:
        found = sorted({str(row.get("character")) for row in rows})
        if len(found) == 1 and character not in found:
            raise DatasetError(
                f"{dataset}: no train shot of {character} (its characters: {', '.join(found)})"
            )
    if features:
        for row in rows:
            _check_features(dataset, row)
    if clips:
        levels_of(dataset)
        path = dataset / rows[0]["clip_path"]
        frames = len(read_clip(path))
        if frames != CLIP_FRAMES:
            raise DatasetError(
                f"{path}: {frames} frames; the decoder trains on clips of {CLIP_FRAMES} "
                "(rebuild the dataset with that clip length)"
            )


def check_init_folders(phases: list[str], recipe: Recipe, game_state_init: Any) -> None:
    """Raise `FileNotFoundError` naming the recipe field unless every folder the phases to run
    start from is there: phase b's would otherwise be found missing after phase a's hours.
    `game_state_init`: phase b's validated `init` (None when phase b does not run)."""
    needed: list[tuple[str, Path, str]] = []
    if "decoder" in phases and recipe.decoder is not None and recipe.decoder.init.pipeline:
        needed.append(("decoder.init.pipeline", recipe.decoder.init.pipeline, "model_index.json"))
    for field, name in (("base_llm", "config.json"), ("character", "llm/config.json")):
        folder = getattr(game_state_init, field, None)
        if folder is not None:
            needed.append((f"game_state.init.{field}", Path(folder), name))
    for field, folder, name in needed:
        if not (folder / name).is_file():
            raise FileNotFoundError(
                f"{field}: {folder} has no {name} (set the folder the phase starts from)"
            )


def _check_features(dataset: Path, row: dict[str, Any]) -> None:
    if not row.get("features_path"):
        raise DatasetError(
            f"{dataset}: shot {row.get('shot_id')} has no cached features (build the dataset "
            "with features)"
        )
    path = dataset / row["features_path"]
    if not path.is_file():
        raise DatasetError(f"{path}: missing (the features of shot {row.get('shot_id')})")
    with safe_open(str(path), framework="pt") as handle:
        missing = [key for key in FEATURE_KEYS if key not in handle.keys()]  # noqa: SIM118
    if missing:
        raise DatasetError(f"{path}: no {' or '.join(missing)} tensor")


def phase_settings(recipe: Recipe, phase: str) -> dict[str, Any]:
    """The recipe fields a phase's result depends on (what its digest covers): its section but
    `BOOKKEEPING`, and `SHARED_FIELDS`. The decoder's `init.tiny.vae` is left out too: `all`
    fills it in with the VAE it trained."""
    data = recipe.model_dump(mode="json")
    section = data[phase]
    if section is not None:
        section = {key: value for key, value in section.items() if key not in BOOKKEEPING}
        if phase == "decoder" and section["init"].get("tiny"):
            section["init"]["tiny"].pop("vae", None)
    return {**{field: data[field] for field in SHARED_FIELDS}, phase: section}


def digest(settings: dict[str, Any]) -> str:
    text = json.dumps(settings, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_NO_DEFAULT = object()


def field_default(model: type[BaseModel], path: Sequence[str]) -> Any:
    """The JSON value of the default of the recipe field at `path` (a flattened key split at
    its dots), or `_NO_DEFAULT` where no such field has one."""
    field = model.model_fields.get(path[0])
    if field is None:
        return _NO_DEFAULT
    if len(path) == 1:
        if field.is_required():
            return _NO_DEFAULT
        return to_jsonable_python(field.get_default(call_default_factory=True))
    for candidate in get_args(field.annotation) or (field.annotation,):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            default = field_default(candidate, path[1:])
            if default is not _NO_DEFAULT:
                return default
    return _NO_DEFAULT


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat |= _flat(item, f"{prefix}{key}.")
        return flat
    return {prefix.rstrip("."): value}


def check_resume_recipe(out: Path, phase: str, recipe: Recipe, config: str) -> bool:
    """Refuse (`ResumeError`) a phase whose checkpoints under OUT were made by other settings.
    Returns whether the phase has no checkpoints (then `record_recipe` may write its file)."""
    if latest_checkpoint(out, phase) is None:
        return True
    path = out / CHECKPOINTS / phase / RECIPE_FILE
    if not path.is_file():
        return False
    stored = json.loads(path.read_text(encoding="utf-8"))
    settings = phase_settings(recipe, phase)
    if stored["digest"] == digest(settings):
        return False
    old, new = _flat(stored["settings"]), _flat(settings)
    fields = sorted(
        key for key in old.keys() | new.keys()
        if old.get(key, _NO_DEFAULT) != new.get(key, _NO_DEFAULT)
        and not (key not in old and new[key] == field_default(Recipe, key.split(".")))
    )
    if fields:
        raise ResumeError(
            f"{path.parent}: its checkpoints were made by recipe {stored['recipe']} (digest "
            f"{stored['digest']}), not {config} (digest {digest(settings)}); they differ in "
            f"{', '.join(fields[:5])}: resume with the first, or train into a new --out"
        )
    return False


def record_recipe(out: Path, phase: str, recipe: Recipe, config: str) -> None:
    """Write the phase's `recipe.json` (before its first checkpoint)."""
    settings = phase_settings(recipe, phase)
    path = out / CHECKPOINTS / phase / RECIPE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"digest": digest(settings), "recipe": config, "settings": settings}
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
