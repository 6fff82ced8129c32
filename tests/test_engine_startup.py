"""Engine start-up: which weights play each character, what is resolved and loaded, and when."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from animegamer.characters.conversion.character import write_manifest
from animegamer.serving import casting as casting_module
from animegamer.serving import stand_ins as stand_ins_module
from animegamer.serving.casting import CPU_WEIGHTS_LIMIT_BYTES, create_engine
from animegamer.serving.devices import Placement
from animegamer.serving.engine import CharacterModels, EngineError
from animegamer.serving.loading import build_preview_directory
from animegamer.serving.quantization import NO_QUANTIZATION, Quantization
from animegamer.serving.settings import Settings

CHARACTERS = ("Qiqi", "Sosuke", "Totoro")


class Startup:
    """Fakes the GPU and the checkpoints; records what the engine resolves and loads."""

    def __init__(self, monkeypatch, placement: Placement, broken: set[str] = frozenset(),
                 root: Path | None = None):
        self.resolved: list[str] = []
        self.loaded: list[str] = []
        self.broken = broken
        self.root = root
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(casting_module, "choose_placement",
                            lambda low_vram, zero_gpu: placement)
        # the engines of own weights and the Nano stand-in load through it alike
        monkeypatch.setattr(casting_module, "load_character_models", self.load)
        monkeypatch.setattr(stand_ins_module, "load_character_models", self.load)

    def resolve(self, name: str) -> Path:
        """A converted release's folder: a manifest, and weights too large for a CPU (a
        sparse file: nothing is written)."""
        self.resolved.append(name)
        if name in self.broken:
            raise RuntimeError(f"{name}: gated repo, no token")
        assert self.root is not None
        folder = self.root / "checkpoints" / name
        folder.mkdir(parents=True, exist_ok=True)
        write_manifest(folder, name, {"release": {"repo": "org/release"}})
        with open(folder / "weights.safetensors", "wb") as weights:
            weights.truncate(CPU_WEIGHTS_LIMIT_BYTES + 1)
        return folder

    def load(self, directory: Path, placement: Placement,
             quantization: Quantization = NO_QUANTIZATION,
             live_preview: bool = True) -> CharacterModels:
        """`load_character_models`' signature; the models are stand-ins named after the folder."""
        self.loaded.append(directory.name)
        game_state = SimpleNamespace(name=directory.name, representation_dim=1920)
        return CharacterModels(game_state=game_state, decoder=None)  # type: ignore[arg-type]


def _settings(tmp_path: Path, engine: str = "auto", nano_dir: Path | None = None) -> Settings:
    return Settings(engine=engine, output_dir=tmp_path, preview_steps=1,
                    nano_dir=nano_dir or tmp_path / "no-nano")


def _nano_folder(directory: Path) -> Path:
    """Nano's installed layout with tiny random models: a character folder each for Qiqi and
    Sosuke, sharing the VAE in `directory/vae` (`animegamer.nano train --install`)."""
    import shutil

    from animegamer.characters.conversion.character import SHARED_VAE_KEY, write_manifest

    for name in ("Qiqi", "Sosuke"):
        folder = build_preview_directory(directory / name.casefold())
        write_manifest(folder, name, {})
        manifest = json.loads((folder / "animegamer.json").read_text())
        manifest[SHARED_VAE_KEY] = "vae"
        (folder / "animegamer.json").write_text(json.dumps(manifest))
        shutil.rmtree(directory / "vae", ignore_errors=True)
        (folder / "vae").rename(directory / "vae")
    return directory


GPU = Placement(device="cuda", game_state_dtype=torch.bfloat16, decoder_dtype=torch.float16)


def test_every_character_is_resolved_and_the_first_loaded(monkeypatch, tmp_path):
    startup = Startup(monkeypatch, GPU, root=tmp_path)
    engine = create_engine(_settings(tmp_path), startup.resolve, CHARACTERS)
    assert engine.kind == "real"
    assert engine.notice == "Characters: " + "; ".join(
        f"{name}: {tmp_path}/checkpoints/{name} (converted, GPU)" for name in CHARACTERS
    ) + "."
    assert startup.resolved == list(CHARACTERS)
    assert startup.loaded == ["Qiqi"]
    assert engine.representation_dim == 1920
    assert engine.models_for("Sosuke").game_state.name == "Sosuke"
    assert startup.loaded == ["Qiqi", "Sosuke"]


def test_one_resident_character_is_swapped_out(monkeypatch, tmp_path):
    startup = Startup(monkeypatch, GPU, root=tmp_path)
    engine = create_engine(_settings(tmp_path), startup.resolve, CHARACTERS)
    for name in ("Sosuke", "Sosuke", "Qiqi", "Qiqi"):
        engine.models_for(name)
    assert startup.loaded == ["Qiqi", "Sosuke", "Qiqi"]


def test_two_resident_characters_stay_loaded(monkeypatch, tmp_path):
    startup = Startup(monkeypatch, dataclasses.replace(GPU, resident_characters=2), root=tmp_path)
    engine = create_engine(_settings(tmp_path), startup.resolve, CHARACTERS)
    for name in ("Sosuke", "Qiqi", "Sosuke", "Totoro", "Sosuke", "Qiqi"):
        engine.models_for(name)
    assert startup.loaded == ["Qiqi", "Sosuke", "Totoro", "Qiqi"]


def test_zero_gpu_loads_everything_at_start_up_and_nothing_later(monkeypatch, tmp_path):
    placement = dataclasses.replace(GPU, zero_gpu=True, resident_characters=8)
    startup = Startup(monkeypatch, placement, {"Totoro"}, tmp_path)
    engine = create_engine(_settings(tmp_path, "real"), startup.resolve, CHARACTERS)
    assert startup.loaded == ["Qiqi", "Sosuke"]
    assert engine.models_for("Sosuke").game_state.name == "Sosuke"
    with pytest.raises(EngineError, match="Totoro cannot be played here: Totoro: gated repo"):
        engine.models_for("Totoro")
    with pytest.raises(EngineError, match="Totoro was not loaded when the Space started"):
        engine.engine_for("Sosuke").models_for("Totoro")
    assert startup.loaded == ["Qiqi", "Sosuke"]


def test_an_unavailable_character_refuses_turns_with_the_reason(monkeypatch, tmp_path):
    startup = Startup(monkeypatch, GPU, root=tmp_path, broken={"Sosuke"})
    engine = create_engine(_settings(tmp_path, "real"), startup.resolve, CHARACTERS)
    assert engine.kind == "real"
    assert not engine.casting("Sosuke").available
    with pytest.raises(EngineError, match="Sosuke cannot be played here: Sosuke: gated repo"):
        engine.models_for("Sosuke")


def test_auto_lets_a_stand_in_play_a_character_whose_weights_cannot_be_had(
    monkeypatch, tmp_path
):
    startup = Startup(monkeypatch, GPU, root=tmp_path, broken={"Qiqi"})
    engine = create_engine(_settings(tmp_path), startup.resolve, CHARACTERS)
    qiqi, sosuke = engine.casting("Qiqi"), engine.casting("Sosuke")
    assert (qiqi.kind, qiqi.device, qiqi.available) == ("preview", "CPU", True)
    assert "Qiqi's own weights could not be had: Qiqi: gated repo, no token" in qiqi.describe()
    assert (sosuke.kind, sosuke.device) == ("real", "GPU")
    assert sosuke.describe() == f"Sosuke: {tmp_path}/checkpoints/Sosuke (converted, GPU)"
    assert "Sosuke: " in engine.notice and "Qiqi: tiny untrained models" in engine.notice
    assert engine.models_for("Sosuke").game_state.name == "Sosuke"


def test_the_first_playable_character_is_the_default_and_none_fails_in_one_line(
    monkeypatch, tmp_path
):
    startup = Startup(monkeypatch, GPU, root=tmp_path, broken={"Qiqi"})
    engine = create_engine(_settings(tmp_path, "real"), startup.resolve, CHARACTERS)
    assert engine.default_character == "Sosuke" and startup.loaded == ["Sosuke"]
    everyone = Startup(monkeypatch, GPU, root=tmp_path, broken=set(CHARACTERS))
    with pytest.raises(EngineError, match="no character can be played here: Qiqi: unavailable "
                       r"\(Qiqi: gated repo, no token\); Sosuke: unavailable"):
        create_engine(_settings(tmp_path, "real"), everyone.resolve, CHARACTERS)


def test_no_gpu_means_a_stand_in_without_resolving_anything(monkeypatch, tmp_path):
    startup = Startup(monkeypatch, GPU, root=tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    engine = create_engine(_settings(tmp_path), startup.resolve, CHARACTERS)
    assert engine.kind == "preview" and engine.notice.startswith("No GPU was found.")
    assert engine.casting("Qiqi").note == "Qiqi's own weights need a GPU"
    assert startup.resolved == []


def test_no_gpu_plays_the_nano_world_when_its_weights_are_here(monkeypatch, tmp_path):
    startup = Startup(monkeypatch, GPU, root=tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    nano = _nano_folder(tmp_path / "nano")
    engine = create_engine(_settings(tmp_path, nano_dir=nano), startup.resolve, CHARACTERS)
    assert engine.kind == "nano" and engine.num_inference_steps == Settings().nano_steps
    assert engine.notice.startswith("No GPU was found. Playing AnimeGamer-Nano")
    assert engine.casting("Sosuke").describe() == (
        f"Sosuke: {nano}/sosuke (Nano world, CPU; Sosuke's own weights need a GPU)"
    )
    assert startup.resolved == [] and startup.loaded == ["qiqi", "sosuke"]
    # one set of models per character of the world, as the release
    assert engine.models_for("Sosuke") is not engine.models_for("Qiqi")
    with pytest.raises(EngineError, match="the Nano world has no model of Totoro"):
        engine.models_for("Totoro")


def test_a_small_local_folder_plays_its_own_weights_on_the_cpu(monkeypatch, tmp_path):
    startup = Startup(monkeypatch, GPU, root=tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    nano = _nano_folder(tmp_path / "nano")
    tux = build_preview_directory(tmp_path / "runs" / "tux" / "character")
    write_manifest(tux, "Tux", {"dataset": {"path": "tux"}})
    folders = {"Tux": tux, "Gone": tmp_path / "gone"}

    def resolve(name: str) -> Path:
        if not folders[name].is_dir():
            raise RuntimeError(f"the local folder {folders[name]} does not exist")
        return folders[name]

    monkeypatch.chdir(tmp_path)
    engine = create_engine(_settings(tmp_path, nano_dir=nano), resolve, ("Gone", "Tux", "Qiqi"),
                           local_characters={"Tux", "Gone"})
    assert engine.casting_lines() == [
        f"Gone: unavailable (the local folder {tmp_path}/gone does not exist)",
        "Tux: runs/tux/character (trained, CPU)",
        "Qiqi: nano/qiqi (Nano world, CPU; Qiqi's own weights need a GPU)",
    ]
    assert engine.default_character == "Tux" and engine.kind == "real"
    assert engine.models_for("Tux") is not engine.models_for("Qiqi")
    # Tux's own folder, and the Nano world's character folders (all loaded at start-up)
    assert sorted(startup.loaded) == ["character", "qiqi", "sosuke"]


def test_an_incomplete_nano_folder_falls_back_to_preview_and_nano_alone_refuses(
    monkeypatch, tmp_path
):
    startup = Startup(monkeypatch, GPU, root=tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    nano = _nano_folder(tmp_path / "nano")
    (nano / "vae" / "config.json").unlink()  # the shared VAE
    engine = create_engine(_settings(tmp_path, nano_dir=nano), startup.resolve, CHARACTERS)
    assert engine.kind == "preview" and engine.notice.startswith("No GPU was found. Preview mode")
    with pytest.raises(EngineError, match=r"cannot be played: .*missing \.\./vae/config"):
        create_engine(_settings(tmp_path, "nano", nano), startup.resolve, CHARACTERS)


def test_two_nano_folders_of_one_character_are_refused(monkeypatch, tmp_path):
    startup = Startup(monkeypatch, GPU)
    nano = _nano_folder(tmp_path / "nano")
    manifest = json.loads((nano / "sosuke" / "animegamer.json").read_text())
    (nano / "sosuke" / "animegamer.json").write_text(json.dumps({**manifest, "character": "Qiqi"}))
    with pytest.raises(EngineError, match=r"qiqi and .*sosuke both hold Qiqi"):
        create_engine(_settings(tmp_path, "nano", nano), startup.resolve, CHARACTERS)
    assert startup.loaded == []
