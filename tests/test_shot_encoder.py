"""The animation-shot encoder E_a: projections kept from the release, the CLIP penultimate layer,
and the pipeline's reconstruction path `encode_shot`."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from animegamer.characters.conversion.decoder import (
    build_converted_decoder,
    convert_decoder,
    convert_state_dict,
    infer_transformer_config,
    load_release_state_dict,
)
from animegamer.data.features import tiny_feature_extractor
from animegamer.models.decoder_defaults import SAT_PREFIX
from animegamer.models.shot_encoder import AnimeGamerShotEncoder, clip_pixel_values
from animegamer.models.tiny_decoder import (
    SatDecoderSizes,
    sat_decoder_state_dict,
    write_tiny_decoder_release,
)
from animegamer.models.tiny_shot_encoder import (
    spatial_position_table,
    tiny_shot_encoder,
    tiny_shot_towers,
)
from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline
from animegamer.pipelines.animegamer.tiny import save_tiny_decoder, tiny_pipeline


@pytest.fixture(scope="module")
def towers():
    return tiny_shot_towers(width=32, seed=1)


@pytest.fixture(scope="module")
def reconstruction(towers) -> AnimeGamerPipeline:
    """A tiny pipeline with a shot encoder whose representation of zeros is the pipeline's
    unconditional one, and the tiny towers."""
    pipeline = tiny_pipeline(representation_dim=64, seed=2)
    encoder = tiny_shot_encoder(towers, width=64, seed=3)
    with torch.no_grad():
        pipeline.transformer.uncond_representation.copy_(encoder.unconditional())
    pipeline.register_modules(
        shot_encoder=encoder,
        image_encoder=towers.image_encoder,
        text_encoder=towers.text_encoder,
        tokenizer=towers.tokenizer,
    )
    return pipeline


@pytest.mark.reference
def test_projections_and_transformer_reproduce_the_release_on_random_features(reference_dir):
    """`dit_randctx`: the release's network on random text/image features, both CFG rows, t=500."""
    folder = reference_dir / "decoder"
    inputs = load_file(folder / "decoder_inputs.safetensors")
    expected = load_file(folder / "decoder_outputs.safetensors")["dit_randctx"]
    transformer, encoder = build_converted_decoder(load_release_state_dict(folder / "release"))
    with torch.no_grad():
        representation = encoder.project(inputs["context_rand"], inputs["ip_context_rand"])
        out = transformer(
            hidden_states=inputs["x"],
            encoder_hidden_states=representation,
            timestep=inputs["timesteps_mid"],
            ofs=inputs["flow_idx"],
            return_dict=False,
        )[0]
    assert representation.shape == (2, 226, 64)
    diff = (out - expected).abs().max().item()
    assert diff <= 1e-4, f"dit_randctx max abs diff {diff:.3e}"
    # the features matter: zero features give a clearly different output
    with torch.no_grad():
        zeros = transformer(
            hidden_states=inputs["x"],
            encoder_hidden_states=transformer.uncond_representation.expand(2, -1, -1),
            timestep=inputs["timesteps_mid"],
            ofs=inputs["flow_idx"],
            return_dict=False,
        )[0]
    assert (zeros - expected).abs().max().item() > 1e-2


def test_converter_keeps_the_projections(tmp_path):
    release = write_tiny_decoder_release(tmp_path / "release", seed=5)
    out = convert_decoder(release, tmp_path / "out")
    source = load_release_state_dict(release)
    encoder = AnimeGamerShotEncoder.from_pretrained(out / "shot_encoder")
    torch.testing.assert_close(
        encoder.image_proj[2].weight, source["mixins.patch_embed.ip_proj.2.weight"]
    )
    torch.testing.assert_close(
        encoder.text_norm.bias, source["mixins.patch_embed.txt_mix_layer_norm.bias"]
    )
    assert (encoder.config.text_width, encoder.config.image_width) == (4096, 768)
    shutil.copytree(save_tiny_decoder(tmp_path / "tiny") / "vae", out / "vae")
    pipeline = AnimeGamerPipeline.from_pretrained(out)
    assert isinstance(pipeline.shot_encoder, AnimeGamerShotEncoder)
    with torch.no_grad():
        torch.testing.assert_close(
            pipeline.shot_encoder.unconditional(), pipeline.transformer.uncond_representation
        )
    # play does not need it: the engine can leave it out
    assert AnimeGamerPipeline.from_pretrained(out, shot_encoder=None).shot_encoder is None


def test_full_size_shot_encoder_on_meta():
    state = {
        k[len(SAT_PREFIX) :]: v
        for k, v in sat_decoder_state_dict(SatDecoderSizes(), device="meta").items()
    }
    converted = convert_state_dict(state, infer_transformer_config(state)["num_layers"])
    with torch.device("meta"):
        encoder = AnimeGamerShotEncoder()
    assert {k: tuple(v.shape) for k, v in converted.shot_encoder.items()} == {
        k: tuple(v.shape) for k, v in encoder.state_dict().items()
    }
    assert encoder.text_proj[0].weight.shape == (1920, 4096)
    assert encoder.image_proj[0].weight.shape == (1920, 768)
    text, image = torch.zeros(1, 30, 4096, device="meta"), torch.zeros(1, 196, 768, device="meta")
    assert encoder.project(text, image).shape == (1, 226, 1920)


def test_project_checks_shapes(towers):
    encoder = tiny_shot_encoder(towers, width=64)
    text, image = torch.randn(2, 30, 32), torch.randn(2, 196, 32)
    assert encoder.project(text, image).shape == (2, 226, 64)
    with pytest.raises(ValueError, match=r"text_features must be \[B, 30, 32\]"):
        encoder.project(torch.randn(2, 29, 32), image)
    with pytest.raises(ValueError, match=r"image_features must be \[B, 196, 32\]"):
        encoder.project(text, torch.randn(2, 197, 32))
    with pytest.raises(ValueError, match="hold 2 and 1 shots"):
        encoder.project(text, image[:1])


def _open_clip_penultimate(model, pixel_values: torch.Tensor) -> torch.Tensor:
    """OpenCLIP's `VisionTransformer` written out from the weights: patch conv, CLS, positions,
    `ln_pre`, then 11 of the 12 residual blocks (pre-LN attention and MLP), no `ln_post`."""
    vision = getattr(model, "vision_model", model)  # transformers 5 flattened the wrapper
    config = model.config
    width, heads = config.hidden_size, config.num_attention_heads
    emb = vision.embeddings
    x = F.conv2d(pixel_values, emb.patch_embedding.weight, stride=config.patch_size)
    x = x.flatten(2).transpose(1, 2)
    cls = emb.class_embedding.expand(x.shape[0], 1, width)
    x = torch.cat([cls, x], dim=1) + emb.position_embedding.weight
    x = F.layer_norm(x, (width,), vision.pre_layrnorm.weight, vision.pre_layrnorm.bias)
    for block in vision.encoder.layers[: config.num_hidden_layers - 1]:
        h = F.layer_norm(x, (width,), block.layer_norm1.weight, block.layer_norm1.bias)
        attn = block.self_attn
        in_weight = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
        in_bias = torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias])
        h, _ = F.multi_head_attention_forward(
            h.transpose(0, 1), h.transpose(0, 1), h.transpose(0, 1), width, heads,
            in_weight, in_bias, None, None, False, 0.0,
            attn.out_proj.weight, attn.out_proj.bias, need_weights=False,
        )
        x = x + h.transpose(0, 1)
        h = F.layer_norm(x, (width,), block.layer_norm2.weight, block.layer_norm2.bias)
        x = x + block.mlp.fc2(F.gelu(block.mlp.fc1(h)))
    return x


def test_penultimate_layer_is_eleven_of_twelve_blocks_without_ln_post():
    towers = tiny_shot_towers(width=32, seed=4, layers=12)
    frames = np.random.default_rng(0).integers(0, 256, (2, 48, 72, 3), dtype=np.uint8)
    pixels = clip_pixel_values(frames)
    assert pixels.shape == (2, 3, 224, 224)
    features = towers.image_features(frames)
    with torch.no_grad():
        expected = _open_clip_penultimate(towers.image_encoder, pixels)
    assert features.shape == (2, 196, 32)
    torch.testing.assert_close(features, expected[:, 1:], rtol=1e-5, atol=1e-5)
    # and it is not the last layer, nor the pooled/post-LN output
    with torch.no_grad():
        last = towers.image_encoder(pixel_values=pixels).last_hidden_state[:, 1:]
    assert (last - features).abs().max().item() > 1e-3


def test_clip_pixels_resize_straight_to_224():
    """The 2:3 frame is squeezed, not cropped: a left-to-right ramp stays a full ramp."""
    ramp = np.tile(np.linspace(0, 255, 720).astype(np.uint8)[None, :, None], (480, 1, 3))
    pixels = clip_pixel_values(ramp[None])
    row = pixels[0, 0, 112]
    assert row[0] < row[-1]
    assert row[0].item() == pytest.approx((0 - 0.48145466) / 0.26862954, abs=0.05)
    assert row[-1].item() == pytest.approx((1 - 0.48145466) / 0.26862954, abs=0.05)
    with pytest.raises(ValueError, match="uint8"):
        clip_pixel_values(ramp[None].astype(np.float32))


def test_encode_shot_is_the_reconstruction_path(reconstruction, towers):
    frames = np.random.default_rng(1).integers(0, 256, (2, 17, 48, 72, 3), dtype=np.uint8)
    representation = reconstruction.encode_shot(frames, ["softly talk", "quickly run"])
    expected = reconstruction.shot_encoder.project(
        towers.text_features(["softly talk", "quickly run"]), towers.image_features(frames[:, 0])
    )
    assert representation.shape == (2, 226, 64)
    torch.testing.assert_close(representation, expected)
    # one text for all shots; the text and the frame both change the representation
    same = reconstruction.encode_shot(frames, "softly talk")
    torch.testing.assert_close(same[0], representation[0])
    assert (same[1] - representation[1]).abs().max().item() > 1e-4
    other_frame = reconstruction.encode_shot(frames[::-1].copy(), ["softly talk", "quickly run"])
    assert (other_frame[0] - representation[0]).abs().max().item() > 1e-4
    # the decoder renders it
    video = reconstruction(
        representation[:1],
        motion_level=3,
        num_inference_steps=2,
        generator=torch.Generator().manual_seed(0),
    ).frames
    assert video.shape[:2] == (1, 17) and video.dtype == np.uint8


def test_encode_shot_needs_the_towers(towers):
    pipeline = tiny_pipeline(representation_dim=64)
    frames = np.zeros((1, 48, 72, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match="shot_encoder, image_encoder, text_encoder, tokenizer"):
        pipeline.encode_shot(frames, "softly talk")
    pipeline.register_modules(shot_encoder=tiny_shot_encoder(towers, width=64))
    with pytest.raises(ValueError, match="needs the pipeline's image_encoder"):
        pipeline.encode_shot(frames, "softly talk")


def test_pipeline_round_trip_with_shot_encoder(tmp_path: Path, reconstruction, towers):
    reconstruction.save_pretrained(tmp_path / "pipe")
    assert (tmp_path / "pipe" / "shot_encoder" / "config.json").is_file()
    loaded = AnimeGamerPipeline.from_pretrained(
        tmp_path / "pipe",
        image_encoder=towers.image_encoder,
        text_encoder=towers.text_encoder,
        tokenizer=towers.tokenizer,
    )
    frames = np.random.default_rng(2).integers(0, 256, (1, 48, 72, 3), dtype=np.uint8)
    torch.testing.assert_close(
        loaded.encode_shot(frames, "gently wave hand"),
        reconstruction.encode_shot(frames, "gently wave hand"),
    )


def test_tiny_feature_extractor_has_the_real_token_counts():
    extractor = tiny_feature_extractor()
    frames = np.zeros((3, 60, 90, 3), dtype=np.uint8)
    assert extractor.image_features(frames).shape == (3, 196, 32)
    assert extractor.text_features(["a", "b", "c"]).shape == (3, 30, 32)


def test_tiny_image_features_say_where_a_patch_is():
    """Moving a 16-px patch elsewhere in the 224-px image changes its token by much of what
    different contents do (the default random positions changed it by under 5 %), and the
    position table gives every patch its own row."""
    table = spatial_position_table(14, 32)
    assert table.shape == (197, 32) and not table[0].any()
    assert len({tuple(row.tolist()) for row in table[1:]}) == 196
    extractor = tiny_feature_extractor()
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (1, 224, 224, 3), dtype=np.uint8)
    patches = image.reshape(14, 16, 14, 16, 3).transpose(0, 2, 1, 3, 4).reshape(196, 16, 16, 3)
    order = rng.permutation(196)
    shuffled = patches[order].reshape(14, 14, 16, 16, 3).transpose(0, 2, 1, 3, 4)
    features = extractor.image_features(image)[0].float()
    moved = extractor.image_features(shuffled.reshape(1, 224, 224, 3))[0].float()
    scale = features.norm(dim=-1).mean()
    position_change = (moved - features[order]).norm(dim=-1).mean() / scale
    content_change = (features[rng.permutation(196)] - features).norm(dim=-1).mean() / scale
    assert position_change > 0.4 * content_change
