"""Phases a and c of training (animegamer.train): trainable sets, loss, latent cache, resume,
the saved pipeline, recipe errors. Everything on a tiny dataset of 64×96 clips, on the CPU."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from diffusers.models.autoencoders.autoencoder_kl_cogvideox import AutoencoderKLCogVideoX
from diffusers.schedulers.scheduling_dpm_cogvideox import CogVideoXDPMScheduler
from safetensors.torch import load_file

from animegamer.data.dataset import read_rows, write_splits
from animegamer.data.features import tiny_feature_extractor, write_features
from animegamer.data.flow import MotionLevels
from animegamer.data.layout import clip_path, features_path
from animegamer.models.transformers.transformer_animegamer import AnimeGamerTransformer3DModel
from animegamer.models.transformers.transformer_nano import NanoTransformer3DModel
from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline
from animegamer.pipelines.animegamer.sampling import scheduler_config
from animegamer.train import decoder_model, decoder_phase
from animegamer.train.__main__ import main
from animegamer.train.decoder_samples import (
    LatentCache,
    ShotDataset,
    collate,
    draw_latents,
    levels_of,
    vae_fingerprint,
)
from animegamer.train.loop import losses_path, lr_scheduler, read_losses
from animegamer.train.recipe import (
    RELEASE_AIDS,
    CfgDropout,
    LoraSettings,
    RecipeError,
    TinyInit,
    load_recipe,
)
from animegamer.video.writer import write_mp4

pytestmark = pytest.mark.usefixtures("one_torch_thread")

REPO = Path(__file__).resolve().parents[1]
TINY_RECIPE = REPO / "recipes" / "tiny-cpu.yaml"
SHOTS_PER_VIDEO = 3


def _clip(speed: int, hue: int) -> np.ndarray:
    """17 frames 64×96 of a square moving right by `speed` px a frame."""
    frames = np.zeros((17, 64, 96, 3), np.uint8)
    frames[..., 2] = 40
    for index, frame in enumerate(frames):
        x = (8 + speed * index) % 80
        frame[20:36, x:x + 16] = (hue, 255 - hue, 128)
    return frames


def build_dataset(root: Path) -> Path:
    extractor = tiny_feature_extractor()
    rows = []
    for v, video in enumerate(("film-a", "film-b")):
        for index in range(SHOTS_PER_VIDEO):
            shot = f"{video}-{index:09d}"
            frames = _clip(speed=1 + 2 * index + v, hue=60 * index + 40 * v)
            write_mp4(frames, root / clip_path(video, shot))
            motion = f"softly move {index}"
            write_features(
                root / features_path(video, shot),
                extractor.image_features(frames[:1])[0],
                extractor.text_features([motion])[0],
                extractor.name,
                motion,
            )
            rows.append({
                "shot_id": shot, "video": video, "start": float(index * 2),
                "episode_id": f"{video}-ep", "episode_index": index,
                "character": "Qiqi", "adverb": "softly", "motion": f"move {index}",
                "time": "day", "place": "sky", "instruction": f"Qiqi softly moves {index}",
                "motion_scope": 1.0 + 2 * index + v, "motion_level": 0,
                "sc": 0, "et": 1, "st": -1,
                "clip_path": clip_path(video, shot), "features_path": features_path(video, shot),
            })
    levels = MotionLevels.fit(row["motion_scope"] for row in rows)
    for row in rows:
        row["motion_level"] = levels.level(row["motion_scope"])
    (root / "levels.json").write_text(json.dumps(levels.to_dict()))
    write_splits(root, {"train": rows})
    return root


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_dataset(tmp_path_factory.mktemp("dataset"))


class EncodeCounter:
    """Counts calls of the VAE's encoder (patched on the class)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        original = AutoencoderKLCogVideoX.encode

        def counting(vae: AutoencoderKLCogVideoX, *args: object, **kwargs: object) -> object:
            self.calls += 1
            return original(vae, *args, **kwargs)

        monkeypatch.setattr(AutoencoderKLCogVideoX, "encode", counting)


def train(dataset: Path, out: Path, *extra: str, command: str = "decoder") -> None:
    argv = [command, "--dataset", str(dataset), "--out", str(out), "--config", str(TINY_RECIPE)]
    assert main([*argv, *extra]) == 0


@pytest.fixture(scope="module")
def trained(dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted phase-a run of the tiny recipe (2 warm-up + 3 joint steps)."""
    out = tmp_path_factory.mktemp("uninterrupted")
    with pytest.MonkeyPatch.context() as patch:
        counter = EncodeCounter(patch)
        train(dataset, out)
    assert counter.calls == 2 * SHOTS_PER_VIDEO  # every clip encoded once
    return out


def _tiny_model(dataset: Path) -> decoder_model.ConditionedDecoder:
    pipeline = decoder_phase.tiny_training_pipeline(TinyInit(), 32, 32, levels_of(dataset))
    return decoder_model.ConditionedDecoder(pipeline.transformer, pipeline.shot_encoder)


@pytest.mark.parametrize(("levels", "patch", "tokens"), [(4, 2, (4, 6)), (3, 2, (8, 12)),
                                                          (3, 4, (4, 6))])
def test_the_transformer_takes_its_latent_size_from_the_trained_vae(
    dataset: Path, tmp_path: Path, levels: int, patch: int, tokens: tuple[int, int]
) -> None:
    from animegamer.train.vae import VaeRecipe, build_vae

    channels = (4, 8, 8, 8)[:levels]
    build_vae(VaeRecipe(block_out_channels=channels, norm_num_groups=2), 64, 96).save_pretrained(
        tmp_path / "vae")
    sizes = TinyInit(vae=tmp_path / "vae", patch_size=patch)
    pipeline = decoder_phase.tiny_training_pipeline(sizes, 32, 32, levels_of(dataset))
    config = pipeline.transformer.config
    latent = (64 // 2 ** (levels - 1), 96 // 2 ** (levels - 1))
    assert (config.sample_height, config.sample_width) == latent
    assert (latent[0] // config.patch_size, latent[1] // config.patch_size) == tokens
    shape = pipeline.latent_shape()
    assert shape[-2:] == latent
    encoded = pipeline.vae.encode(torch.zeros(1, 3, 17, 64, 96)).latent_dist.mean
    assert tuple(encoded.shape[-2:]) == latent
    with pytest.raises(decoder_phase.TrainError, match="3-patches"):
        decoder_phase.tiny_training_pipeline(TinyInit(vae=tmp_path / "vae", patch_size=3), 32, 32,
                                             levels_of(dataset))


@pytest.mark.parametrize(
    ("field", "value", "release", "built"),
    [
        ("motion_scope_scale", 100.0, 1.0, lambda p: p.transformer.ofs_proj.scale),
        ("noise_correlation", 0.5, 0.0, lambda p: p.noise_prior.correlation),
        ("reference_channels", 4, 0,
         lambda p: p.transformer.patch_embed.proj.in_channels - p.transformer.config.in_channels),
        ("scene_channels", 16, 0,
         lambda p: p.transformer.patch_embed.proj.in_channels - p.transformer.config.in_channels),
        ("patch_size_t", 2, None, lambda p: p.transformer.patch_embed.patch_size_t),
    ],
    ids=["motion_scope_scale", "noise_correlation", "reference_channels", "scene_channels",
         "patch_size_t"],
)
def test_the_recipe_sets_the_transformers_conditioning(
    dataset: Path, field: str, value: float, release: float | None,
    built: Callable[[AnimeGamerPipeline], float | None],
) -> None:
    """A `decoder.init.tiny` field reaches the transformer's config and the model built from
    it; left out, the release's transformer does as the release does. Any of Nano's aids makes
    the transformer a Nano one."""
    levels = levels_of(dataset)
    default = decoder_phase.tiny_training_pipeline(TinyInit(), 32, 32, levels)
    chosen = decoder_phase.tiny_training_pipeline(TinyInit(**{field: value}), 32, 32, levels)
    assert type(default.transformer) is AnimeGamerTransformer3DModel
    assert built(default) == release
    assert chosen.transformer.config[field] == built(chosen) == value
    is_aid = field in RELEASE_AIDS
    assert isinstance(chosen.transformer, NanoTransformer3DModel) == is_aid


def test_the_recipe_refuses_a_motion_scope_scale_of_zero() -> None:
    with pytest.raises(ValueError, match="greater than 0"):
        TinyInit(motion_scope_scale=0)


@pytest.mark.parametrize(("ratio", "latent_frames", "patch", "channels"),
                         [(2, 9, 2, 16), (1, 17, 4, 4)])
def test_the_decoder_takes_its_vaes_latent_frames_and_channels(
    dataset: Path, tmp_path: Path, ratio: int, latent_frames: int, patch: int, channels: int
) -> None:
    from animegamer.train.vae import VaeRecipe, build_vae

    recipe = VaeRecipe(block_out_channels=(4, 8, 8), norm_num_groups=2,
                       temporal_compression=ratio, latent_channels=channels)
    build_vae(recipe, 64, 96).save_pretrained(tmp_path / "vae")
    pipeline = decoder_phase.tiny_training_pipeline(
        TinyInit(vae=tmp_path / "vae", patch_size=patch), 32, 32, levels_of(dataset)
    )
    config = pipeline.transformer.config
    assert config.temporal_compression_ratio == ratio
    assert config.in_channels == config.out_channels == channels
    encoded = pipeline.vae.encode(torch.zeros(1, 3, 17, 64, 96)).latent_dist.mean
    assert tuple(encoded.shape) == (1, channels, latent_frames, 16, 24)
    assert pipeline.latent_shape()[1:3] == (latent_frames, channels)
    representation = torch.randn(1, 226, 64)
    frames = pipeline(representation, 3, num_inference_steps=2).frames
    assert frames.shape == (1, 17, 64, 96, 3)


def test_trainable_sets_of_each_stage(dataset: Path) -> None:
    model = _tiny_model(dataset)
    encoder = {f"shot_encoder.{n}" for n, _ in model.shot_encoder.named_parameters()}
    ofs = {f"transformer.ofs_embedding.linear_{i}.{w}" for i in (1, 2) for w in ("weight", "bias")}
    decoder_model.set_trainable(model, "warmup")
    assert set(decoder_model.trainable_names(model)) == encoder | ofs
    assert len(encoder) == 12  # two Linear-GELU-Linear projections and two LayerNorms

    decoder_model.add_lora(model.transformer, LoraSettings(lora_rank=4))
    decoder_model.set_trainable(model, "joint")
    blocks = range(2)
    adaln = {
        f"transformer.transformer_blocks.{b}.norm{n}.linear.{w}"
        for b in blocks for n in (1, 2) for w in ("weight", "bias")
    } | {"transformer.norm_out.linear.weight", "transformer.norm_out.linear.bias"}
    lora = {
        f"transformer.transformer_blocks.{b}.attn1.{p}.lora_{m}.default.weight"
        for b in blocks for p in ("to_q", "to_k", "to_v", "to_out.0") for m in "AB"
    }
    assert set(decoder_model.trainable_names(model)) == encoder | ofs | adaln | lora
    assert model.transformer.transformer_blocks[0].attn1.to_q.lora_A["default"].weight.shape[0] == 4

    adapted = decoder_model.ConditionedDecoder(model.transformer)
    decoder_model.set_trainable(adapted, "adapt")
    assert set(decoder_model.trainable_names(adapted)) == ofs | adaln | lora


def test_a_lora_decoder_trains_its_spatial_reference_beside_the_lora(dataset: Path) -> None:
    """The reference's projection and the patch embedding that reads its channels are new
    conditioning paths: the joint and adapt stages train them; warm-up does not."""
    pipeline = decoder_phase.tiny_training_pipeline(
        TinyInit(reference_channels=3), 32, 32, levels_of(dataset)
    )
    model = decoder_model.ConditionedDecoder(pipeline.transformer, pipeline.shot_encoder)
    reference = {f"transformer.{layer}.{w}" for layer in ("reference_proj", "patch_embed.proj")
                 for w in ("weight", "bias")}
    decoder_model.set_trainable(model, "warmup")
    assert not reference & set(decoder_model.trainable_names(model))
    decoder_model.add_lora(model.transformer, LoraSettings(lora_rank=4))
    for stage in ("joint", "adapt"):
        decoder_model.set_trainable(model, stage)
        names = set(decoder_model.trainable_names(model))
        assert reference <= names
        assert "transformer.transformer_blocks.0.ff.net.0.proj.weight" not in names


def test_full_mode_trains_every_transformer_weight(dataset: Path) -> None:
    """For fresh random models: nothing of the transformer stays frozen, and no LoRA."""
    model = _tiny_model(dataset)
    encoder = {f"shot_encoder.{n}" for n, _ in model.shot_encoder.named_parameters()}
    transformer = {f"transformer.{n}" for n, _ in model.transformer.named_parameters()}
    decoder_model.set_trainable(model, "joint", full=True)
    assert set(decoder_model.trainable_names(model)) == encoder | transformer
    assert "transformer.transformer_blocks.0.ff.net.0.proj.weight" in transformer
    decoder_model.set_trainable(model, "adapt", full=True)
    assert set(decoder_model.trainable_names(model)) == transformer
    assert LoraSettings(transformer="full").transformer == "full"
    with pytest.raises(ValueError):
        LoraSettings(transformer="some")


def test_cfg_dropout_rates_and_independence() -> None:
    text, image = torch.ones(20000, 30, 4), torch.ones(20000, 196, 4)
    generator = torch.Generator().manual_seed(0)
    text, image = decoder_model.cfg_dropout(text, image, CfgDropout(), generator)
    text_dropped = text[:, 0, 0] == 0
    image_dropped = image[:, 0, 0] == 0
    assert abs(text_dropped.float().mean().item() - 0.15) < 0.01
    assert abs(image_dropped.float().mean().item() - 0.05) < 0.01
    both = (text_dropped & image_dropped).float().mean().item()
    assert abs(both - 0.15 * 0.05) < 0.003
    assert torch.all((text == 0) | (text == 1))


def test_vae_fingerprint_follows_weights_not_private_config(dataset: Path) -> None:
    from diffusers.configuration_utils import FrozenDict

    vae = decoder_phase.tiny_training_pipeline(TinyInit(), 32, 32, levels_of(dataset)).vae
    first = vae_fingerprint(vae)
    private = list(reversed(vae.config["_use_default_values"]))  # set order varies by process
    vae._internal_dict = FrozenDict({**vae.config, "_use_default_values": private})
    assert vae_fingerprint(vae) == first
    with torch.no_grad():
        next(vae.parameters()).add_(1e-3)
    assert vae_fingerprint(vae) != first


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="no oneDNN")
def test_the_latent_cache_encodes_clips_through_onednn(dataset: Path, tmp_path: Path) -> None:
    """One clip at a time, where PyTorch's own choice is its slow im2col kernel."""
    vae = decoder_phase.tiny_training_pipeline(TinyInit(), 32, 32, levels_of(dataset)).vae
    cache = LatentCache.for_vae(tmp_path, vae)
    rows = read_rows(dataset)["train"][:1]
    with torch.profiler.profile() as profile:
        assert cache.fill(rows, dataset, vae) == 1
    kernels = {event.key for event in profile.key_averages()}
    assert "aten::mkldnn_convolution" in kernels and "aten::slow_conv3d_forward" not in kernels


def test_loss_decreases_on_a_fixed_batch(dataset: Path, tmp_path: Path) -> None:
    model = _tiny_model(dataset)
    levels = levels_of(dataset)
    rows = read_rows(dataset)["train"]
    vae = decoder_phase.tiny_training_pipeline(TinyInit(), 32, 32, levels).vae
    cache = LatentCache.for_vae(tmp_path, vae)
    assert cache.fill(rows[:2], dataset, vae) == 2
    assert cache.fill(rows[:2], dataset, vae) == 0  # cached
    batch = collate([ShotDataset(rows, dataset, cache, levels)[i] for i in (0, 1)])
    assert batch["latent_mean"].shape == (2, 5, 16, 8, 12)  # [B, T, C, H, W]
    assert batch["motion_scope"].tolist() == pytest.approx(
        [levels.value(rows[i]["motion_level"]) for i in (0, 1)]
    )
    decoder_model.add_lora(model.transformer, LoraSettings(lora_rank=4))
    decoder_model.set_trainable(model, "joint")
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    scheduler = CogVideoXDPMScheduler(**scheduler_config())
    losses = []
    for _ in range(30):
        generator = torch.Generator().manual_seed(0)
        latents = draw_latents(batch["latent_mean"], batch["latent_std"], 1.0, generator)
        loss = decoder_model.v_prediction_loss(
            model, scheduler, latents, batch["motion_scope"], generator,
            text_features=batch["text_features"], image_features=batch["image_features"],
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    # fixed noise and timesteps: the tiny random network's loss falls 1.40 → 1.07 and levels off
    assert losses[-1] < 0.8 * losses[0]
    assert losses[-1] < min(losses[:5])


@pytest.mark.parametrize(("stop", "checkpoints"), [(2, [2]), (3, [2, 3])])
def test_resume_reaches_the_uninterrupted_weights(
    dataset: Path, trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    stop: int, checkpoints: list[int],
) -> None:
    """Stopped at the end of warm-up (2) or inside the joint stage (3), then resumed."""
    out = tmp_path / "interrupted"
    train(dataset, out, "--max-steps", str(stop))
    assert not (out / "decoder").exists()
    folder = out / "checkpoints" / "decoder"
    assert sorted(p.name for p in folder.glob("step-*")) == [f"step-{s:08d}" for s in checkpoints]
    assert (folder / "recipe.json").is_file()  # the recipe digest of `checks`
    counter = EncodeCounter(monkeypatch)
    losses = []
    original = decoder_model.v_prediction_loss

    def counted(*args: object, **kwargs: torch.Tensor) -> torch.Tensor:
        losses.append(original(*args, **kwargs))  # type: ignore[arg-type]
        return losses[-1]

    monkeypatch.setattr(decoder_phase, "v_prediction_loss", counted)
    train(dataset, out, "--resume")
    assert counter.calls == 0  # the latents came from the cache
    assert len(losses) == 5 - stop  # only the steps after the checkpoint ran
    for component in ("transformer", "shot_encoder"):
        name = "diffusion_pytorch_model.safetensors"
        expected = load_file(trained / "decoder" / component / name)
        resumed = load_file(out / "decoder" / component / name)
        assert expected.keys() == resumed.keys()
        for key, value in expected.items():
            torch.testing.assert_close(resumed[key], value, rtol=0, atol=1e-6, msg=key)
    expected_losses = read_losses(losses_path(trained, "decoder"))
    assert [r["step"] for r in expected_losses] == [1, 2, 3, 4, 5]
    resumed_losses = read_losses(losses_path(out, "decoder"))
    assert [r["step"] for r in resumed_losses] == [1, 2, 3, 4, 5]
    assert [r["loss"] for r in resumed_losses] == pytest.approx(
        [r["loss"] for r in expected_losses], abs=1e-6
    )


def test_saved_pipeline_loads_and_renders(dataset: Path, trained: Path) -> None:
    pipeline = AnimeGamerPipeline.from_pretrained(trained / "decoder")
    transformer, encoder = pipeline.transformer, pipeline.shot_encoder
    assert not any("lora" in name for name in transformer.state_dict())
    torch.testing.assert_close(transformer.uncond_representation, encoder.unconditional())
    assert list(transformer.config.motion_scopes) == pytest.approx(levels_of(dataset).values)
    features = load_file(dataset / features_path("film-a", "film-a-000000000"))
    representation = encoder.project(
        features["text_features"][None], features["image_features"][None]
    )
    frames = pipeline(
        representation.detach(), motion_level=3, num_inference_steps=2,
        generator=torch.Generator().manual_seed(0),
    ).frames
    assert frames.shape == (1, 17, 64, 96, 3) and frames.dtype == np.uint8
    assert frames.std() > 0


def test_adapt_trains_on_the_game_state_models_predictions(
    dataset: Path, trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Phase c with a stand-in game-state model: its prediction is the target's encoder
    representation; the decoder adapts and is saved with its shot encoder."""
    out = tmp_path / "run"
    (out / "decoder").mkdir(parents=True)
    for item in (trained / "decoder").iterdir():
        (out / "decoder" / item.name).symlink_to(item, target_is_directory=item.is_dir())
    encoder = AnimeGamerPipeline.from_pretrained(trained / "decoder").shot_encoder
    calls: list[tuple[int, list[int]]] = []

    def predict(model: object, windows: list, history: list[list[torch.Tensor]]) -> torch.Tensor:
        assert model == "stand-in"
        calls.append((len(windows), [len(h) for h in history]))
        for window, shots in zip(windows, history, strict=True):
            assert len(shots) == len(window.rows) - 1
            assert all(s.shape == (226, 64) for s in shots)
        with torch.no_grad():
            targets = [load_file(dataset / w.target["features_path"]) for w in windows]
            return encoder.project(
                torch.stack([t["text_features"] for t in targets]),
                torch.stack([t["image_features"] for t in targets]),
            )

    monkeypatch.setattr(decoder_phase, "load_game_state", lambda folder, accel: "stand-in")
    monkeypatch.setattr(decoder_phase, "predicted_representations", predict)
    train(dataset, out, command="adapt")
    assert len(calls) == 2 and all(count == 2 for count, _ in calls)  # 2 steps, batch 2
    adapted = AnimeGamerPipeline.from_pretrained(out / "decoder_adapted")
    before = load_file(trained / "decoder" / "transformer" / "diffusion_pytorch_model.safetensors")
    after = adapted.transformer.state_dict()
    q = "transformer_blocks.0.attn1.to_q.weight"
    assert not torch.equal(after[q], before[q])  # the merged LoRA moved it
    torch.testing.assert_close(after["patch_embed.proj.weight"], before["patch_embed.proj.weight"])
    assert [r["step"] for r in read_losses(losses_path(out, "adapt"))] == [1, 2]
    torch.testing.assert_close(
        adapted.transformer.uncond_representation, adapted.shot_encoder.unconditional()
    )


def test_a_fresh_run_refuses_a_folder_with_checkpoints(
    dataset: Path, trained: Path, capsys: pytest.CaptureFixture
) -> None:
    argv = ["decoder", "--dataset", str(dataset), "--out", str(trained), "--config",
            str(TINY_RECIPE)]
    assert main(argv) == 2
    assert "holds checkpoints: pass --resume" in capsys.readouterr().err


def test_bad_recipe_fields_are_named(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    recipe = tmp_path / "bad.yaml"
    text = TINY_RECIPE.read_text().replace(
        "lora_rank: 4\n  lora_alpha",
        "lora_rank: -1\n  lora_alpha",
    )
    recipe.write_text(text + "learning_rate: 3\n")
    with pytest.raises(RecipeError) as error:
        load_recipe(recipe)
    message = str(error.value)
    assert str(recipe) in message
    assert "decoder.lora_rank" in message and "learning_rate" in message
    both = {"pipeline": str(tmp_path), "tiny": {}}
    recipe.write_text(json.dumps({"decoder": {"init": both, "warmup_steps": 1, "joint_steps": 1}}))
    with pytest.raises(RecipeError, match=r"decoder\.init: .*exactly one"):
        load_recipe(recipe)
    code = main(["decoder", "--dataset", str(tmp_path), "--out", str(tmp_path / "o"),
                 "--config", str(recipe)])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "decoder.init" in err and "\n" not in err


def scheduled_rates(schedule: str, start: int, total: int = 4, lr: float = 2e-3) -> list[float]:
    """The rate of each optimizer step from `start` under `lr_scheduler`, on an optimizer
    whose groups hold another rate (as a loaded checkpoint's do)."""
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=0.123)
    scheduler = lr_scheduler(optimizer, schedule, lr, start, total)
    rates = []
    for _ in range(start, total):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return rates


def test_cosine_schedule_decays_from_the_full_rate_towards_zero() -> None:
    """A half cosine over the phase's 4 steps from 2e-3 (the values written out), the same
    curve from step 2 (a resumed run, or the joint stage's new optimizer), a constant rate."""
    whole = [2e-3, 1.7071067811865475e-3, 1e-3, 2.9289321881345254e-4]
    assert scheduled_rates("cosine", 0) == pytest.approx(whole, rel=1e-12)
    assert scheduled_rates("cosine", 2) == pytest.approx(whole[2:], rel=1e-12)
    assert scheduled_rates("constant", 1) == [2e-3, 2e-3, 2e-3]
    with pytest.raises(ValueError, match="unknown lr schedule 'linear'"):
        scheduled_rates("linear", 0)


def test_every_step_of_a_phase_runs_at_its_scheduled_rate(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Phase a with `lr_schedule: cosine`: warm-up and joint steps follow one cosine over the
    phase's 5 steps; a run resumed after step 3 continues it."""
    recipe = tmp_path / "cosine.yaml"
    recipe.write_text(TINY_RECIPE.read_text().replace(
        "  lr: 1.0e-3\n  batch_size: 2\n  lora_rank: 4\n  lora_alpha: 4\n  cfg_dropout",
        "  lr: 1.0e-3\n  lr_schedule: cosine\n  batch_size: 2\n  lora_rank: 4\n"
        "  lora_alpha: 4\n  cfg_dropout",
    ))
    assert load_recipe(recipe).decoder.lr_schedule == "cosine"
    rates: list[float] = []
    original = torch.optim.AdamW.step

    def recording(optimizer: torch.optim.AdamW, *args: object, **kwargs: object) -> object:
        rates.append(optimizer.param_groups[0]["lr"])
        return original(optimizer, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", recording)
    argv = ["decoder", "--dataset", str(dataset), "--out", str(tmp_path / "run"),
            "--config", str(recipe)]
    assert main([*argv, "--max-steps", "3"]) == 0
    assert main([*argv, "--resume"]) == 0
    expected = [1e-3, 9.045084971874737e-4, 6.545084971874737e-4, 3.454915028125263e-4,
                9.549150281252633e-5]
    assert rates == pytest.approx(expected, rel=1e-12)


def test_motion_weights_follow_how_far_each_position_moves_over_the_shot() -> None:
    latents = torch.zeros(1, 5, 2, 3, 4)  # [B, T, C, H, W]
    latents[0, :, 1, 0, 0] = torch.tensor([0.0, 0.0, 0.0, 0.0, 5.0])  # moves far: saturates
    latents[0, :, 0, 2, 3] = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.25])  # moves 0.2 from its mean
    latents[0, :, :, 1, 1] = 3.0  # bright but still
    weights = decoder_model.motion_weights(latents, 4.0)
    assert weights.shape == (1, 5, 1, 3, 4)
    expected = torch.ones(1, 5, 1, 3, 4)
    expected[0, :4, 0, 0, 0] = 5.0  # |0 - 1| ≥ 0.5 → the whole weight
    expected[0, 4, 0, 0, 0] = 5.0  # |5 - 1|
    expected[0, :4, 0, 2, 3] = 1 + 4 * 0.05 / 0.5
    expected[0, 4, 0, 2, 3] = 1 + 4 * 0.2 / 0.5
    torch.testing.assert_close(weights, expected)
    assert torch.equal(decoder_model.motion_weights(latents, 0.0), torch.ones(1, 5, 1, 3, 4))


def test_the_motion_weighted_loss_counts_errors_where_the_shot_moves_more() -> None:
    """A network that is exact everywhere but one position, off by 1 in every channel there:
    the plain loss is that position's share of the latent; the weighted loss its share of the
    weights."""
    scheduler = CogVideoXDPMScheduler(**scheduler_config())
    latents = torch.zeros(2, 5, 4, 3, 4)
    latents[:, 4, :, 0, 0] = 5.0  # only (0, 0) moves, at least 0.5 from its mean at every step
    alphas = scheduler.alphas_cumprod

    def off_at(position: tuple[int, int]) -> Callable[..., torch.Tensor]:
        def network(noisy: torch.Tensor, timesteps: torch.Tensor, scopes: torch.Tensor,
                    **condition: torch.Tensor) -> torch.Tensor:
            a = alphas[timesteps].sqrt()[:, None, None, None, None]
            s = (1 - alphas[timesteps]).sqrt()[:, None, None, None, None]
            noise = (noisy - a * latents) / s
            prediction = a * noise - s * latents  # the velocity target itself
            prediction[:, :, :, position[0], position[1]] += 1.0
            return prediction
        return network

    def loss(position: tuple[int, int], weight: float) -> float:
        generator = torch.Generator().manual_seed(0)
        return decoder_model.v_prediction_loss(
            off_at(position), scheduler, latents, torch.ones(2), generator, weight
        ).item()

    assert loss((0, 0), 0.0) == pytest.approx(1 / 12, rel=1e-4)
    assert loss((2, 3), 0.0) == pytest.approx(1 / 12, rel=1e-4)
    assert loss((0, 0), 9.0) == pytest.approx(10 / 21, rel=1e-4)  # 10 of 11 + 10 weight
    assert loss((2, 3), 9.0) == pytest.approx(1 / 21, rel=1e-4)


def test_the_recipes_motion_weight_reaches_the_decoder_loss(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe = tmp_path / "weighted.yaml"
    recipe.write_text(TINY_RECIPE.read_text().replace(
        "  lr: 1.0e-3\n  batch_size: 2\n  lora_rank: 4\n  lora_alpha: 4\n  cfg_dropout",
        "  lr: 1.0e-3\n  motion_weight: 9.0\n  batch_size: 2\n  lora_rank: 4\n"
        "  lora_alpha: 4\n  cfg_dropout",
    ))
    assert load_recipe(recipe).decoder.motion_weight == 9.0
    weights: list[object] = []
    original = decoder_model.v_prediction_loss

    def recording(*args: object, **kwargs: torch.Tensor) -> torch.Tensor:
        weights.append(args[5])
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(decoder_phase, "v_prediction_loss", recording)
    argv = ["decoder", "--dataset", str(dataset), "--out", str(tmp_path / "run"),
            "--config", str(recipe), "--max-steps", "1"]
    assert main(argv) == 0
    assert weights == [9.0]
