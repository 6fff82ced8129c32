"""Release (SAT) decoder → AnimeGamerTransformer3DModel, and the safe loading of the release
checkpoint."""

from __future__ import annotations

import argparse
import builtins
import json
import os
import random
import shutil
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from animegamer.characters.conversion.decoder import (
    InertObject,
    build_converted_decoder,
    check_state_dict,
    convert_decoder,
    convert_state_dict,
    infer_transformer_config,
    load_checkpoint,
    load_release_state_dict,
)
from animegamer.characters.conversion.errors import ConversionError
from animegamer.models.decoder_defaults import RELEASE_CHECKPOINT_NAME, SAT_PREFIX
from animegamer.models.tiny_decoder import (
    TINY_SAT_SIZES,
    SatDecoderSizes,
    sat_decoder_state_dict,
    write_tiny_decoder_release,
)
from animegamer.models.transformers.transformer_animegamer import AnimeGamerTransformer3DModel
from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline
from animegamer.pipelines.animegamer.tiny import save_tiny_decoder

TINY_LATENT = (8, 12)


@pytest.fixture(scope="module")
def reference_model(reference_dir: Path) -> AnimeGamerTransformer3DModel:
    state = load_release_state_dict(reference_dir / "decoder" / "release")
    return build_converted_decoder(state)[0]


@pytest.fixture(scope="module")
def decoder_io(reference_dir: Path) -> tuple[dict, dict]:
    folder = reference_dir / "decoder"
    return (
        load_file(folder / "decoder_inputs.safetensors"),
        load_file(folder / "decoder_outputs.safetensors"),
    )


def _context(model: AnimeGamerTransformer3DModel, inputs: dict) -> torch.Tensor:
    return torch.cat([model.uncond_representation[None], inputs["aroutput"]])


@pytest.mark.reference
def test_reference_network_output(reference_model, decoder_io):
    inputs, outputs = decoder_io
    with torch.no_grad():
        out = reference_model(
            hidden_states=inputs["x"],
            encoder_hidden_states=_context(reference_model, inputs),
            timestep=inputs["timesteps"],
            ofs=inputs["flow_idx"],
            return_dict=False,
        )[0]
    diff = (out - outputs["dit_app"]).abs().max().item()
    assert diff <= 1e-5, f"dit_app max abs diff {diff:.3e}"


@pytest.mark.reference
def test_reference_patch_and_position_embedding(reference_model, decoder_io):
    inputs, outputs = decoder_io
    positions = reference_model.patch_embed.pos_embedding.float()
    assert (positions - outputs["pos_embedding"]).abs().max().item() <= 1e-6
    with torch.no_grad():
        embedded = reference_model.patch_embed(_context(reference_model, inputs), inputs["x"])
    # the reference records the patch embedding before its positions are added
    diff = (embedded - (outputs["patch_embed_app"] + outputs["pos_embedding"])).abs().max().item()
    assert diff <= 1e-5, f"patch embedding max abs diff {diff:.3e}"


@pytest.mark.reference
def test_reference_unconditional_representation(reference_model, decoder_io):
    _, outputs = decoder_io
    expected = outputs["patch_embed_app"][0, :226]
    diff = (reference_model.uncond_representation - expected).abs().max().item()
    assert diff <= 1e-6, f"uncond_representation max abs diff {diff:.3e}"


@pytest.mark.reference
def test_reference_config_inferred(reference_model, reference_dir):
    config = reference_model.config
    assert (config.num_layers, config.num_attention_heads, config.attention_head_dim) == (2, 2, 32)
    assert config.time_embed_dim == 32
    assert (config.sample_height, config.sample_width, config.sample_frames) == (8, 12, 17)


def test_convert_decoder_writes_a_loadable_transformer(tmp_path):
    release = write_tiny_decoder_release(tmp_path / "release", seed=3)
    out = convert_decoder(release, tmp_path / "out")  # latent size read from the table
    assert out == tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "model_index.json", "scheduler", "shot_encoder", "transformer"
    ]
    model = AnimeGamerTransformer3DModel.from_pretrained(out / "transformer")
    assert model.config.num_layers == 2 and model.config.motion_scopes[2] == 5.0
    assert (model.config.sample_height, model.config.sample_width) == TINY_LATENT

    source = load_release_state_dict(release)
    layer = "transformer.layers.1.attention.query_key_value."
    a, b = source[f"{layer}matrix_A.2"], source[f"{layer}matrix_B.2"]
    expected_v = source[f"{layer}original.weight"][128:] + b @ a / 64
    torch.testing.assert_close(model.transformer_blocks[1].attn1.to_v.weight, expected_v)
    modulation = source["mixins.adaln_layer.adaLN_modulations.0.1.bias"].chunk(12)
    torch.testing.assert_close(
        model.transformer_blocks[0].norm2.linear.bias, torch.cat(modulation[3:6] + modulation[9:])
    )
    torch.testing.assert_close(model.ofs_embedding.linear_2.weight, source["flow_embed.2.weight"])

    # with a VAE beside it (the character converter links CogVideoX's), the folder is a pipeline
    shutil.copytree(save_tiny_decoder(tmp_path / "tiny") / "vae", out / "vae")
    pipeline = AnimeGamerPipeline.from_pretrained(out)
    torch.testing.assert_close(
        pipeline.transformer.uncond_representation, model.uncond_representation, rtol=0, atol=0
    )
    assert pipeline.scheduler.config.snr_shift_scale == 3.0


def test_unconverted_key_is_named(tmp_path):
    state = {k[len(SAT_PREFIX) :]: v for k, v in sat_decoder_state_dict(TINY_SAT_SIZES).items()}
    state["mixins.something_new.weight"] = torch.zeros(3)
    with pytest.raises(ConversionError, match=r"model\.diffusion_model\.mixins\.something_new"):
        convert_state_dict(state, num_layers=2)
    del state["mixins.something_new.weight"], state["flow_embed.2.bias"]
    with pytest.raises(ConversionError, match=r"missing key .*flow_embed\.2\.bias"):
        convert_state_dict(state, num_layers=2)


def test_wrong_latent_size_and_layout_are_explained(tmp_path):
    release = write_tiny_decoder_release(tmp_path / "release")
    with pytest.raises(ConversionError, match="check latent_size"):
        convert_decoder(release, tmp_path / "out", latent_size=(60, 90))
    state = {k[len(SAT_PREFIX) :]: v for k, v in sat_decoder_state_dict(TINY_SAT_SIZES).items()}
    state["mixins.pos_embed.pos_embedding"] = torch.zeros(1, 226 + 5 * 7, 64)
    with pytest.raises(ConversionError, match="pass latent_size"):
        infer_transformer_config(state)
    assert infer_transformer_config(state, latent_size=(2, 14))["sample_width"] == 14
    with pytest.raises(ConversionError, match="latest"):
        convert_decoder(tmp_path / "nowhere", tmp_path / "out")
    broken = tmp_path / "broken"
    (broken / "7").mkdir(parents=True)
    (broken / "latest").write_text("7\n")
    torch.save({"module": {"other.weight": torch.zeros(1)}}, broken / "7" / RELEASE_CHECKPOINT_NAME)
    with pytest.raises(ConversionError, match="no key under"):
        convert_decoder(broken, tmp_path / "out", latent_size=TINY_LATENT)


@pytest.mark.reference
def test_synthetic_release_mirrors_the_reference_key_list(reference_dir):
    manifest = json.loads((reference_dir / "decoder" / "decoder_manifest.json").read_text())
    synthetic = sat_decoder_state_dict(TINY_SAT_SIZES)
    assert {k: list(v.shape) for k, v in synthetic.items()} == manifest["state_dict_keys"]


def test_full_size_key_mapping_on_meta():
    """The released 2B layout maps onto the full-size model with nothing missing or left over."""
    sizes = SatDecoderSizes()
    meta = sat_decoder_state_dict(sizes, device="meta")
    state = {k[len(SAT_PREFIX) :]: v for k, v in meta.items()}
    assert len(state) == 30 * 26 + 33  # per layer 26 keys (LoRA included), 33 others
    config = infer_transformer_config(state)
    assert (config["sample_height"], config["sample_width"]) == (60, 90)
    assert config["num_layers"] == 30 and config["num_attention_heads"] == 30
    assert config["attention_head_dim"] == 64 and config["time_embed_dim"] == 512
    converted = convert_state_dict(state, config["num_layers"]).transformer
    with torch.device("meta"):
        model = AnimeGamerTransformer3DModel(**config)
    check_state_dict(model.state_dict(), converted)  # raises on any missing/unexpected key
    assert converted["uncond_representation"].shape == (226, 1920)
    converted.pop("proj_out.bias")
    with pytest.raises(ConversionError, match=r"missing: proj_out\.bias"):
        check_state_dict(model.state_dict(), converted)


def _release_with(directory: Path, **extra: object) -> Path:
    """The tiny release, its checkpoint holding `extra` beside `module` (DeepSpeed/SAT state)."""
    release = write_tiny_decoder_release(directory)
    checkpoint = {"module": sat_decoder_state_dict(TINY_SAT_SIZES), **extra}
    torch.save(checkpoint, release / "1" / RELEASE_CHECKPOINT_NAME)
    return release


class _Payload:
    """Unpickling this calls `action(*args)`: what a malicious checkpoint hides."""

    def __init__(self, action, *args):
        self.action, self.args = action, args

    def __reduce__(self):
        return self.action, self.args


@pytest.mark.parametrize("attack", ["open", "system"])
def test_a_checkpoint_that_would_run_code_is_refused_without_running_it(tmp_path, attack):
    marker = tmp_path / "marker"
    if attack == "open":
        payload, name = _Payload(builtins.open, str(marker), "w"), "io.open"
    else:
        payload, name = _Payload(os.system, f"touch {marker}"), "posix.system"
    release = _release_with(tmp_path / "release", optimizer={"state": [payload]})
    checkpoint = release / "1" / RELEASE_CHECKPOINT_NAME
    if attack == "open":  # the payload is live: the full unpickler runs it
        torch.load(checkpoint, weights_only=False)["optimizer"]["state"][0].close()
        assert marker.exists()
        marker.unlink()
    with pytest.raises(ConversionError, match=rf"{name}\. Loading them could run code"):
        convert_decoder(release, tmp_path / "out", latent_size=TINY_LATENT)
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_training_state_beside_the_network_loads_and_converts(tmp_path, monkeypatch):
    deepspeed = types.ModuleType("deepspeed")

    class LossScaler:
        def __init__(self):
            self.cur_scale = 65536.0

    LossScaler.__module__, LossScaler.__qualname__ = "deepspeed", "LossScaler"
    deepspeed.LossScaler = LossScaler
    monkeypatch.setitem(sys.modules, "deepspeed", deepspeed)
    random.seed(0)
    np.random.seed(0)
    extra = {
        "args": argparse.Namespace(lr=1e-4, fp16=True, save="checkpoints", betas=(0.9, 0.95)),
        "np_rng_state": np.random.get_state(),
        "random_rng_state": random.getstate(),
        "torch_rng_state": torch.get_rng_state(),
        "scores": np.arange(6, dtype=np.float32).reshape(2, 3),
        "ratio": np.float64(0.5),
        "sparse_tensor_module_names": set(),
        "param_shapes": [{"a": torch.Size([2, 3])}],
        "loss_scaler": LossScaler(),
        "ds_version": "0.14.0",
    }
    release = _release_with(tmp_path / "release", **extra)
    monkeypatch.delitem(sys.modules, "deepspeed")  # the loader never imports it

    checkpoint = load_checkpoint(release / "1" / RELEASE_CHECKPOINT_NAME)
    assert checkpoint["args"] == extra["args"]
    assert checkpoint["random_rng_state"] == extra["random_rng_state"]
    assert checkpoint["np_rng_state"][0] == "MT19937"
    np.testing.assert_array_equal(checkpoint["np_rng_state"][1], extra["np_rng_state"][1])
    np.testing.assert_array_equal(checkpoint["scores"], extra["scores"])
    assert checkpoint["ratio"] == 0.5 and checkpoint["param_shapes"] == extra["param_shapes"]
    scaler = checkpoint["loss_scaler"]
    assert isinstance(scaler, InertObject) and scaler.state == {"cur_scale": 65536.0}
    assert "deepspeed" not in sys.modules

    out = convert_decoder(release, tmp_path / "out", latent_size=TINY_LATENT)
    assert (out / "transformer" / "config.json").is_file()


def test_a_bf16_release_converts_to_bf16_in_shards(tmp_path):
    """The output keeps the release's precision (a bf16 release is not doubled to fp32)."""
    release = tmp_path / "release"
    (release / "1").mkdir(parents=True)
    (release / "latest").write_text("1")
    state = {k: v.to(torch.bfloat16) for k, v in sat_decoder_state_dict(TINY_SAT_SIZES).items()}
    torch.save({"module": state}, release / "1" / RELEASE_CHECKPOINT_NAME)
    out = convert_decoder(release, tmp_path / "out", latent_size=TINY_LATENT)
    (weights_file,) = (out / "transformer").glob("*.safetensors")
    assert {t.dtype for t in load_file(weights_file).values()} == {torch.bfloat16}
