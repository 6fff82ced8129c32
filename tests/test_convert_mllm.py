"""Release MLLM → project layout: merged weights, files, and refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

import animegamer.characters.conversion.mllm as convert_module
from animegamer.characters.conversion.errors import ConversionError
from animegamer.characters.conversion.mllm import convert_mllm, load_checkpoint
from animegamer.models.game_state import GameStateModel
from animegamer.models.tiny_game_state import BASE_KEY_STYLES, write_tiny_mllm_release
from animegamer.models.tokens import ADDED_TOKENS, VOCAB_SIZE, load_tokenizer

PREFIX = "llm.base_model.model."
Q_PROJ = "model.layers.1.self_attn.q_proj"


@pytest.fixture(scope="module")
def tiny_release(tmp_path_factory) -> tuple[Path, Path]:
    return write_tiny_mllm_release(tmp_path_factory.mktemp("release"))


@pytest.fixture(scope="module")
def converted(tiny_release, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("converted")
    convert_mllm(*tiny_release, out)
    return out


def _expected_llm_state(release_bin: Path, base_dir: Path) -> dict[str, torch.Tensor]:
    """What the project checkpoint must hold, computed independently of the converter."""
    release = torch.load(release_bin, weights_only=True)
    base = load_file(base_dir / "model.safetensors")
    state = {}
    for key, value in release.items():
        if not key.startswith(PREFIX) or ".original_module." in key:
            continue
        name = key.removeprefix(PREFIX)
        if ".lora_A." in name:
            module = name.removesuffix(".lora_A.default.weight")
            b = release[f"{PREFIX}{module}.lora_B.default.weight"]
            w0 = base[f"{module}.weight"]
            state[f"{module}.weight"] = w0 + (32 / value.shape[0]) * (b @ value)
        elif ".modules_to_save.default." in name:
            state[name.replace(".modules_to_save.default", "")] = value
        elif name in ("model.embed_tokens.weight", "lm_head.weight"):
            state[name] = value
    return state


def _llm_weights(out: Path) -> dict[str, torch.Tensor]:
    return {k: v for f in sorted((out / "llm").glob("*.safetensors")) for k, v in
            load_file(f).items()}


@pytest.mark.parametrize("style", BASE_KEY_STYLES)
def test_merged_weights(tmp_path, style) -> None:
    release_bin, base_dir = write_tiny_mllm_release(tmp_path / "release", base_key_style=style)
    out = tmp_path / "out"
    convert_mllm(release_bin, base_dir, out)
    got = _llm_weights(out)
    expected = _expected_llm_state(release_bin, base_dir)
    assert set(got) == set(expected) and len(got) == 2 + 2 * (7 + 2) + 1
    for key, value in expected.items():
        torch.testing.assert_close(got[key], value, rtol=0, atol=1e-6, msg=key)
    assert got["model.embed_tokens.weight"].shape == (VOCAB_SIZE, 64)


def test_output_layout_loads(converted, tiny_release) -> None:
    assert sorted(p.name for p in converted.iterdir()) == [
        "game_state_config.json", "llm", "resamplers.safetensors", "tokenizer"]
    llm = AutoModelForCausalLM.from_pretrained(converted / "llm")
    assert type(llm).__name__ == "MistralForCausalLM"
    assert llm.config.vocab_size == VOCAB_SIZE and not llm.config.tie_word_embeddings
    resamplers = load_file(converted / "resamplers.safetensors")
    release = torch.load(tiny_release[0], weights_only=True)
    assert sorted(resamplers) == sorted(
        f"{n}.proj.{i}.{p}" for n in ("input_resampler", "output_resampler")
        for i in (0, 2) for p in ("weight", "bias"))
    for key, value in resamplers.items():
        assert torch.equal(value, release[key])
    tokenizer = load_tokenizer(converted / "tokenizer")
    assert tokenizer.convert_tokens_to_ids(ADDED_TOKENS) == list(range(32000, VOCAB_SIZE))
    assert (converted / "tokenizer" / "tokenizer.json").is_file()
    config = json.loads((converted / "game_state_config.json").read_text())
    assert config["model_type"] == "animegamer_game_state" and "text_config" not in config
    assert (config["representation_dim"], config["representation_source"]) == (64, "last_226")
    model = GameStateModel.from_pretrained(converted)
    assert model.representation_dim == 64
    assert model.config.representation_source == "last_226"
    assert model.config.text_config.to_dict() == llm.config.to_dict()


def test_folder_converted_before_the_config_file_loads(converted, tmp_path) -> None:
    """A character converted before `game_state_config.json` existed: the config is derived."""
    old = tmp_path / "old"
    shutil.copytree(converted, old)
    (old / "game_state_config.json").unlink()
    derived = GameStateModel.from_pretrained(old).config.to_dict()
    written = GameStateModel.from_pretrained(converted).config.to_dict()
    assert derived.pop("text_config")["_name_or_path"] == str(old / "llm")
    assert written.pop("text_config")["_name_or_path"] == str(converted / "llm")
    assert derived == written


def test_reconversion_replaces_output(converted, tiny_release) -> None:
    (converted / "llm" / "stale.safetensors").write_bytes(b"x")
    convert_mllm(*tiny_release, converted)
    assert not (converted / "llm" / "stale.safetensors").exists()
    assert not list(converted.glob("*.partial"))


def test_sharded_output(tiny_release, converted, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(convert_module, "SHARD_BYTES", 2**20)
    convert_mllm(*tiny_release, tmp_path)
    shards = sorted((tmp_path / "llm").glob("model-*.safetensors"))
    assert len(shards) > 2
    index = json.loads((tmp_path / "llm" / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == {s.name for s in shards}
    single, sharded = _llm_weights(converted), _llm_weights(tmp_path)
    assert single.keys() == sharded.keys()
    assert all(torch.equal(single[k], sharded[k]) for k in single)
    AutoModelForCausalLM.from_pretrained(tmp_path / "llm")


def test_release_is_memory_mapped(tiny_release, monkeypatch) -> None:
    seen = []
    original = torch.load

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    load_checkpoint(tiny_release[0])
    assert seen[0]["mmap"] is True and seen[0]["weights_only"] is True


def test_legacy_torch_save_format(tiny_release, tmp_path) -> None:
    state = torch.load(tiny_release[0], weights_only=True)
    legacy = tmp_path / "legacy.bin"
    torch.save(state, legacy, _use_new_zipfile_serialization=False)
    convert_mllm(legacy, tiny_release[1], tmp_path / "out")
    assert (tmp_path / "out" / "llm" / "model.safetensors").is_file()


# ---- refusals ----


def _edited_release(tiny_release, tmp_path, edit) -> Path:
    state = torch.load(tiny_release[0], weights_only=True)
    edit(state)
    path = tmp_path / "edited.bin"
    torch.save(state, path)
    return path


def _refuse(release_bin: Path, base_dir: Path, out: Path, *patterns: str) -> str:
    with pytest.raises(ConversionError) as info:
        convert_mllm(release_bin, base_dir, out)
    message = str(info.value)
    for pattern in patterns:
        assert pattern in message, message
    assert not (out / "llm").exists() and not (out / "resamplers.safetensors").exists()
    return message


def test_missing_key(tiny_release, tmp_path) -> None:
    key = f"{PREFIX}{Q_PROJ}.lora_A.default.weight"
    path = _edited_release(tiny_release, tmp_path, lambda s: s.pop(key))
    _refuse(path, tiny_release[1], tmp_path / "out", str(path), "missing keys", key)


def test_missing_norm_and_resampler(tiny_release, tmp_path) -> None:
    norm = f"{PREFIX}model.norm.modules_to_save.default.weight"
    resampler = "output_resampler.proj.2.bias"

    def edit(state):
        del state[norm], state[resampler]

    path = _edited_release(tiny_release, tmp_path, edit)
    _refuse(path, tiny_release[1], tmp_path / "out", norm, resampler)


def test_unexpected_key(tiny_release, tmp_path) -> None:
    key = f"{PREFIX}model.layers.0.self_attn.rotary_emb.inv_freq"
    path = _edited_release(tiny_release, tmp_path,
                           lambda s: s.__setitem__(key, torch.zeros(8)))
    _refuse(path, tiny_release[1], tmp_path / "out", str(path), "unexpected keys", key)


def test_both_peft_styles_at_once_is_unexpected(tiny_release, tmp_path) -> None:
    base_layer = f"{PREFIX}{Q_PROJ}.base_layer.weight"
    plain = f"{PREFIX}{Q_PROJ}.weight"
    path = _edited_release(tiny_release, tmp_path,
                           lambda s: s.__setitem__(plain, s[base_layer].clone()))
    _refuse(path, tiny_release[1], tmp_path / "out", "unexpected keys", plain)


def test_wrong_shape(tiny_release, tmp_path) -> None:
    key = f"{PREFIX}lm_head.weight"
    path = _edited_release(tiny_release, tmp_path,
                           lambda s: s.__setitem__(key, s[key][:32000].clone()))
    _refuse(path, tiny_release[1], tmp_path / "out", "wrong shapes", key)


def test_base_mismatch(tiny_release, tmp_path) -> None:
    key = f"{PREFIX}{Q_PROJ}.base_layer.weight"
    path = _edited_release(tiny_release, tmp_path, lambda s: s[key].add_(1.0))
    _refuse(path, tiny_release[1], tmp_path / "out", key, "differs")


def test_absent_base_weights_need_the_base_model(tmp_path) -> None:
    release_bin, base_dir = write_tiny_mllm_release(tmp_path / "r", base_key_style="absent")
    (base_dir / "model.safetensors").unlink()
    _refuse(release_bin, base_dir, tmp_path / "out", "missing keys",
            f"{PREFIX}{Q_PROJ}.base_layer.weight")


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "not_a_state_dict"])
def test_unreadable_release(tiny_release, tmp_path, damage) -> None:
    path = tmp_path / "pytorch_model.bin"
    data = tiny_release[0].read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"not a checkpoint" * 100)
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        torch.save([torch.zeros(2)], path)
    _refuse(path, tiny_release[1], tmp_path / "out", str(path))


def test_missing_files(tiny_release, tmp_path) -> None:
    _refuse(tmp_path / "nope.bin", tiny_release[1], tmp_path / "out", "nope.bin")
    _refuse(tiny_release[0], tmp_path, tmp_path / "out", "config.json")


def test_corrupt_base_weights(tmp_path) -> None:
    release_bin, base_dir = write_tiny_mllm_release(tmp_path / "r", base_key_style="absent")
    (base_dir / "model.safetensors").write_bytes(b"garbage")
    _refuse(release_bin, base_dir, tmp_path / "out", "model.safetensors")


def test_non_mistral_base(tiny_release, tmp_path) -> None:
    base = tmp_path / "base"
    base.mkdir()
    config = json.loads((tiny_release[1] / "config.json").read_text())
    (base / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
    _refuse(tiny_release[0], base, tmp_path / "out", "model_type")


# ---- reference release ----


@pytest.mark.reference
def test_reference_release_converts(reference_dir, tmp_path) -> None:
    mllm = reference_dir / "mllm"
    convert_mllm(mllm / "release" / "pytorch_model.bin", mllm / "base_llm", tmp_path)
    got = _llm_weights(tmp_path)
    expected = _expected_llm_state(mllm / "release" / "pytorch_model.bin", mllm / "base_llm")
    assert set(got) == set(expected)
    for key, value in expected.items():
        torch.testing.assert_close(got[key], value, rtol=0, atol=1e-6, msg=key)
