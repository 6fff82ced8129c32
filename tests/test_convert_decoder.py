"""Release (SAT) decoder → AnimeGamerTransformer3DModel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from animegamer.convert.decoder import (
    PREFIX,
    build_converted_transformer,
    check_state_dict,
    convert_decoder,
    convert_state_dict,
    infer_transformer_config,
    load_release_state_dict,
)
from animegamer.convert.errors import ConversionError
from animegamer.models.decoder import AnimeGamerTransformer3DModel
from animegamer.models.tiny_decoder import (
    TINY_SAT_SIZES,
    SatDecoderSizes,
    sat_decoder_state_dict,
    write_tiny_decoder_release,
)

TINY_LATENT = (8, 12)
CHECKPOINT = "mp_rank_00_model_states.pt"


@pytest.fixture(scope="module")
def reference_model(reference_dir: Path) -> AnimeGamerTransformer3DModel:
    state = load_release_state_dict(reference_dir / "decoder" / "release")
    return build_converted_transformer(state)


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
    target = convert_decoder(release, tmp_path / "out")  # latent size read from the table
    assert target == tmp_path / "out" / "transformer"
    model = AnimeGamerTransformer3DModel.from_pretrained(target)
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


def test_unconverted_key_is_named(tmp_path):
    state = {k[len(PREFIX) :]: v for k, v in sat_decoder_state_dict(TINY_SAT_SIZES).items()}
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
    state = {k[len(PREFIX) :]: v for k, v in sat_decoder_state_dict(TINY_SAT_SIZES).items()}
    state["mixins.pos_embed.pos_embedding"] = torch.zeros(1, 226 + 5 * 7, 64)
    with pytest.raises(ConversionError, match="pass latent_size"):
        infer_transformer_config(state)
    assert infer_transformer_config(state, latent_size=(2, 14))["sample_width"] == 14
    with pytest.raises(ConversionError, match="latest"):
        convert_decoder(tmp_path / "nowhere", tmp_path / "out")
    broken = tmp_path / "broken"
    (broken / "7").mkdir(parents=True)
    (broken / "latest").write_text("7\n")
    torch.save({"module": {"other.weight": torch.zeros(1)}}, broken / "7" / CHECKPOINT)
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
    state = {k[len(PREFIX) :]: v for k, v in sat_decoder_state_dict(sizes, device="meta").items()}
    assert len(state) == 30 * 26 + 33  # per layer 26 keys (LoRA included), 33 others
    config = infer_transformer_config(state)
    assert (config["sample_height"], config["sample_width"]) == (60, 90)
    assert config["num_layers"] == 30 and config["num_attention_heads"] == 30
    assert config["attention_head_dim"] == 64 and config["time_embed_dim"] == 512
    converted = convert_state_dict(state, config["num_layers"])
    with torch.device("meta"):
        model = AnimeGamerTransformer3DModel(**config)
    check_state_dict(model.state_dict(), converted)  # raises on any missing/unexpected key
    assert converted["uncond_representation"].shape == (226, 1920)
    converted.pop("proj_out.bias")
    with pytest.raises(ConversionError, match=r"missing: proj_out\.bias"):
        check_state_dict(model.state_dict(), converted)
