"""Live previews: the latent → RGB map fitted against a VAE, stored with the character, and
handed to the caller while a turn denoises (the preview engine's tiny models; Nano's map)."""

from __future__ import annotations

import dataclasses
import itertools
import os

import imageio.v3 as iio
import numpy as np
import pytest
import torch
from diffusers.models.autoencoders.autoencoder_kl_cogvideox import AutoencoderKLCogVideoX

from animegamer.game.rules import make_instruction, new_session
from animegamer.models.latent_preview import (
    PREVIEW_FILE,
    ClipPreview,
    LatentPreview,
    LatentPreviewCallback,
    preview_due,
)
from animegamer.paths import DEFAULT_NANO_DIR
from animegamer.pipelines.animegamer.tiny import tiny_pipeline
from animegamer.serving.settings import Settings
from animegamer.serving.stand_ins import create_preview_engine


def _instruction():
    return make_instruction({"character": "Qiqi", "adverb": "quickly", "motion": "run",
                             "time": "day", "place": "town"})


def _smooth_images(seed: int, size: int) -> torch.Tensor:
    coarse = torch.rand(4, 3, 4, 4, generator=torch.Generator().manual_seed(seed))
    return torch.nn.functional.interpolate(coarse, size=(size, size), mode="bilinear")


def test_the_map_predicts_the_colours_the_vae_decodes():
    """On Nano's trained VAE, held-out images: the map's colour of each latent pixel is close
    to the decoded pixels' mean there, far closer than each image's mean colour is."""
    vae = AutoencoderKLCogVideoX.from_pretrained(DEFAULT_NANO_DIR / "vae").eval()
    preview = LatentPreview.load(DEFAULT_NANO_DIR / "qiqi" / PREVIEW_FILE)
    images = _smooth_images(seed=99, size=32)
    with torch.no_grad():
        latent = vae.encode((2 * images - 1)[:, :, None]).latent_dist.mean
        decoded = ((vae.decode(latent).sample[:, :, 0] + 1) / 2).clamp(0, 1)
    colour = torch.nn.functional.avg_pool2d(decoded, 4).permute(0, 2, 3, 1)  # [4, 8, 8, 3]
    scaled = latent * vae.config.scaling_factor  # the pipeline's latents: [4, C, 1, 8, 8]
    predicted = torch.stack([
        torch.from_numpy(preview.decode(shot.permute(1, 0, 2, 3))[0]) for shot in scaled
    ]).float() / 255
    error = (predicted - colour).abs().mean()
    flat = (colour - colour.mean(dim=(1, 2), keepdim=True)).abs().mean()
    assert error < 0.3 * flat, (error, flat)


def test_the_map_is_fitted_once_and_stored_with_the_character(tmp_path):
    vae = tiny_pipeline().vae
    fitted = LatentPreview.for_folder(tmp_path, vae)
    assert (tmp_path / PREVIEW_FILE).is_file()
    assert fitted.weight.shape == (3, 16) and fitted.bias.shape == (3,)
    again = LatentPreview.for_folder(tmp_path, vae=None)  # type: ignore[arg-type]
    torch.testing.assert_close(again.weight, fitted.weight, rtol=0, atol=0)
    torch.testing.assert_close(again.bias, fitted.bias, rtol=0, atol=0)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_keeps_the_map_in_memory(tmp_path):
    tmp_path.chmod(0o555)
    try:
        preview = LatentPreview.for_folder(tmp_path, tiny_pipeline().vae)
    finally:
        tmp_path.chmod(0o755)
    assert not (tmp_path / PREVIEW_FILE).exists() and preview.weight.shape == (3, 16)


def test_a_save_that_fails_keeps_the_map_in_memory(tmp_path, monkeypatch, caplog):
    def full_disk(self, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(LatentPreview, "save", full_disk)
    preview = LatentPreview.for_folder(tmp_path, tiny_pipeline().vae)
    assert preview.weight.shape == (3, 16) and not (tmp_path / PREVIEW_FILE).exists()
    assert "not saved" in caplog.text


def test_decode_gives_the_first_middle_and_last_frame():
    preview = LatentPreview(torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]),
                            torch.tensor([0.0, 0.0, 0.5]))
    latents = torch.zeros(5, 2, 2, 3)
    for frame in range(5):
        latents[frame, 0] = frame / 4
    frames = preview.decode(latents)
    assert frames.shape == (3, 2, 3, 3) and frames.dtype == np.uint8
    assert frames[:, 0, 0].tolist() == [[0, 0, 127], [127, 0, 127], [255, 0, 127]]
    assert ClipPreview(2, 8, frames).strip(scale=2).shape == (4, 18, 3)
    with pytest.raises(ValueError, match="weight"):
        LatentPreview(torch.zeros(4, 2), torch.zeros(3))


def test_previews_come_every_few_steps_never_at_the_last():
    def due(steps: int) -> list[int]:
        return [i + 1 for i in range(steps) if preview_due(i, steps)]

    assert due(8) == [2, 4, 6]
    assert due(12) == [3, 6, 9]
    assert due(50) == [12, 24, 36, 48]
    assert due(4) == [1, 2, 3] and due(1) == []


def test_the_callback_previews_the_x0_estimate_without_changing_the_clip():
    pipeline = tiny_pipeline()
    pipeline.set_progress_bar_config(disable=True)
    preview = LatentPreview.fit(pipeline.vae)
    previews: list[ClipPreview] = []
    estimates: list[torch.Tensor] = []

    def keep_estimate(pipe, i, t, tensors):
        estimates.append(tensors["pred_original_sample"].clone())
        return tensors

    representation = torch.randn(1, 226, 64, generator=torch.Generator().manual_seed(3))

    def render(callback, inputs=("latents",)):
        return pipeline(representation, 3, num_inference_steps=8, output_type="latent",
                        generator=torch.Generator().manual_seed(4),
                        callback_on_step_end=callback,
                        callback_on_step_end_tensor_inputs=list(inputs)).frames

    plain = render(keep_estimate, ("pred_original_sample",))
    previewed = render(LatentPreviewCallback(preview, previews.append))
    torch.testing.assert_close(previewed, plain, rtol=0, atol=0)
    assert [(p.step, p.num_steps) for p in previews] == [(2, 8), (4, 8), (6, 8)]
    for shown in previews:
        np.testing.assert_array_equal(shown.frames, preview.decode(estimates[shown.step - 1][0]))


@pytest.fixture(scope="module")
def preview_engine_here(tmp_path_factory):
    settings = Settings(engine="preview", output_dir=tmp_path_factory.mktemp("clips"))
    return create_preview_engine(settings)


def test_the_preview_engine_shows_the_clip_forming(preview_engine_here):
    shown: list[ClipPreview] = []
    session = new_session("Qiqi")
    played = preview_engine_here.play(session, _instruction(), seed=5, on_preview=shown.append)
    steps = preview_engine_here.num_inference_steps
    assert len(shown) >= 2 and all(p.num_steps == steps for p in shown)
    assert [p.step for p in shown] == sorted({p.step for p in shown}) and shown[-1].step < steps
    assert all(p.frames.dtype == np.uint8 and p.frames.shape[0] == 3 for p in shown)
    assert all(not np.array_equal(a.frames, b.frames) for a, b in itertools.pairwise(shown))
    # the clip is the one played without previews
    plain = preview_engine_here.play(session, _instruction(), seed=5)
    np.testing.assert_array_equal(iio.imread(played.turns[-1].clip_path),
                                  iio.imread(plain.turns[-1].clip_path))


def test_live_preview_off_shows_nothing(preview_engine_here, monkeypatch):
    monkeypatch.setattr(preview_engine_here, "live_preview", False)
    shown: list[ClipPreview] = []
    preview_engine_here.play(new_session("Qiqi"), _instruction(), seed=5, on_preview=shown.append)
    assert shown == []


def test_the_setting_turns_live_previews_off(tmp_path):
    assert Settings.from_env({}).live_preview
    assert not Settings.from_env({"ANIMEGAMER_LIVE_PREVIEW": "0"}).live_preview
    settings = dataclasses.replace(Settings(engine="preview", output_dir=tmp_path),
                                   live_preview=False)
    engine = create_preview_engine(settings)
    assert not engine.live_preview
    assert engine.models_for("Qiqi").preview is None  # nor is a map fitted
