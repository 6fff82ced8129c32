"""Convert one character's release into the project layout, atomically; publish the result.

The output is written into a temporary sibling folder and renamed into place only once every
stage has succeeded and the layout checks out, so an interrupted or failed conversion never
leaves a folder at the final path. Disk space and RAM are checked before anything is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from animegamer.characters.conversion.errors import ConversionError
from animegamer.characters.registry import DEFAULT_LATENT_SIZE
from animegamer.models.decoder_defaults import GUIDANCE_RANGE
from animegamer.models.game_state_defaults import (
    GAME_STATE_CONFIG_NAME,
    LLM_FOLDER,
    RESAMPLERS_NAME,
    TOKENIZER_FOLDER,
)

if TYPE_CHECKING:
    import torch
    from huggingface_hub import CommitInfo

LAYOUT_FORMAT = 1
MANIFEST_NAME = "animegamer.json"
VAE_FOLDER = "vae"
SHARED_VAE_KEY = "shared_vae"
"""Manifest key: the name of a VAE folder beside the character folder, used instead of its own
`vae/` (`vae_folder`)."""
WORLD_KEY = "world"
"""Manifest key: the small world a trained character lives in (`animegamer.nano.NANO_WORLD`),
whose probes evaluation runs on its clips."""
GUIDANCE_KEY = "guidance_scale"
"""Manifest key: the classifier-free guidance's `g` the folder's decoder plays at, where it is
not the release's (a small decoder trained on a CPU overshoots at 6: docs/nano.md); the engine
takes it over `ANIMEGAMER_GUIDANCE`."""
MODEL_INDEX_NAME = "model_index.json"
"""Makes the folder's decoder part a diffusers pipeline folder (`AnimeGamerPipeline`)."""
CARD_NAME = "README.md"
LAYOUT_FILES = (
    f"{LLM_FOLDER}/config.json",
    RESAMPLERS_NAME,
    f"{TOKENIZER_FOLDER}/tokenizer.json",
    "transformer/config.json",
    f"{VAE_FOLDER}/config.json",
    "scheduler/scheduler_config.json",
    MODEL_INDEX_NAME,
    MANIFEST_NAME,
)
LAYOUT_PATTERNS = (
    f"{LLM_FOLDER}/*", RESAMPLERS_NAME, f"{TOKENIZER_FOLDER}/*", GAME_STATE_CONFIG_NAME,
    "transformer/*", "shot_encoder/*", "vae/*", "scheduler/*",
    MODEL_INDEX_NAME, MANIFEST_NAME,
)
SKIP_CHECK_ENV = "ANIMEGAMER_SKIP_RESOURCE_CHECK"
_GB = 1e9
_MARGIN_BYTES = 2 * 1024**3
STREAMING_CONVERSION_BYTES = 9 * 10**9
"""Peak RSS of a full-size conversion: 8.0 GB measured (`benchmarks/memory.py --full-size`, a
bf16 release without base weights in the MLLM file, 2026-12-06), rounded up."""


class InsufficientResourcesError(ConversionError):
    """Not enough free disk or RAM for a conversion; the message holds the numbers."""


@dataclass(frozen=True)
class ReleaseFiles:
    """Local paths of one character's release, and where they came from.

    `sources` records every repo with its requested revision and resolved commit; it goes into
    the manifest and determines `cache_key`.
    """

    mllm_bin: Path
    decoder_dir: Path
    base_llm_dir: Path
    vae_dir: Path
    sources: Mapping[str, Mapping[str, str | None]]
    latent_size: tuple[int, int] = DEFAULT_LATENT_SIZE


@dataclass(frozen=True)
class Requirements:
    disk_bytes: int
    ram_bytes: int


def cache_key(sources: Mapping[str, Mapping[str, str | None]]) -> str:
    """A short digest of the resolved sources and the layout version."""
    payload = json.dumps({"layout": LAYOUT_FORMAT, "sources": sources}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def read_manifest(path: Path) -> dict:
    try:
        manifest = json.loads((Path(path) / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ConversionError(f"{path} has no readable {MANIFEST_NAME}: {error}") from error
    if not isinstance(manifest, dict) or manifest.get("format") != LAYOUT_FORMAT:
        raise ConversionError(
            f"{Path(path) / MANIFEST_NAME} is not a format-{LAYOUT_FORMAT} AnimeGamer manifest"
        )
    return manifest


def vae_folder(path: Path) -> Path:
    """The character's VAE: its own `vae/`, or the folder beside it that its manifest names
    under `shared_vae` (the characters of one world share one VAE, as the release's characters
    share CogVideoX's: `assets/nano/vae/` for `assets/nano/qiqi/` and `assets/nano/sosuke/`).
    A folder without a manifest (the preview engine's) has its own."""
    path = Path(path)
    if not (path / MANIFEST_NAME).is_file():
        return path / VAE_FOLDER
    shared = read_manifest(path).get(SHARED_VAE_KEY)
    if shared is None:
        return path / VAE_FOLDER
    if not isinstance(shared, str) or Path(shared).name != shared or shared in ("", ".", ".."):
        raise ConversionError(
            f"{path / MANIFEST_NAME}: {SHARED_VAE_KEY} must name a folder beside the character "
            f"folder, got {shared!r}"
        )
    return path.parent / shared


def shared_components(path: Path, dtype: torch.dtype) -> dict[str, Any]:
    """What a character folder borrows from beside it, as `AnimeGamerPipeline.from_pretrained`
    keyword arguments: its shared VAE (`vae_folder`), or nothing when it has its own."""
    from diffusers import AutoencoderKLCogVideoX

    vae = vae_folder(path)
    if vae == Path(path) / VAE_FOLDER:
        return {}
    return {"vae": AutoencoderKLCogVideoX.from_pretrained(vae, torch_dtype=dtype)}


def folder_guidance(path: Path) -> float | None:
    """The guidance the folder's manifest says its decoder plays at (`GUIDANCE_KEY`), None
    when it says none or has no manifest (the preview engine's folder)."""
    if not (Path(path) / MANIFEST_NAME).is_file():
        return None
    value = read_manifest(path).get(GUIDANCE_KEY)
    if value is None:
        return None
    low, high = GUIDANCE_RANGE
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ConversionError(f"{Path(path) / MANIFEST_NAME}: {GUIDANCE_KEY} must be a number in "
                              f"{low:g}..{high:g}, got {value!r}")
    return float(value)


def check_layout(path: Path) -> None:
    """Raise ConversionError unless `path` holds a complete project-layout character.

    Checks that the required files exist (the VAE's in its own `vae/` or in the shared folder
    its manifest names, `vae_folder`) and that every safetensors file is whole (its header is
    readable and the data it announces is all there); it reads headers only.
    """
    from safetensors import safe_open

    path = Path(path)
    vae = vae_folder(path)
    required = [path / name for name in LAYOUT_FILES if not name.startswith(f"{VAE_FOLDER}/")]
    missing = [os.path.relpath(file, path) for file in [*required, vae / "config.json"]
               if not file.is_file()]
    if missing:
        raise ConversionError(
            f"{path} is not a complete AnimeGamer character: missing {', '.join(missing)}"
        )
    folder_guidance(path)  # reads the manifest, and refuses a guidance it cannot play at
    for weights in sorted({*path.rglob("*.safetensors"), *vae.rglob("*.safetensors")}):
        try:
            with safe_open(str(weights), framework="pt") as handle:
                handle.keys()
        except Exception as error:
            raise ConversionError(f"{weights} is truncated or corrupt: {error}") from error


def estimate_requirements(files: ReleaseFiles) -> Requirements:
    """Upper bounds for a conversion, from the sizes of its inputs.

    Disk: the converted LLM is at most the release checkpoint plus the base weights, the
    transformer at most the SAT checkpoint, and the VAE is a copy where it cannot be hard-linked;
    plus a 2 GiB margin. RAM: both stages stream (memory-mapped inputs, the output written shard
    by shard), so a conversion needs about the inputs or `STREAMING_CONVERSION_BYTES`, whichever
    is smaller, plus the margin.
    """
    mllm = _size(files.mllm_bin)
    base = sum(
        _size(p) for p in files.base_llm_dir.iterdir()
        if p.suffix in (".safetensors", ".bin") and p.is_file()
    )
    decoder = _size(files.decoder_dir)
    vae = _size(files.vae_dir)
    return Requirements(
        disk_bytes=mllm + base + decoder + vae + _MARGIN_BYTES,
        ram_bytes=min(mllm + base, STREAMING_CONVERSION_BYTES) + _MARGIN_BYTES,
    )


def check_resources(needed: Requirements, where: Path, name: str) -> None:
    """Raise InsufficientResourcesError when free disk under `where` or available RAM is short."""
    import psutil

    probe = Path(where)
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    hint = f"or set {SKIP_CHECK_ENV}=1 to try anyway"
    if free < needed.disk_bytes:
        raise InsufficientResourcesError(
            f"converting {name} needs about {needed.disk_bytes / _GB:.1f} GB of free disk under "
            f"{where}, but only {free / _GB:.1f} GB is free: free some space, point "
            f"ANIMEGAMER_CACHE (or --out) at a larger disk, {hint}"
        )
    available = psutil.virtual_memory().available
    if available < needed.ram_bytes:
        raise InsufficientResourcesError(
            f"converting {name} needs about {needed.ram_bytes / _GB:.1f} GB of RAM, but only "
            f"{available / _GB:.1f} GB is available: convert on a larger machine and publish the "
            f"result with --push-to-hub, {hint}"
        )


def convert_release(
    files: ReleaseFiles, out: Path, *, name: str, check_resources_first: bool = True
) -> Path:
    """Convert `files` into a new project-layout folder `out`; all or nothing.

    `out` must not exist. Errors of any stage become a ConversionError naming the stage and its
    input; whatever was written is removed, and nothing is left at `out`.
    """
    out = Path(out)
    if out.exists():
        raise ConversionError(f"{out} already exists: choose a new output folder or remove it")
    out.parent.mkdir(parents=True, exist_ok=True)
    if check_resources_first:
        check_resources(estimate_requirements(files), out.parent, name)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        _stage("the MLLM", files.mllm_bin, lambda: _convert_mllm(files, work))
        _stage(
            "the animation decoder",
            _decoder_checkpoint(files.decoder_dir),
            lambda: _convert_decoder(files, work),
        )
        _stage("the VAE", files.vae_dir, lambda: link_tree(files.vae_dir, work / "vae"))
        write_manifest(work, name, files.sources)
        check_layout(work)
        os.rename(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return out


def write_manifest(out: Path, name: str, sources: Mapping[str, Mapping[str, str | None]],
                   extra: Mapping[str, Any] | None = None) -> None:
    """The folder's `animegamer.json`; `extra` adds keys that say how to play it
    (`GUIDANCE_KEY`)."""
    manifest = {
        "format": LAYOUT_FORMAT,
        "character": name,
        "sources": sources,
        "cache_key": cache_key(sources),
        **(extra or {}),
    }
    (Path(out) / MANIFEST_NAME).write_text(
        json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )


def link_tree(source: Path, target: Path) -> None:
    """Hard-link `source`'s files (following the Hub cache's symlinks) into `target`; copy
    where a hard link is impossible (another filesystem)."""
    for path in sorted(Path(source).rglob("*")):
        if not path.is_file():
            continue
        destination = target / path.relative_to(source)
        destination.parent.mkdir(parents=True, exist_ok=True)
        real = path.resolve()
        try:
            os.link(real, destination)
        except OSError:
            shutil.copy2(real, destination)


def model_card(manifest: Mapping, repo_id: str) -> str:
    """A model card for a published converted character."""
    from huggingface_hub import ModelCardData

    sources = manifest["sources"]
    name = manifest["character"]
    hub_repos = [
        s["repo"] for s in sources.values() if not str(s.get("commit", "")).startswith("local")
    ]
    data = ModelCardData(
        license="other",
        base_model=hub_repos or None,
        tags=["animegamer", "text-to-video", "game", "converted"],
    )
    rows = "\n".join(
        f"| {role} | `{s['repo']}` | `{s.get('revision')}` | `{s.get('commit')}` |"
        for role, s in sorted(sources.items())
    )
    return f"""---
{data.to_yaml()}
---

# AnimeGamer — {name} (converted)

The AnimeGamer checkpoints for **{name}** (arXiv 2504.01014), converted once into the
AnimeGamer Space project layout so that the Space loads them without a conversion step:

| folder | contents |
|---|---|
| `llm/` | the game-state LLM (Mistral-7B-Instruct-v0.1 with the LoRA merged, vocabulary 32284) |
| `resamplers.safetensors` | input and output resamplers of the MLLM |
| `tokenizer/` | Mistral's tokenizer with the 284 AnimeGamer tokens |
| `{GAME_STATE_CONFIG_NAME}` | the game-state model's config (`GameStateConfig`) |
| `transformer/` | the animation decoder (CogVideoX-2B transformer + motion-scope embedding) |
| `shot_encoder/` | the animation-shot encoder's projections (for training; play does not load it) |
| `vae/` | CogVideoX-2B's 3D VAE |
| `scheduler/` | CogVideoXDPMScheduler configuration |
| `{MODEL_INDEX_NAME}` | makes the decoder part an `AnimeGamerPipeline` folder |
| `{MANIFEST_NAME}` | format, character and the exact sources below |

## Sources

| part | repo | revision | commit |
|---|---|---|---|
{rows}

The weights keep the licences of their sources: the AnimeGamer release (TencentARC), Mistral-7B
(Apache-2.0) and CogVideoX-2B (Apache-2.0); read them before use.

## Use

In the Space's `assets/characters.yaml`, give the character a converted source:

```yaml
    weights:
      converted:
        repo: {repo_id}
        revision: <the commit of this repo>
```
"""


def publish(
    character_dir: Path,
    repo_id: str,
    *,
    private: bool = False,
    token: str | None = None,
    keep_card: bool = False,
) -> CommitInfo:
    """Upload a character folder to `repo_id` with a generated model card (`keep_card`: with
    the folder's own, e.g. a trained character's).

    Returns the CommitInfo of the upload (its `oid` is the revision to pin in the registry).
    """
    from huggingface_hub import HfApi

    character_dir = Path(character_dir)
    check_layout(character_dir)
    manifest = read_manifest(character_dir)
    if not keep_card:
        (character_dir / CARD_NAME).write_text(model_card(manifest, repo_id), encoding="utf-8")
    api = HfApi(token=token)
    api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    return api.upload_folder(
        repo_id=repo_id,
        repo_type="model",
        folder_path=str(character_dir),
        allow_patterns=[*LAYOUT_PATTERNS, CARD_NAME],
        commit_message=f"AnimeGamer {manifest['character']}: character checkpoints",
    )


def _convert_mllm(files: ReleaseFiles, out: Path) -> None:
    from animegamer.characters.conversion import mllm

    mllm.convert_mllm(files.mllm_bin, files.base_llm_dir, out)


def _convert_decoder(files: ReleaseFiles, out: Path) -> None:
    """transformer/, shot_encoder/, scheduler/ and model_index.json (the VAE is linked by its
    own stage)."""
    from animegamer.characters.conversion import decoder

    decoder.convert_decoder(files.decoder_dir, out, latent_size=files.latent_size)


def _decoder_checkpoint(decoder_dir: Path) -> Path:
    from animegamer.characters.conversion.decoder import release_checkpoint_path

    return release_checkpoint_path(decoder_dir)


def _stage(what: str, source: Path, run: Callable[[], None]) -> None:
    """Run one conversion stage; other errors than ConversionError get the stage and input named."""
    try:
        run()
    except ConversionError:
        raise
    except Exception as error:
        raise ConversionError(
            f"converting {what} from {source} failed ({type(error).__name__}: {error}); if that "
            "file is truncated or corrupt, delete it and download it again"
        ) from error


def _size(path: Path) -> int:
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
