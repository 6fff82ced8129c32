"""Training's output: a character folder the engine plays without code changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from animegamer.convert.character import check_layout, read_manifest
from animegamer.convert.errors import ConversionError
from animegamer.engine import create_nano_engine
from animegamer.game import make_instruction, new_session
from animegamer.models.decoder import AnimeGamerPipeline
from animegamer.models.tiny_decoder import tiny_pipeline
from animegamer.models.tiny_game_state import save_tiny_game_state
from animegamer.models.tiny_shot_encoder import tiny_shot_encoder, tiny_shot_towers
from animegamer.settings import Settings
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
    out = assemble_character(tmp_path / "nano", "Nano", phase_outputs / "game_state",
                             phase_outputs / "decoder", summary)
    check_layout(out)
    manifest = read_manifest(out)
    assert manifest["character"] == "Nano"
    # no path of the training machine in what may be published
    assert manifest["sources"]["dataset"]["path"] == "nano"
    assert str(tmp_path) not in "".join(p.read_text() for p in out.rglob("*.json"))
    assert str(tmp_path) not in (out / "README.md").read_text()
    card = (out / "README.md").read_text()
    assert "| decoder | 20 | 0.9000 | 0.4000 |" in card and "| CLIP-I | 0.5000 |" in card
    assert not (tmp_path / "nano.partial").exists()
    assert AnimeGamerPipeline.from_pretrained(out).shot_encoder is not None

    engine = create_nano_engine(Settings(output_dir=tmp_path / "clips", nano_dir=out,
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

    from animegamer.convert.character import publish

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
