"""`model_index.json` for a folder of `AnimeGamerPipeline` components (`write_model_index`): what
`save_pretrained` writes, for folders assembled without a pipeline at hand (the converter, the
training's character folder)."""

from __future__ import annotations

import json
from pathlib import Path

import diffusers
from diffusers.models.autoencoders.autoencoder_kl_cogvideox import AutoencoderKLCogVideoX
from diffusers.schedulers.scheduling_dpm_cogvideox import CogVideoXDPMScheduler

from animegamer.models.shot_encoder import AnimeGamerShotEncoder
from animegamer.models.transformers.transformer_animegamer import AnimeGamerTransformer3DModel
from animegamer.models.transformers.transformer_nano import NanoTransformer3DModel
from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline

_PIPELINE_COMPONENTS: dict[str, type] = {
    "scheduler": CogVideoXDPMScheduler,
    "shot_encoder": AnimeGamerShotEncoder,
    "transformer": AnimeGamerTransformer3DModel,
    "vae": AutoencoderKLCogVideoX,
}
"""The components a character folder holds (the towers come from their own repos)."""

_TRANSFORMER_CLASSES: dict[str, type] = {
    cls.__name__: cls for cls in (AnimeGamerTransformer3DModel, NanoTransformer3DModel)
}
"""The transformer classes a folder's `transformer/config.json` may name."""


def _component_class(out: Path, name: str) -> type:
    """The class of component `name` in `out`: the transformer's is the one its saved config
    names (the release's or Nano's), the others' are fixed."""
    config = out / name / "config.json"
    if name != "transformer" or not config.is_file():
        return _PIPELINE_COMPONENTS[name]
    saved = json.loads(config.read_text(encoding="utf-8")).get("_class_name")
    return _TRANSFORMER_CLASSES.get(saved, AnimeGamerTransformer3DModel)


def _library(cls: type) -> str:
    """A component's library as `model_index.json` names it: `diffusers` for its classes, the
    defining module for this project's (diffusers imports it from there when it loads)."""
    top = cls.__module__.split(".")[0]
    return top if top == "diffusers" else cls.__module__


def write_model_index(out: str | Path) -> Path:
    """Write `out/model_index.json`, as `AnimeGamerPipeline.save_pretrained` would, so that a
    folder holding `transformer/`, `vae/` and `scheduler/` (and `shot_encoder/` where it has
    one) loads as the pipeline; returns it. The towers are listed empty: `from_pretrained`
    takes them as arguments."""
    index: dict[str, object] = {
        "_class_name": AnimeGamerPipeline.__name__,
        "_diffusers_version": diffusers.__version__,
    }
    for name in AnimeGamerPipeline._optional_components:
        index[name] = [None, None]
    for name in _PIPELINE_COMPONENTS:
        if name not in AnimeGamerPipeline._optional_components or (Path(out) / name).is_dir():
            cls = _component_class(Path(out), name)
            index[name] = [_library(cls), cls.__name__]
    target = Path(out) / AnimeGamerPipeline.config_name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return target
