"""Loading a character's models from its folder, and what a folder says about them: the
preview engine's tiny models written to a folder, the Nano world's character folders, a folder's
weights on disk and its origin."""

from __future__ import annotations

from pathlib import Path

from animegamer.models.cpu_conv import use_onednn_conv3d
from animegamer.models.game_state import GameStateModel
from animegamer.models.latent_preview import LatentPreview
from animegamer.models.scene_latent import SceneSource
from animegamer.models.tiny_game_state import save_tiny_game_state
from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline
from animegamer.pipelines.animegamer.tiny import save_tiny_decoder
from animegamer.serving.devices import Placement
from animegamer.serving.engine import CharacterModels, EngineError
from animegamer.serving.quantization import NO_QUANTIZATION, Quantization

PREVIEW_REPRESENTATION_DIM = 64


def load_character_models(
    directory: Path,
    placement: Placement,
    quantization: Quantization = NO_QUANTIZATION,
    live_preview: bool = True,
) -> CharacterModels:
    """Load both networks of a character from a project-layout directory, quantized as
    `quantization` says (a preset's; `animegamer.serving.quantization`), its VAE from the shared
    folder its manifest names, if it names one (`convert.character.shared_components`), and its
    live-preview map when `live_preview` (`LatentPreview.for_folder`: fitted against the placed
    VAE and saved in the folder when it has none)."""
    from animegamer.characters.conversion.character import folder_guidance, shared_components

    game_state = GameStateModel.from_pretrained(
        directory, device=placement.load_device, dtype=placement.game_state_dtype,
        quantization_config=quantization.language_model_config(placement.game_state_dtype),
    )
    # play renders game-state representations: the shot encoder stays on disk
    decoder = AnimeGamerPipeline.from_pretrained(
        directory, dtype=placement.decoder_dtype, shot_encoder=None,
        **shared_components(directory, placement.decoder_dtype),
        quantization_config=quantization.decoder_config(),
    )
    if placement.offload:
        decoder.enable_model_cpu_offload(device=placement.device)
    else:
        decoder.to(placement.storage_device)
    if placement.device == "cpu":
        use_onednn_conv3d(decoder.vae)
    # one shot at a time through the VAE: a 3D convolution's rounding depends on the batch it
    # runs in, and a player's clip must not depend on who else's turn shares it
    decoder.vae.enable_slicing()
    preview = LatentPreview.for_folder(directory, decoder.vae) if live_preview else None
    if preview is not None and placement.offload:
        decoder.maybe_free_model_hooks()  # a fit ran the VAE on the device: offload it again
    if placement.offload:
        game_state.enable_model_cpu_offload(placement.device)
    elif placement.load_device != placement.storage_device:
        # transformers wraps `.to` in a decorator whose stub mypy reads as unbound
        game_state.to(placement.storage_device)  # type: ignore[arg-type]
    return CharacterModels(game_state=game_state, decoder=decoder, preview=preview,
                           scenes=world_scenes(directory, decoder),
                           guidance_scale=folder_guidance(directory))


def world_scenes(directory: Path, decoder: AnimeGamerPipeline) -> SceneSource | None:
    """For a decoder that draws on scenes (`scene_channels`): the backgrounds of the world the
    folder's manifest names (Nano paints its own), else the folder's scene table (`scenes/`, a
    trained character's); None for a decoder that draws on none. `EngineError` when the folder
    has neither."""
    from animegamer.characters.conversion.character import WORLD_KEY, read_manifest
    from animegamer.data.errors import DataError
    from animegamer.data.scenes import SCENES, SceneTable
    from animegamer.nano import NANO_WORLD

    if not getattr(decoder.transformer.config, "scene_channels", 0):
        return None
    if read_manifest(directory).get(WORLD_KEY) == NANO_WORLD:
        from animegamer.nano.renderer import world_scene

        return world_scene
    try:
        table = SceneTable.load(directory)
    except DataError as error:
        raise EngineError(str(error)) from None
    if table is None:
        raise EngineError(f"{directory}: its decoder draws each clip on a scene, and the folder "
                          f"has no {SCENES}/ and names no world that paints them")
    return table


def build_preview_directory(directory: Path, seed: int = 0) -> Path:
    """Write the tiny random-weight models in the project layout (seconds, no download)."""
    save_tiny_game_state(directory, representation_dim=PREVIEW_REPRESENTATION_DIM, seed=seed)
    save_tiny_decoder(directory, representation_dim=PREVIEW_REPRESENTATION_DIM, seed=seed)
    return directory


def weights_bytes(directory: Path) -> int:
    """What a character folder's weights take on disk."""
    return sum(path.stat().st_size for path in directory.rglob("*.safetensors"))


def folder_origin(directory: Path) -> str:
    """`trained` for a folder made by `animegamer.train` (its manifest names a dataset),
    `converted` for the release's checkpoints converted."""
    from animegamer.characters.conversion.character import read_manifest

    return "trained" if "dataset" in read_manifest(directory).get("sources", {}) else "converted"


def shown_path(directory: Path) -> str:
    """A folder as people typed it: relative to the working folder when inside it."""
    try:
        return str(directory.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(directory)


def nano_character_folders(nano_dir: Path) -> dict[str, Path]:
    """The Nano world's character folders under `nano_dir` (one per character, as the release
    has a model set per character), by the character their manifest names; `EngineError` when
    there is none or one is incomplete."""
    from animegamer.characters.conversion.character import (
        MANIFEST_NAME,
        check_layout,
        read_manifest,
    )
    from animegamer.characters.conversion.errors import ConversionError

    manifests = sorted(Path(nano_dir).glob(f"*/{MANIFEST_NAME}"))
    if not manifests:
        raise EngineError(f"the Nano world cannot be played: no character folder in {nano_dir}")
    folders: dict[str, Path] = {}
    try:
        for manifest in manifests:
            check_layout(manifest.parent)
            name = str(read_manifest(manifest.parent)["character"])
            if name in folders:
                raise ConversionError(f"{folders[name]} and {manifest.parent} both hold {name}")
            folders[name] = manifest.parent
    except ConversionError as error:
        raise EngineError(f"the Nano world cannot be played: {error}") from None
    return folders
