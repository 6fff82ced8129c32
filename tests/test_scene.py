"""A Nano decoder that draws on its world's scene (`scene_channels`): the transformer takes the
scene's latent, the pipeline samples the clip as its difference from it, training feeds it, and
play hands it the background that the turn's instruction names."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from diffusers.schedulers.scheduling_dpm_cogvideox import CogVideoXDPMScheduler

from animegamer.data.errors import DataError
from animegamer.data.scenes import SCENES, SceneTable
from animegamer.game.rules import make_instruction, new_session
from animegamer.models.tiny_decoder import TINY_LATENT_SIZE, tiny_transformer_config, tiny_vae
from animegamer.models.transformers.transformer_nano import NanoTransformer3DModel
from animegamer.nano.renderer import world_scene
from animegamer.nano.scene import HEIGHT, WIDTH
from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline
from animegamer.pipelines.animegamer.sampling import scheduler_config
from animegamer.serving.clips import ClipStore
from animegamer.serving.devices import Placement
from animegamer.serving.engine import CharacterModels, EngineError, TurnEngine
from animegamer.serving.loading import world_scenes
from animegamer.serving.settings import EngineKind
from animegamer.train.run import TrainOptions, train
from tests.test_train_decoder import TINY_RECIPE, build_dataset
from tests.tiny_transformer import run_transformer, transformer_inputs

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CHANNELS = 16  # tiny_vae()'s latent channels


def scene_transformer(noise_correlation: float = 0.0) -> NanoTransformer3DModel:
    torch.manual_seed(0)
    return NanoTransformer3DModel(**tiny_transformer_config(), scene_channels=CHANNELS,
                                  noise_correlation=noise_correlation)


def scene_pipeline(noise_correlation: float = 0.0) -> AnimeGamerPipeline:
    torch.manual_seed(0)
    return AnimeGamerPipeline(scene_transformer(noise_correlation), tiny_vae(),
                              CogVideoXDPMScheduler(**scheduler_config()))


def image(seed: int) -> np.ndarray:
    """A random uint8 image at the tiny VAE's clip size."""
    height, width = TINY_LATENT_SIZE
    return np.random.default_rng(seed).integers(0, 256, (8 * height, 8 * width, 3), np.uint8)


def test_the_transformer_takes_a_scene_exactly_when_it_draws_on_one() -> None:
    model = scene_transformer()
    latents, representation = transformer_inputs(13, CHANNELS, *TINY_LATENT_SIZE)
    with pytest.raises(ValueError, match="scene_channels"):
        run_transformer(model, latents, representation)
    scene = torch.randn(2, CHANNELS, *TINY_LATENT_SIZE)
    with torch.no_grad():
        out = model(latents, representation, timestep=torch.tensor([500, 500]),
                    ofs=torch.tensor([1.0, 1.0]), return_dict=False, scene=scene)[0]
        other = model(latents, representation, timestep=torch.tensor([500, 500]),
                      ofs=torch.tensor([1.0, 1.0]), return_dict=False, scene=-scene)[0]
    assert out.shape == latents.shape
    assert not torch.allclose(out, other)  # the scene reaches the prediction
    without = NanoTransformer3DModel(**tiny_transformer_config(), reference_channels=4)
    with pytest.raises(ValueError, match="scene_channels"), torch.no_grad():
        without(latents, representation, timestep=torch.tensor([500, 500]),
                ofs=torch.tensor([1.0, 1.0]), return_dict=False, scene=scene)
    with pytest.raises(ValueError, match="latent's 16 channels"):
        NanoTransformer3DModel(**tiny_transformer_config(), scene_channels=4)


@pytest.mark.parametrize("noise_correlation", [0.0, 0.9])
def test_where_the_model_says_nothing_differs_the_clip_is_the_scene(
    noise_correlation: float,
) -> None:
    """A transformer whose every prediction says "the clip is its scene" (velocity α/σ·x_t of
    the difference, so its x0 is zero) gives the scene's latent in every frame as the x0 of
    every step, and a clip close to it."""
    pipe = scene_pipeline(noise_correlation)
    alphas = pipe.scheduler.alphas_cumprod

    def nothing_differs(hidden_states: torch.Tensor, timestep: torch.Tensor,
                        **_: object) -> tuple[torch.Tensor]:
        cumulative = alphas[timestep.long()].reshape(-1, 1, 1, 1, 1)
        return (cumulative.sqrt() / (1 - cumulative).sqrt() * hidden_states,)

    pipe.transformer.forward = nothing_differs  # type: ignore[method-assign]
    scenes = [image(1), image(2)]
    video = torch.from_numpy(np.stack(scenes)).permute(0, 3, 1, 2)[:, :, None] / 127.5 - 1
    with torch.no_grad():
        expected = pipe.vae.encode(video).latent_dist.mean[:, :, 0]
    expected = expected * pipe.vae.config.scaling_factor
    seen: list[torch.Tensor] = []

    def record(_pipe: object, _step: int, _t: object, tensors: dict) -> dict:
        seen.append(pipe.noise_prior.color(tensors["pred_original_sample"]))
        return {}

    latents = pipe([torch.randn(226, 64), torch.randn(226, 64)], motion_level=3,
                   num_inference_steps=4, output_type="latent", scene=scenes,
                   generator=torch.Generator().manual_seed(0), callback_on_step_end=record,
                   callback_on_step_end_tensor_inputs=["pred_original_sample"]).frames
    assert len(seen) == 4
    for x0 in seen:
        torch.testing.assert_close(x0, expected[:, None].expand_as(x0), atol=1e-4, rtol=1e-4)
    assert isinstance(latents, torch.Tensor)
    assert (latents - expected[:, None]).abs().mean() < 0.05 * expected.abs().mean()


def test_the_pipeline_refuses_a_missing_or_stray_scene() -> None:
    pipe = scene_pipeline()
    representation = torch.randn(1, 226, 64)
    with pytest.raises(ValueError, match="give 1 scene images"):
        pipe(representation, motion_level=3, num_inference_steps=1)
    with pytest.raises(ValueError, match="give 1 scene images"):
        pipe(representation, motion_level=3, num_inference_steps=1, scene=[image(1), image(2)])
    with pytest.raises(ValueError, match="uint8 images"):
        pipe(representation, motion_level=3, num_inference_steps=1,
             scene=[image(1).astype(np.float32)])
    release = AnimeGamerPipeline(NanoTransformer3DModel(**tiny_transformer_config()),
                                 tiny_vae(), CogVideoXDPMScheduler(**scheduler_config()))
    with pytest.raises(ValueError, match="draws no scene"):
        release(representation, motion_level=3, num_inference_steps=1, scene=[image(1)])


def scene_recipe(tmp_path: Path) -> Path:
    recipe = yaml.safe_load(TINY_RECIPE.read_text())
    recipe["decoder"]["init"]["tiny"]["scene_channels"] = CHANNELS
    path = tmp_path / "scene.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def test_the_phases_train_on_the_worlds_scenes(tmp_path: Path) -> None:
    dataset = build_dataset(tmp_path / "dataset")  # every shot: "day", "sky"
    asked: list[tuple[str, str]] = []

    def scenes(time: str, place: str) -> np.ndarray:
        asked.append((time, place))
        return image(3)

    result = train(scene_recipe(tmp_path), dataset, tmp_path / "run", "decoder",
                   TrainOptions(scenes=scenes))
    assert asked == [("day", "sky")]  # each scene encoded once
    pipe = AnimeGamerPipeline.from_pretrained(result.written["decoder"])
    assert pipe.transformer.config.scene_channels == CHANNELS
    frames = pipe(torch.randn(1, 226, 64), motion_level=3, num_inference_steps=2,
                  scene=[image(3)]).frames
    assert frames.shape == (1, 17, 64, 96, 3)


def test_a_character_trained_on_its_own_videos_keeps_their_scenes_and_plays_on_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a world that paints scenes, the phases draw on the dataset's own: the median of
    its shots' frames per time and place, where the moving square drops out, read once for
    both phases and the folder. The character folder keeps them and the app plays on them."""
    from animegamer.characters.conversion.character import check_layout
    from animegamer.data import scenes as scenes_module
    from animegamer.serving.loading import load_character_models

    dataset = build_dataset(tmp_path / "dataset")
    read: list[Path] = []
    original = scenes_module.read_clip
    monkeypatch.setattr(scenes_module, "read_clip",
                        lambda path: read.append(path) or original(path))
    result = train(scene_recipe(tmp_path), dataset, tmp_path / "run", "all")
    assert len(read) == len(set(read)) == 6  # every train clip, once
    character = result.written["character"]
    check_layout(character)
    table = SceneTable.load(character)
    assert table is not None and list(table.scenes) == [("day", "sky")]
    background = np.zeros((64, 96, 3), np.uint8)
    background[..., 2] = 40  # the clips' background, under the square (tests/test_train_decoder)
    assert np.abs(table("day", "sky").astype(int) - background).mean() < 4
    models = load_character_models(character, Placement("cpu", torch.float32, torch.float32),
                                   live_preview=False)
    assert isinstance(models.scenes, SceneTable)
    assert np.array_equal(models.scenes("night", "harbour"), table.scenes[("day", "sky")])


def test_a_scene_reads_a_bounded_number_of_shots_spread_over_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A large dataset's median holds at most `shots_per_scene` clips of a scene in memory:
    the first, the last and those evenly between, and still drops the moving square."""
    from animegamer.data import scenes as scenes_module
    from animegamer.data.dataset import read_rows
    from animegamer.data.scenes import median_scenes

    dataset = build_dataset(tmp_path / "dataset")
    rows = read_rows(dataset)["train"]
    read: list[str] = []
    original = scenes_module.read_clip
    monkeypatch.setattr(scenes_module, "read_clip",
                        lambda path: read.append(Path(path).name) or original(path))
    scenes = median_scenes(dataset, rows, shots_per_scene=3)
    names = [Path(row["clip_path"]).name for row in rows]
    assert len(names) == 6 and read == [names[0], names[2], names[5]]
    background = np.zeros((64, 96, 3), np.uint8)
    background[..., 2] = 40
    assert np.abs(scenes[("day", "sky")].astype(int) - background).mean() < 4


def test_a_scene_table_falls_back_to_the_place_then_to_any_scene(tmp_path: Path) -> None:
    day, night, road = image(5), image(6), image(7)
    table = SceneTable({("day", "sky"): day, ("night", "sky"): night, ("day", "road"): road})
    assert table("night", "sky") is night
    assert table("evening", "road") is road  # the place at another time
    assert table("evening", "moon") is road  # the first scene, by (time, place)
    table.save(tmp_path)
    loaded = SceneTable.load(tmp_path)
    assert loaded is not None
    assert {key: image.tolist() for key, image in loaded.scenes.items()} == {
        key: image.tolist() for key, image in table.scenes.items()}
    assert SceneTable.load(tmp_path / "elsewhere") is None
    (tmp_path / SCENES / "0.png").write_bytes(b"not a png")
    with pytest.raises(DataError, match="unreadable scene table"):
        SceneTable.load(tmp_path)


def test_play_hands_the_decoder_the_background_the_instruction_names(tmp_path: Path) -> None:
    from animegamer.models.tiny_game_state import tiny_game_state_model

    asked: list[tuple[str, str]] = []

    def scenes(time: str, place: str) -> np.ndarray:
        asked.append((time, place))
        return image(4)

    models = CharacterModels(game_state=tiny_game_state_model(), decoder=scene_pipeline(),
                             scenes=scenes)
    placement = Placement("cpu", torch.float32, torch.float32)
    engine = TurnEngine(lambda character, _: models, kind=EngineKind.NANO, placement=placement,
                        num_inference_steps=1, guidance_scale=1.0, clips=ClipStore(tmp_path))
    instruction = make_instruction({"character": "Qiqi", "adverb": "slowly", "motion": "walk",
                                    "time": "evening", "place": "harbour"})
    session = engine.play(new_session("Qiqi", window=1), instruction, seed=0)
    assert len(session.turns) == 1 and asked == [("evening", "harbour")]


def test_a_folder_names_the_world_that_paints_its_scenes(tmp_path: Path) -> None:
    from animegamer.characters.conversion.character import LAYOUT_FORMAT, MANIFEST_NAME, WORLD_KEY

    pipe = scene_pipeline()
    manifest = {"format": LAYOUT_FORMAT, "character": "Tux"}
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(EngineError, match="has no scenes/ and names no world"):
        world_scenes(tmp_path, pipe)
    (tmp_path / MANIFEST_NAME).write_text(json.dumps({**manifest, WORLD_KEY: "nano"}))
    assert world_scenes(tmp_path, pipe) is world_scene
    release = AnimeGamerPipeline(NanoTransformer3DModel(**tiny_transformer_config()),
                                 tiny_vae(), CogVideoXDPMScheduler(**scheduler_config()))
    assert world_scenes(tmp_path, release) is None
    assert world_scene("night", "harbour").shape == (HEIGHT, WIDTH, 3)
    with pytest.raises(ValueError, match="does not know the place 'moon'"):
        world_scene("night", "moon")
