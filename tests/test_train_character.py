"""Training's output: a character folder the engine plays without code changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from diffusers import AutoencoderKLCogVideoX

from animegamer.characters.conversion.character import (
    GUIDANCE_KEY,
    check_layout,
    read_manifest,
    vae_folder,
)
from animegamer.characters.conversion.errors import ConversionError
from animegamer.game.rules import make_instruction, new_session
from animegamer.models.latent_preview import PREVIEW_FILE, LatentPreview
from animegamer.models.tiny_game_state import save_tiny_game_state
from animegamer.models.tiny_shot_encoder import tiny_shot_encoder, tiny_shot_towers
from animegamer.pipelines.animegamer.pipeline_animegamer import AnimeGamerPipeline
from animegamer.pipelines.animegamer.tiny import tiny_pipeline
from animegamer.serving.clips import ClipStore
from animegamer.serving.devices import CPU_PLACEMENT
from animegamer.serving.engine import TurnEngine
from animegamer.serving.loading import load_character_models
from animegamer.serving.settings import EngineKind, Settings
from animegamer.serving.stand_ins import create_nano_engine
from animegamer.train.character import TrainingSummary, assemble_character


@pytest.fixture(scope="module")
def phase_outputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("phases")
    save_tiny_game_state(root / "game_state", representation_dim=64)
    pipeline = tiny_pipeline(representation_dim=64)
    pipeline.register_modules(shot_encoder=tiny_shot_encoder(tiny_shot_towers(), width=64))
    pipeline.save_pretrained(root / "decoder")
    for phase, losses in (("game_state", [2.0, 1.5]), ("decoder", [0.9, 0.4])):
        (root / phase / "losses.jsonl").write_text(
            "".join(json.dumps({"step": 10 * (i + 1), "loss": v}) + "\n"
                    for i, v in enumerate(losses))
        )
    return root


def test_the_assembled_folder_is_a_character_the_engine_plays(phase_outputs, tmp_path):
    summary = TrainingSummary(
        dataset=str(tmp_path / "datasets" / "nano"), recipe={"decoder": {"lr": 1e-4}},
        phase_dirs={"game_state": phase_outputs / "game_state",
                    "decoder": phase_outputs / "decoder"},
        metrics={"CLIP-I": 0.5},
    )
    out = assemble_character(tmp_path / "qiqi", "Qiqi", phase_outputs / "game_state",
                             phase_outputs / "decoder", summary)
    check_layout(out)
    manifest = read_manifest(out)
    assert manifest["character"] == "Qiqi"
    # no path of the training machine in what may be published
    assert manifest["sources"]["dataset"]["path"] == "nano"
    assert str(tmp_path) not in "".join(p.read_text() for p in out.rglob("*.json"))
    assert str(tmp_path) not in (out / "README.md").read_text()
    card = (out / "README.md").read_text()
    assert "| decoder | 20 | 0.9000 | 0.4000 |" in card and "| CLIP-I | 0.5000 |" in card
    assert not (tmp_path / "qiqi.partial").exists()
    pipeline = AnimeGamerPipeline.from_pretrained(out)
    assert pipeline.shot_encoder is not None
    # the live-preview map comes with the folder, fitted on the folder's VAE
    shipped, fitted = LatentPreview.load(out / PREVIEW_FILE), LatentPreview.fit(pipeline.vae)
    torch.testing.assert_close(shipped.weight, fitted.weight, rtol=0, atol=0)

    engine = create_nano_engine(Settings(output_dir=tmp_path / "clips", nano_dir=tmp_path,
                                         nano_steps=2))
    instruction = make_instruction({"character": "Qiqi", "adverb": "slowly", "motion": "walk",
                                    "time": "day", "place": "town"})
    session = engine.play(new_session("Qiqi", window=1), instruction, seed=3)
    assert len(session.turns) == 1
    assert Path(session.turns[0].clip_path).is_file()


def test_an_incomplete_phase_output_leaves_the_previous_folder(phase_outputs, tmp_path):
    summary = TrainingSummary(dataset="d", recipe={})
    out = assemble_character(tmp_path / "c", "C", phase_outputs / "game_state",
                             phase_outputs / "decoder", summary)
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(ConversionError, match="missing"):
        assemble_character(out, "C", phase_outputs / "game_state", tmp_path / "nowhere", summary)
    assert sorted(p.name for p in out.iterdir()) == before


def test_publishing_keeps_the_training_card(phase_outputs, tmp_path, monkeypatch):
    import huggingface_hub

    from animegamer.characters.conversion.character import publish

    uploads = []
    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", lambda self, repo_id, **kw: None)
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder",
                        lambda self, **kw: uploads.append(kw) or "commit")
    out = assemble_character(tmp_path / "c", "C", phase_outputs / "game_state",
                             phase_outputs / "decoder", TrainingSummary(dataset="d", recipe={}))
    card = (out / "README.md").read_text()
    assert publish(out, "me/c", keep_card=True) == "commit"
    assert (out / "README.md").read_text() == card and "trained with this project" in card
    assert "shot_encoder/*" in uploads[0]["allow_patterns"]


def _set_manifest(folder: Path, **fields: object) -> None:
    path = folder / "animegamer.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def test_a_character_plays_the_vae_its_manifest_shares_beside_it(phase_outputs, tmp_path):
    out = assemble_character(tmp_path / "qiqi", "Qiqi", phase_outputs / "game_state",
                             phase_outputs / "decoder", TrainingSummary(dataset="d", recipe={}))
    (out / "vae").rename(tmp_path / "vae")
    with pytest.raises(ConversionError, match=r"missing vae/config\.json"):
        check_layout(out)  # no shared VAE named: its own is missing
    _set_manifest(out, shared_vae="vae")
    check_layout(out)
    assert vae_folder(out) == tmp_path / "vae"
    models = load_character_models(out, CPU_PLACEMENT)
    assert models.decoder.vae.config.scaling_factor == AutoencoderKLCogVideoX.load_config(
        tmp_path / "vae")["scaling_factor"]

    (tmp_path / "vae" / "config.json").rename(tmp_path / "vae" / "config.moved")
    with pytest.raises(ConversionError, match=r"missing \.\./vae/config\.json"):
        check_layout(out)
    (tmp_path / "vae" / "config.moved").rename(tmp_path / "vae" / "config.json")
    (tmp_path / "vae" / "diffusion_pytorch_model.safetensors").write_bytes(b"cut")
    with pytest.raises(ConversionError, match="truncated or corrupt"):
        check_layout(out)


@pytest.mark.parametrize("shared", ["../vae", "/tmp/vae", "a/vae", "..", "", 3])
def test_a_shared_vae_must_be_a_folder_beside_the_character(phase_outputs, tmp_path, shared):
    out = assemble_character(tmp_path / "qiqi", "Qiqi", phase_outputs / "game_state",
                             phase_outputs / "decoder", TrainingSummary(dataset="d", recipe={}))
    _set_manifest(out, shared_vae=shared)
    with pytest.raises(ConversionError, match="must name a folder beside the character"):
        check_layout(out)


def test_a_character_plays_at_the_guidance_its_folder_names(phase_outputs, tmp_path,
                                                            monkeypatch):
    """A recipe's `play_guidance` goes into the manifest and replaces the engine's guidance for
    that character only; a folder that names none plays at the engine's."""
    summary = TrainingSummary(dataset="d", recipe={})
    named = assemble_character(tmp_path / "kiki", "Kiki", phase_outputs / "game_state",
                               phase_outputs / "decoder", summary, play_guidance=1.0)
    plain = assemble_character(tmp_path / "qiqi", "Qiqi", phase_outputs / "game_state",
                               phase_outputs / "decoder", summary)
    assert read_manifest(named)[GUIDANCE_KEY] == 1.0 and GUIDANCE_KEY not in read_manifest(plain)
    folders = {"Kiki": named, "Qiqi": plain}
    seen: list[float] = []
    original = AnimeGamerPipeline.__call__

    def recording(self, *args, **kwargs):
        seen.append(kwargs["guidance_scale"])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(AnimeGamerPipeline, "__call__", recording)
    engine = TurnEngine(lambda character, placement: load_character_models(
                            folders[character], placement, live_preview=False),
                        kind=EngineKind.REAL, placement=CPU_PLACEMENT, num_inference_steps=1,
                        guidance_scale=6.0, clips=ClipStore(tmp_path / "clips"))
    for character in ("Kiki", "Qiqi"):
        instruction = make_instruction({"character": character, "adverb": "slowly",
                                        "motion": "walk", "time": "day", "place": "town"})
        engine.play(new_session(character, window=1), instruction, seed=0)
    assert seen == [1.0, 6.0]

    _set_manifest(named, guidance_scale="low")
    refused = r"guidance_scale must be a number in 1\.\.20, got 'low'"
    with pytest.raises(ConversionError, match=refused):
        check_layout(named)  # as the Hub resolver and assembly check a folder
    with pytest.raises(ConversionError, match=refused):
        load_character_models(named, CPU_PLACEMENT)
