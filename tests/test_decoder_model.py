"""AnimeGamerTransformer3DModel: structure, config, save/load, full-size shape on `meta`; the
pipeline's save/load round trip."""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest
import torch
from diffusers import CogVideoXTransformer3DModel

from animegamer.models.tiny_decoder import tiny_transformer_config
from animegamer.models.transformers.transformer_animegamer import (
    DEFAULT_MOTION_SCOPES,
    AnimeGamerTransformer3DModel,
    motion_scope,
)
from animegamer.models.transformers.transformer_nano import NanoTransformer3DModel
from animegamer.pipelines.animegamer.model_index import write_model_index
from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline
from animegamer.pipelines.animegamer.tiny import save_tiny_decoder, tiny_pipeline


@pytest.fixture(scope="module")
def tiny_model() -> AnimeGamerTransformer3DModel:
    torch.manual_seed(0)
    model = AnimeGamerTransformer3DModel(**tiny_transformer_config(64)).eval()
    model.uncond_representation.normal_()
    return model


def _run(model: AnimeGamerTransformer3DModel, ofs: float) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(2, 5, 16, 8, 12, generator=generator)
    context = torch.randn(2, 226, 64, generator=generator)
    with torch.no_grad():
        return model(
            hidden_states=x,
            encoder_hidden_states=context,
            timestep=torch.tensor([999, 999]),
            ofs=torch.tensor([ofs, ofs]),
            return_dict=False,
        )[0]


def _public(config) -> dict:
    return {k: v for k, v in config.items() if not k.startswith("_")}


def test_structure_matches_the_design(tiny_model):
    assert isinstance(tiny_model.patch_embed.text_proj, torch.nn.Identity)
    assert tiny_model.norm_out.norm.eps == 1e-6
    assert tiny_model.norm_final.eps == 1e-5
    assert tiny_model.transformer_blocks[0].norm1.norm.eps == 1e-5
    assert tiny_model.transformer_blocks[0].attn1.norm_q.eps == 1e-6
    assert tiny_model.ofs_embedding.linear_1.in_features == 64
    assert tiny_model.ofs_embedding.linear_2.out_features == 32
    assert tiny_model.ofs_proj.flip_sin_to_cos and tiny_model.ofs_proj.downscale_freq_shift == 0
    assert "uncond_representation" in tiny_model.state_dict()
    assert tiny_model.uncond_representation.shape == (226, 64)
    assert "pos_embedding" not in " ".join(tiny_model.state_dict())


def test_forward_shape_and_motion_scope_matters(tiny_model):
    # flow_embed's last layer is random here (zero-initialised only in the original's training)
    slow, fast = _run(tiny_model, 0.5), _run(tiny_model, 40.0)
    assert slow.shape == (2, 5, 16, 8, 12)
    assert torch.isfinite(slow).all()
    assert (slow - fast).abs().max() > 1e-4


def test_save_pretrained_round_trip(tiny_model, tmp_path):
    tiny_model.save_pretrained(tmp_path)
    loaded = AnimeGamerTransformer3DModel.from_pretrained(tmp_path).eval()
    assert _public(loaded.config) == _public(tiny_model.config)
    assert loaded.config.motion_scopes == list(DEFAULT_MOTION_SCOPES)
    assert "text_embed_dim" not in loaded.config and "ofs_embed_dim" not in loaded.config
    torch.testing.assert_close(loaded.uncond_representation, tiny_model.uncond_representation)
    torch.testing.assert_close(_run(loaded, 5.0), _run(tiny_model, 5.0), rtol=0, atol=0)


@pytest.mark.parametrize(("kind", "aids"), [(AnimeGamerTransformer3DModel, {}),
                                           (NanoTransformer3DModel, {"reference_channels": 8})])
def test_the_config_holds_the_subclass_arguments_only(kind: type, aids: dict[str, int]):
    """The parent's __init__ runs through `super()` and records its own arguments too; the
    config keeps exactly this class's, with the input channels before the spatial reference's."""
    model = kind(**{**tiny_transformer_config(64), **aids})
    arguments = set(inspect.signature(kind.__init__).parameters) - {"self"}
    assert set(_public(model.config)) == arguments
    assert model.config.in_channels == 16
    assert model.patch_embed.proj.in_channels == 16 + aids.get("reference_channels", 0)


def test_the_release_class_carries_none_of_nanos_aids():
    release = set(inspect.signature(AnimeGamerTransformer3DModel.__init__).parameters)
    nano = set(inspect.signature(NanoTransformer3DModel.__init__).parameters)
    assert nano - release == {"motion_scope_scale", "noise_correlation", "reference_channels",
                             "scene_channels"}


def test_motion_scope_table():
    config = tiny_transformer_config(64)
    model = AnimeGamerTransformer3DModel(**{**config, "motion_scopes": [0.5, 2.5, 10, 15, 40]})
    assert [motion_scope(model, level) for level in range(1, 6)] == [0.5, 2.5, 10.0, 15.0, 40.0]
    assert motion_scope(model.config, 3) == 10.0
    assert motion_scope(model, np.int64(2)) == 2.5
    assert motion_scope({"motion_scopes": DEFAULT_MOTION_SCOPES}, 4) == 20.0
    for bad in (0, 6, -1, 2.0, True):
        with pytest.raises(ValueError, match="motion level"):
            motion_scope(model, bad)
    with pytest.raises(ValueError, match="motion_scopes"):
        AnimeGamerTransformer3DModel(**{**config, "motion_scopes": [1, 2, 3]})


def test_full_size_on_meta_has_the_2b_parameter_count():
    with torch.device("meta"):
        model = AnimeGamerTransformer3DModel()
        stock = CogVideoXTransformer3DModel(sample_frames=17)
    count = sum(p.numel() for p in model.parameters())
    text_proj = 4096 * 1920 + 1920
    motion_mlp = 1920 * 512 + 512 + 512 * 512 + 512
    assert count == sum(p.numel() for p in stock.parameters()) - text_proj + motion_mlp
    assert count == 1_687_163_840
    assert model.uncond_representation.shape == (226, 1920)
    assert (model.config.num_layers, model.config.num_attention_heads) == (30, 30)
    assert (model.config.sample_height, model.config.sample_width) == (60, 90)
    assert model.config.sample_frames == 17


def test_pipeline_save_pretrained_round_trip(tmp_path):
    pipeline = tiny_pipeline(seed=3)
    pipeline.save_pretrained(tmp_path / "saved")
    index = json.loads((tmp_path / "saved" / "model_index.json").read_text())
    assert index["_class_name"] == "AnimeGamerPipeline"
    assert index["transformer"] == [
        "animegamer.models.transformers.transformer_animegamer", "AnimeGamerTransformer3DModel"
    ]
    assert index["shot_encoder"] == [None, None]
    assert sorted(p.name for p in (tmp_path / "saved").iterdir()) == [
        "model_index.json", "scheduler", "transformer", "vae"
    ]
    # the converter writes the same index without a pipeline at hand
    written = write_model_index(tmp_path / "written")
    assert json.loads(written.read_text()) == index

    loaded = AnimeGamerPipeline.from_pretrained(tmp_path / "saved")
    assert loaded.shot_encoder is None
    # low-VRAM offload walks the components a folder has, in this order
    assert loaded.model_cpu_offload_seq.split("->")[-2:] == ["transformer", "vae"]
    for name in ("transformer", "vae", "scheduler"):
        configs = [_public(getattr(p, name).config) for p in (loaded, pipeline)]
        assert json.dumps(configs[0], sort_keys=True) == json.dumps(configs[1], sort_keys=True)
    for name in ("transformer", "vae"):
        expected = getattr(pipeline, name).state_dict()
        for key, value in getattr(loaded, name).state_dict().items():
            torch.testing.assert_close(value, expected[key], rtol=0, atol=0, msg=key)
    transformer = AnimeGamerTransformer3DModel.from_pretrained(tmp_path / "saved" / "transformer")
    torch.testing.assert_close(
        transformer.uncond_representation, pipeline.transformer.uncond_representation
    )
    representation = torch.randn(1, 226, 64, generator=torch.Generator().manual_seed(2))
    frames = [
        p(representation, 3, num_inference_steps=2, generator=torch.Generator().manual_seed(4))
        .frames
        for p in (pipeline, loaded)
    ]
    np.testing.assert_array_equal(*frames)


def test_a_nano_transformer_is_named_in_the_index_and_loads_as_itself(tmp_path):
    """A folder whose transformer is Nano's names that class in `model_index.json`, whether
    diffusers or `write_model_index` writes it, and loads back with its aids."""
    pipeline = tiny_pipeline(seed=3)
    config = {**_public(pipeline.transformer.config), "noise_correlation": 0.5,
              "reference_channels": 2}
    pipeline.transformer = NanoTransformer3DModel(**config)
    pipeline.save_pretrained(tmp_path / "saved")
    index = json.loads((tmp_path / "saved" / "model_index.json").read_text())
    assert index["transformer"] == [
        "animegamer.models.transformers.transformer_nano", "NanoTransformer3DModel"
    ]
    pipeline.transformer.save_pretrained(tmp_path / "written" / "transformer")
    assert json.loads(write_model_index(tmp_path / "written").read_text()) == index
    loaded = AnimeGamerPipeline.from_pretrained(tmp_path / "saved")
    assert type(loaded.transformer) is NanoTransformer3DModel
    assert loaded.noise_prior.correlation == 0.5
    assert loaded.transformer.reference_proj is not None


def test_pipeline_loads_in_half_precision(tmp_path):
    save_tiny_decoder(tmp_path)
    pipeline = AnimeGamerPipeline.from_pretrained(tmp_path, dtype=torch.float16)
    assert pipeline.transformer.dtype == pipeline.vae.dtype == torch.float16
    assert pipeline.dtype == torch.float16
    assert pipeline.motion_scope(3) == 5.0 and pipeline.representation_dim == 64
    assert pipeline.latent_shape(2) == (2, 5, 16, 8, 12)


def _channels_apart(model: AnimeGamerTransformer3DModel, low: float, high: float) -> int:
    """How many channels of the scope's sinusoid differ by more than 0.5 between two scopes."""
    low_embedding, high_embedding = model.ofs_proj(torch.tensor([low, high]))
    return int(((low_embedding - high_embedding).abs() > 0.5).sum())


def test_motion_scope_scale_multiplies_the_scope_before_its_sinusoid(tiny_model, tmp_path):
    config = tiny_transformer_config(64)
    scaled = NanoTransformer3DModel(**{**config, "motion_scope_scale": 100.0}).eval()
    scaled.load_state_dict(tiny_model.state_dict())
    torch.testing.assert_close(_run(scaled, 0.05), _run(tiny_model, 5.0), rtol=0, atol=1e-6)
    assert tiny_model.ofs_proj.scale == 1  # the release's conditioning
    # a world's scopes of 1..7: scaled, their sinusoids differ in many more channels
    assert _channels_apart(scaled, 1.1, 6.7) > 2 * _channels_apart(tiny_model, 1.1, 6.7)
    scaled.save_pretrained(tmp_path)
    assert NanoTransformer3DModel.from_pretrained(tmp_path).ofs_proj.scale == 100.0
    with pytest.raises(ValueError, match="motion_scope_scale"):
        NanoTransformer3DModel(**{**config, "motion_scope_scale": 0.0})
