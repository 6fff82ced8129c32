"""Quantized presets: int8 loading through the libraries' configs, its fidelity on the Nano
models (CPU), and a clear one-line refusal when a preset's package is missing."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from animegamer.__main__ import main
from animegamer.characters.conversion.character import shared_components
from animegamer.evaluate.quantized import (
    decoder_step_relative_error,
    game_state_fidelity,
    random_windows,
)
from animegamer.models.game_state import GameStateModel
from animegamer.paths import DEFAULT_NANO_DIR
from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline
from animegamer.serving.devices import CPU_PLACEMENT
from animegamer.serving.loading import build_preview_directory, load_character_models
from animegamer.serving.presets import get_preset
from animegamer.serving.quantization import Quantization
from animegamer.serving.settings import Settings, SettingsError

pytestmark = pytest.mark.usefixtures("one_torch_thread")
torchao = pytest.importorskip("torchao", reason="torchao (requirements-test.txt) is not installed")
INT8 = Quantization(language_model="int8", transformer="int8")


NANO_QIQI = DEFAULT_NANO_DIR / "qiqi"
"""A trained character the repository ships (the fidelity is measured on trained weights)."""


def _is_int8(weight: torch.Tensor) -> bool:
    return isinstance(weight, torchao.quantization.Int8Tensor)


def test_quantized_presets_say_what_they_quantize_and_place():
    consumer, tiny = get_preset("consumer"), get_preset("tiny-vram")
    assert consumer.quantization == INT8
    assert not consumer.offload and consumer.vae_tiling
    assert tiny.quantization == Quantization(language_model="nf4", transformer="int8")
    assert tiny.offload and tiny.vae_tiling
    assert get_preset("quality").quantization.packages() == ()
    assert tiny.quantization.packages() == ("bitsandbytes", "torchao")
    # consumer keeps its models whole on the GPU, tiny-vram offloads, the others as configured
    assert consumer.low_vram("auto") == "off" and tiny.low_vram("off") == "on"
    assert get_preset("quality").low_vram("auto") == "auto"


def test_int8_loading_quantizes_the_linear_layers_only(tmp_path):
    directory = build_preview_directory(tmp_path / "character")
    models = load_character_models(directory, CPU_PLACEMENT, INT8)
    llm = models.game_state.language_model
    assert _is_int8(llm.model.layers[0].self_attn.q_proj.weight)
    assert _is_int8(llm.model.layers[-1].mlp.down_proj.weight)
    assert not _is_int8(llm.model.embed_tokens.weight)
    assert not _is_int8(models.game_state.output_resampler.proj[0].weight)
    transformer = models.decoder.transformer
    assert _is_int8(transformer.transformer_blocks[0].attn1.to_q.weight)
    assert _is_int8(transformer.transformer_blocks[-1].ff.net[2].weight)
    assert not any(_is_int8(p) for p in models.decoder.vae.parameters())


def test_int8_game_state_plays_like_the_unquantized_model():
    """Issue 41's bar: the same state tokens on at least 95 of 100 random windows, and the
    representation's cosine similarity at least 0.99 on every one (measured: 100/100, worst
    cosine 0.99997, on the Nano model)."""
    reference = GameStateModel.from_pretrained(NANO_QIQI)
    quantized = GameStateModel.from_pretrained(
        NANO_QIQI, quantization_config=INT8.language_model_config(torch.float32)
    )
    assert _is_int8(quantized.language_model.model.layers[0].mlp.up_proj.weight)
    windows = random_windows(100, reference.representation_dim, seed=41, max_window=3)
    assert sum(len(w.history) > 0 for w in windows) > 50  # most windows carry a history
    fidelity = game_state_fidelity(reference, quantized, windows)
    assert fidelity.equal_state_tokens >= 95, fidelity
    assert fidelity.min_cosine >= 0.99, fidelity


def test_int8_decoder_step_stays_close():
    """One transformer step of the Nano decoder in int8: relative error 0.006 measured (see
    benchmarks/quantized.py); 0.02 bounds it."""
    kwargs = {"dtype": torch.float32, "shot_encoder": None,
              **shared_components(NANO_QIQI, torch.float32)}
    reference = AnimeGamerPipeline.from_pretrained(NANO_QIQI, **kwargs).transformer
    quantized = AnimeGamerPipeline.from_pretrained(
        NANO_QIQI, quantization_config=INT8.decoder_config(), **kwargs
    ).transformer
    error = decoder_step_relative_error(reference, quantized)
    assert 0.0 < error < 0.02


@pytest.fixture
def without_torchao(monkeypatch):
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == "torchao" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


@pytest.mark.usefixtures("without_torchao")
def test_a_preset_without_its_package_is_refused_in_one_line():
    with pytest.raises(SettingsError) as error:
        Settings.from_env({"ANIMEGAMER_PRESET": "consumer"})
    message = str(error.value)
    assert "\n" not in message
    assert "'consumer' needs the package torchao" in message
    assert "requirements-quant.txt" in message
    assert Settings.from_env({"ANIMEGAMER_PRESET": "low-vram"}).preset == "low-vram"


@pytest.mark.usefixtures("without_torchao")
def test_the_cli_refuses_such_a_preset_with_exit_two(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ANIMEGAMER_PRESET", "tiny-vram")
    code = main(["play", "--engine", "preview", "Qiqi flies", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: ANIMEGAMER_PRESET: preset 'tiny-vram'")
    assert "torchao" in err and "Traceback" not in err

