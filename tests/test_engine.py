"""The turn engine on the preview models: infinite, atomic, isolated sessions."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import accelerate.hooks
import imageio.v3 as iio
import pytest
import torch

from animegamer.game.rules import Gauges, apply_states, make_instruction, new_session, undo
from animegamer.serving.clips import ClipStore
from animegamer.serving.devices import Placement
from animegamer.serving.engine import TurnEngine
from animegamer.serving.loading import build_preview_directory, load_character_models
from animegamer.serving.settings import EngineKind


@pytest.fixture(scope="session")
def engine(preview_engine):
    return preview_engine


HALF_PLACEMENT = Placement(
    device="cpu", game_state_dtype=torch.bfloat16, decoder_dtype=torch.float16
)

def _instruction(motion: str = "fly on broomstick", character: str = "Qiqi"):
    return make_instruction(
        {"character": character, "adverb": "quickly", "motion": motion, "time": "day",
         "place": "sky"}
    )



def test_preview_engine_says_what_it_is(engine):
    assert engine.kind == "preview"
    assert "preview" in engine.notice.lower()
    assert engine.placement.device == "cpu"


def test_a_turn_writes_a_clip_and_applies_the_states(engine):
    session = new_session("Qiqi")
    played = engine.play(session, _instruction(), seed=123)
    assert session.turns == ()
    (turn,) = played.turns
    assert turn.seed == 123 and turn.index == 1
    assert turn.gauges == apply_states(Gauges(), turn.states)
    assert 1 <= turn.motion_level <= 5 and turn.motion_scope > 0
    assert turn.timings.total_s >= turn.timings.predict_s > 0
    frames = iio.imread(turn.clip_path)
    assert frames.shape[0] == 17 and frames.shape[-1] == 3
    assert Path(turn.clip_path).parent.name == session.session_id
    (representation,) = played.representations
    assert representation.shape == (226, 64) and representation.device.type == "cpu"


def test_same_seed_same_turn(engine):
    session = new_session("Qiqi")
    first = engine.play(session, _instruction(), seed=7)
    second = engine.play(session, _instruction(), seed=7)
    assert first.turns[0].states == second.turns[0].states
    assert torch.equal(first.representations[0], second.representations[0])
    assert (iio.imread(first.turns[0].clip_path) == iio.imread(second.turns[0].clip_path)).all()


def test_a_game_past_its_window_keeps_exactly_the_window(engine):
    """2×window+1 turns: the window fills, slides past its length, and slides again
    (`benchmarks/turns.py` covers long games)."""
    window = 3
    session = new_session("Qiqi", window=window)
    for index in range(2 * window + 1):
        session = engine.play(session, _instruction(f"walk step {index}"), seed=index)
        assert len(session.representations) == min(window, index + 1)
        assert len(session.history_representations) == min(window - 1, index + 1)
    assert [turn.index for turn in session.turns] == list(range(1, 2 * window + 2))
    assert session.turns[-1].instruction.motion == f"walk step {2 * window}"


def test_a_failing_decoder_leaves_the_session_untouched_and_retry_works(engine, monkeypatch):
    session = engine.play(new_session("Qiqi", window=2), _instruction(), seed=1)
    snapshot = dataclasses.replace(session)
    decoder = engine.models_for("Qiqi").decoder
    clip_folder = Path(session.turns[0].clip_path).parent
    clips_before = sorted(clip_folder.iterdir())

    def explode(*args, **kwargs):
        raise RuntimeError("CUDA out of memory (injected)")

    monkeypatch.setattr(type(decoder), "__call__", explode)
    with pytest.raises(RuntimeError, match="injected"):
        engine.play(session, _instruction("jump"), seed=2)
    assert session == snapshot
    assert sorted(clip_folder.iterdir()) == clips_before
    monkeypatch.undo()

    retried = engine.play(session, _instruction("jump"), seed=2)
    assert [turn.instruction.motion for turn in retried.turns] == ["fly on broomstick", "jump"]


def test_a_failing_clip_writer_removes_the_partial_clip(engine, monkeypatch):
    session = new_session("Qiqi")

    def half_write(frames, path, fps=8):
        Path(path).write_bytes(b"partial")
        raise OSError("disk full (injected)")

    monkeypatch.setattr("animegamer.serving.clips.write_mp4", half_write)
    with pytest.raises(OSError, match="disk full"):
        engine.play(session, _instruction(), seed=3)
    folder = engine.clips.root / session.session_id
    assert not folder.exists() or not any(folder.iterdir())


def test_undo_then_play_restores_the_window(engine):
    one = engine.play(new_session("Qiqi", window=2), _instruction("a"), seed=1)
    two = engine.play(one, _instruction("b"), seed=2)
    back = undo(two)
    assert back == one
    again = engine.play(back, _instruction("b"), seed=2)
    assert again.turns[-1].states == two.turns[-1].states
    assert torch.equal(again.representations[-1], two.representations[-1])


def test_interleaved_sessions_never_affect_each_other(engine):
    alice = new_session("Qiqi", window=2)
    bob = new_session("Sosuke", window=2)
    for index in range(3):
        alice = engine.play(alice, _instruction(f"alice {index}"), seed=index)
        bob = engine.play(bob, _instruction(f"bob {index}", "Sosuke"), seed=100 + index)
    assert [t.instruction.motion for t in alice.turns] == ["alice 0", "alice 1", "alice 2"]
    assert [t.instruction.motion for t in bob.turns] == ["bob 0", "bob 1", "bob 2"]
    alone = new_session("Qiqi", window=2)
    for index in range(3):
        alone = engine.play(alone, _instruction(f"alice {index}"), seed=index)
    assert [t.states for t in alone.turns] == [t.states for t in alice.turns]
    assert [t.gauges for t in alone.turns] == [t.gauges for t in alice.turns]
    assert all(torch.equal(a, b) for a, b in zip(alone.representations, alice.representations,
                                                  strict=True))
    alice_clips = {Path(t.clip_path).parent for t in alice.turns}
    bob_clips = {Path(t.clip_path).parent for t in bob.turns}
    assert len(alice_clips) == len(bob_clips) == 1 and alice_clips != bob_clips


def test_bad_seed_is_refused_before_any_work(engine):
    with pytest.raises(ValueError, match="seed"):
        engine.play(new_session("Qiqi"), _instruction(), seed=-1)


def test_progress_reports_every_stage_in_order(engine):
    reports: list[tuple[float, str]] = []
    engine.play(new_session("Qiqi"), _instruction(), seed=5,
                progress=lambda fraction, text: reports.append((fraction, text)),
                num_inference_steps=3)
    texts = [text for _, text in reports]
    assert texts == [
        "Predicting the next game state",
        "Denoising step 1/3", "Denoising step 2/3", "Denoising step 3/3",
        "Decoding the video",
        "Writing the clip",
    ]
    fractions = [fraction for fraction, _ in reports]
    assert fractions == sorted(fractions) and fractions[0] >= 0 and fractions[-1] < 1


def test_step_count_is_checked(engine):
    with pytest.raises(ValueError, match="num_inference_steps"):
        engine.play(new_session("Qiqi"), _instruction(), seed=1, num_inference_steps=500)


def test_gpu_dtypes_play_with_history(tmp_path):
    """bf16 game-state model + fp16 decoder (the GPU placement), run on the CPU: the dtype
    plumbing (history injection, masks, CFG batch, VAE) holds and the session stays fp32."""
    models = load_character_models(build_preview_directory(tmp_path / "models"), HALF_PLACEMENT)
    engine = TurnEngine(
        lambda character, placement: models, kind=EngineKind.REAL, placement=HALF_PLACEMENT,
        num_inference_steps=2, guidance_scale=6.0, clips=ClipStore(tmp_path / "clips"),
    )
    assert models.game_state.dtype == torch.bfloat16
    assert models.decoder.dtype == torch.float16
    session = engine.play(new_session("Qiqi", window=2), _instruction("a"), seed=1)
    session = engine.play(session, _instruction("b"), seed=2)
    assert len(session.history_representations) == 1
    assert all(rep.dtype == torch.float32 and torch.isfinite(rep).all()
               for rep in session.representations)
    assert iio.imread(session.turns[-1].clip_path).shape[0] == 17


def test_low_vram_offloads_the_decoder_with_hooks_and_moves_the_game_state_model_per_turn(
    engine, tmp_path, monkeypatch
):
    """Low-VRAM mode: the decoder's components are offloaded by accelerate hooks; the game-state
    model sits in CPU memory between turns and `predict` moves it to the placement's device for
    its passes, then back, and the turn is the one the resident models play."""
    placement = Placement(device="cpu", game_state_dtype=torch.float32,
                          decoder_dtype=torch.float32, offload=True)
    models = load_character_models(build_preview_directory(tmp_path / "models"), placement)
    assert all(isinstance(getattr(models.decoder, name)._hf_hook, accelerate.hooks.CpuOffload)
               for name in ("transformer", "vae"))
    game_state = models.game_state
    assert game_state._offload_device == torch.device(placement.device)
    assert {parameter.device.type for parameter in game_state.parameters()} == {"cpu"}

    events: list[str] = []
    to = game_state.to

    def moved(device, *args, **kwargs):
        events.append(f"to {torch.device(device).type}")
        return to(device, *args, **kwargs)

    def forward(module, args, kwargs):
        events.append(f"forward on {next(module.parameters()).device.type}")

    monkeypatch.setattr(game_state, "to", moved)
    hook = game_state.language_model.model.register_forward_pre_hook(forward, with_kwargs=True)
    offloading = TurnEngine(lambda character, p: models, kind=EngineKind.REAL, placement=placement,
                            num_inference_steps=2, guidance_scale=6.0, clips=ClipStore(tmp_path))
    try:
        offloaded = offloading.play(new_session("Qiqi"), _instruction(), seed=9)
    finally:
        hook.remove()
    assert events[0] == f"to {placement.device}" and events[-1] == "to cpu"
    assert set(events[1:-1]) == {f"forward on {placement.device}"}, events
    assert {parameter.device.type for parameter in game_state.parameters()} == {"cpu"}
    resident = engine.play(new_session("Qiqi"), _instruction(), seed=9)
    assert (iio.imread(offloaded.turns[0].clip_path)
            == iio.imread(resident.turns[0].clip_path)).all()
    assert torch.equal(offloaded.representations[0], resident.representations[0])
