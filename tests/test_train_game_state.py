"""Phase (b) of training: episode windows, training samples, trainable parameters, the loop
(overfitting one window, resuming), and the teacher-forced target representations."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from accelerate import Accelerator
from safetensors.torch import load_file

from animegamer.data.dataset import write_splits
from animegamer.data.features import tiny_feature_extractor, write_features
from animegamer.game.rules import GameStates
from animegamer.models.game_state import GameStateModel
from animegamer.models.shot_encoder import AnimeGamerShotEncoder
from animegamer.models.tiny_game_state import (
    build_tiny_tokenizer,
    save_tiny_game_state,
    tiny_game_state_model,
    write_tiny_mllm_release,
)
from animegamer.models.tokens import (
    EOS_ID,
    ET_END_ID,
    ET_ID,
    ML_END_ID,
    ML_ID,
    SC_END_ID,
    SC_ID,
    ST_END_ID,
    ST_ID,
    TURN_END_ID,
    VOCAB_SIZE,
    parse_state_ids,
    strength_id,
)
from animegamer.train.game_state_phase import (
    WindowSchedule,
    build_game_state_model,
    row_states,
    shot_representations,
    target_representations,
    train_game_state,
    training_sample,
    window_losses,
    window_prompt,
    with_lora,
)
from animegamer.train.recipe import (
    BaseLLMInit,
    CharacterInit,
    GameStateRecipe,
    TinyGameStateInit,
    TinySpec,
)
from animegamer.train.windows import EpisodeWindow, episode_windows

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FEATURE_WIDTH = 32
WIDTH = 64


def shot_rows(lengths: list[int]) -> list[dict]:
    """Rows of episodes of the given lengths, with varied states."""
    rows = []
    for episode, length in enumerate(lengths):
        for index in range(length):
            shot = f"ep{episode}-{index}"
            rows.append({
                "shot_id": shot, "video": "video", "start": float(10 * episode + index),
                "episode_id": f"video-e{episode:04d}", "episode_index": index,
                "character": "Qiqi", "adverb": "softly", "motion": f"waves {shot}",
                "time": "day", "place": "garden",
                "instruction": f"Character: Qiqi; Motion: softly waves {shot}; "
                               "Background: day garden.",
                "motion_scope": 1.0, "motion_level": 1 + (4 * episode + index) % 5,
                "sc": index % 2, "et": (index + 1) % 2, "st": 1 if index % 2 else -1,
                "clip_path": f"clips/video/{shot}.mp4",
                "features_path": f"features/video/{shot}.safetensors",
            })
    return rows


def write_dataset(root: Path, lengths: list[int]) -> tuple[Path, list[dict]]:
    rows = shot_rows(lengths)
    extractor = tiny_feature_extractor(FEATURE_WIDTH)
    frames = np.random.default_rng(0).integers(0, 256, (len(rows), 48, 72, 3), dtype=np.uint8)
    texts = [f"softly waves {row['shot_id']}" for row in rows]
    images, words = extractor.image_features(frames), extractor.text_features(texts)
    for row, image, text, motion in zip(rows, images, words, texts, strict=True):
        write_features(root / row["features_path"], image, text, extractor.name, motion)
    write_splits(root, {"train": rows})
    return root, rows


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> tuple[Path, list[dict]]:
    return write_dataset(tmp_path_factory.mktemp("episodes"), [4, 4])


@pytest.fixture(scope="module")
def encoder() -> AnimeGamerShotEncoder:
    torch.manual_seed(3)
    return AnimeGamerShotEncoder(text_width=FEATURE_WIDTH, image_width=FEATURE_WIDTH,
                                 width=WIDTH).eval()


def accelerator(accumulation: int) -> Accelerator:
    return Accelerator(cpu=True, gradient_accumulation_steps=accumulation)


def tiny_recipe(**fields) -> dict:
    return {"init": {"tiny": {"seed": 0}}, **fields}


# ---- windows ----


def test_windows_mix_every_length_that_fits_equally():
    rows = shot_rows([4, 4])
    windows = episode_windows(rows, max_turns=5, seed=0)
    lengths = Counter(len(w.rows) for w in windows)
    assert lengths == {1: 8, 2: 8, 3: 8, 4: 8}  # length 5 fits no episode
    for window in windows:
        assert len({row["episode_id"] for row in window.rows}) == 1
        indices = [row["episode_index"] for row in window.rows]
        assert indices == list(range(indices[0], indices[0] + len(indices)))
    # every window of a length is drawn before any is repeated
    assert len({w.target["shot_id"] for w in windows if len(w.rows) == 1}) == 8
    assert len({w.target["shot_id"] for w in windows if len(w.rows) == 2}) == 6
    assert Counter(w.target["shot_id"] for w in windows if len(w.rows) == 4) == {
        "ep0-3": 4, "ep1-3": 4}
    assert episode_windows(rows, 5, seed=0) == windows
    assert episode_windows(rows, 5, seed=1) != windows
    assert Counter(len(w.rows) for w in episode_windows(rows, max_turns=2)) == {1: 8, 2: 8}
    assert Counter(len(w.rows) for w in episode_windows(shot_rows([1, 6]), 5)) == {
        n: 7 for n in range(1, 6)}
    assert episode_windows([], 5) == []


def test_the_schedule_depends_only_on_the_position():
    rows = shot_rows([4, 4])
    schedule = WindowSchedule(rows, max_turns=5, seed=7)
    assert schedule.batch(0, 32) == episode_windows(rows, 5, seed=7)
    assert schedule.batch(1, 32) == episode_windows(rows, 5, seed=8)  # the next epoch
    assert WindowSchedule(rows, 5, seed=7).batch(5, 8) == schedule.batch(5, 8)
    with pytest.raises(ValueError, match="no training rows"):
        WindowSchedule([], 5, seed=0)


# ---- samples ----


def test_labels_are_exactly_the_target_state_tokens(dataset):
    _, rows = dataset
    tokenizer = build_tiny_tokenizer()
    window = EpisodeWindow(tuple(rows[1:4]))
    sample = training_sample(tokenizer, window)
    prompt = window_prompt(tokenizer, window)
    states = row_states(rows[3])
    expected = [strength_id(states.ml), ML_END_ID, SC_ID, strength_id(states.sc), SC_END_ID,
                ET_ID, strength_id(states.et), ET_END_ID, ST_ID, strength_id(states.st),
                ST_END_ID, ST_END_ID, TURN_END_ID, EOS_ID]
    ids, labels = sample.input_ids[0], sample.labels[0]
    assert torch.equal(ids[:prompt.length], prompt.input_ids[0])
    assert ids[prompt.length - 1] == ML_ID
    assert (labels != -100).nonzero().flatten().tolist() == list(
        range(prompt.length, prompt.length + len(expected)))
    assert labels[prompt.length:].tolist() == expected == ids[prompt.length:].tolist()
    assert parse_state_ids(expected) == states == GameStates(ml=4, sc=1, et=0, st=1)
    # the history turns carry their own labelled states, teacher-forced
    history_ml = (ids[:prompt.query_block.start] == ML_ID).nonzero().flatten()
    assert [parse_state_ids(ids[p + 1:p + 11].tolist()) for p in history_ml.tolist()] == [
        row_states(rows[1]), row_states(rows[2])]
    assert len(prompt.history_blocks) == 2


# ---- the model ----


LORA = re.compile(r"base_model\.model\.language_model\.model\.layers\.\d\."
                  r"(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)\.lora_[AB]\.default\.weight")
FULL = re.compile(r"base_model\.model\.("
                  r"language_model\.model\.embed_tokens\.weight|language_model\.lm_head\.weight"
                  r"|language_model\.model\.layers\.\d\.(input|post_attention)_layernorm\.weight"
                  r"|language_model\.model\.norm\.weight"
                  r"|(input|output)_resampler\.proj\.[02]\.(weight|bias))")


def test_trainable_parameters_are_lora_norms_embeddings_and_resamplers():
    recipe = GameStateRecipe.model_validate(tiny_recipe())
    peft_model = with_lora(build_game_state_model(recipe.init, WIDTH), recipe)
    trainable = {n for n, p in peft_model.named_parameters() if p.requires_grad}
    frozen = {n for n, p in peft_model.named_parameters() if not p.requires_grad}
    assert all(LORA.fullmatch(n) or FULL.fullmatch(n) for n in trainable)
    assert len([n for n in trainable if LORA.fullmatch(n)]) == 2 * 7 * 2  # layers·targets·A/B
    assert len([n for n in trainable if FULL.fullmatch(n)]) == 2 + 5 + 8
    assert len(frozen) == 2 * 7 and all(n.endswith(".base_layer.weight") for n in frozen)
    merged = peft_model.merge_and_unload()
    assert isinstance(merged, GameStateModel)
    assert merged.config.representation_source == "queries"


def test_initial_models_read_the_queries(tmp_path):
    _, base_llm = write_tiny_mllm_release(tmp_path / "release", representation_dim=WIDTH)
    from_base = build_game_state_model(BaseLLMInit(base_llm=base_llm), WIDTH)
    assert from_base.language_model.get_input_embeddings().weight.shape[0] == VOCAB_SIZE
    assert from_base.language_model.get_output_embeddings().weight.shape[0] == VOCAB_SIZE
    assert from_base.config.representation_source == "queries"
    assert from_base.representation_dim == WIDTH and len(from_base.tokenizer) == VOCAB_SIZE
    character = save_tiny_game_state(tmp_path / "character", representation_dim=WIDTH)
    from_character = build_game_state_model(CharacterInit(character=character), WIDTH)
    assert from_character.config.representation_source == "queries"
    with pytest.raises(ValueError, match="width"):
        build_game_state_model(CharacterInit(character=character), WIDTH + 1)
    tiny = GameStateRecipe.model_validate({"init": {"tiny": {}}}).init
    assert tiny == TinyGameStateInit(tiny=TinySpec())
    with pytest.raises(ValueError, match="extra"):
        GameStateRecipe.model_validate(tiny_recipe(learning_rate=1.0))
    with pytest.raises(ValueError, match="init"):
        GameStateRecipe.model_validate({"init": {}})


def test_gradient_checkpointing_gives_the_same_gradients(dataset, encoder):
    root, rows = dataset
    window = EpisodeWindow(tuple(rows[4:7]))
    results = []
    for checkpointing in (False, True):
        recipe = GameStateRecipe.model_validate(
            tiny_recipe(lora_dropout=0.0, gradient_checkpointing=checkpointing))
        model = build_game_state_model(recipe.init, WIDTH)
        peft_model = with_lora(model, recipe)
        loss, ce, mse = window_losses(peft_model, model.tokenizer, encoder, root, window, 1.0)
        loss.backward()
        assert torch.isclose(loss, ce + mse)
        results.append((loss.detach(), model.input_resampler.proj[0].weight.grad.clone()))
    assert torch.allclose(results[0][0], results[1][0], atol=1e-6)
    assert torch.allclose(results[0][1], results[1][1], atol=1e-6)
    assert results[0][1].abs().sum() > 0  # history representations reach the input resampler


# ---- the loop ----


def represent_mse(model: GameStateModel, window: EpisodeWindow, target: torch.Tensor) -> float:
    prompt = window_prompt(model.tokenizer, window)
    return torch.nn.functional.mse_loss(model.represent(prompt.input_ids), target).item()


def test_overfitting_one_window_learns_its_states_and_representation(tmp_path, encoder):
    root, rows = write_dataset(tmp_path / "one", [1])
    window = EpisodeWindow(tuple(rows))
    target = shot_representations(encoder, root, rows)
    before = tiny_game_state_model(WIDTH, seed=0, representation_source="queries")
    recipe = tiny_recipe(steps=40, lr=1e-2, batch_size=1, lora_dropout=0.0, checkpoint_every=100)
    with pytest.raises(ValueError, match="gradient_accumulation_steps=1"):
        train_game_state(root, tmp_path / "out", recipe, encoder, accelerator(2))
    folder = train_game_state(root, tmp_path / "out", recipe, encoder, accelerator(1))

    assert folder == tmp_path / "out" / "game_state"
    log = tmp_path / "out" / "logs" / "game_state" / "losses.jsonl"
    losses = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["step"] for r in losses] == list(range(1, 41))
    assert losses[-1]["loss"] < 0.1 * losses[0]["loss"]
    assert all(abs(r["loss"] - r["ce"] - r["mse"]) < 1e-4 for r in losses)
    trained = GameStateModel.from_pretrained(folder)
    assert trained.config.representation_source == "queries"
    prompt = window_prompt(trained.tokenizer, window)
    assert trained.predict_states(prompt.input_ids) == row_states(rows[0]) != GameStates()
    assert represent_mse(trained, window, target) < 0.5 * represent_mse(before, window, target)
    checkpoints = tmp_path / "out" / "checkpoints" / "game_state"
    assert [p.name for p in checkpoints.iterdir()] == ["step-00000040"]


def final_weights(folder: Path) -> dict[str, torch.Tensor]:
    return {**load_file(folder / "llm" / "model.safetensors"),
            **load_file(folder / "resamplers.safetensors")}


def test_a_resumed_run_ends_with_the_same_weights(tmp_path, dataset, encoder):
    root, _ = dataset
    recipe = tiny_recipe(steps=6, lr=1e-3, batch_size=2, checkpoint_every=2)
    whole = train_game_state(root, tmp_path / "whole", recipe, encoder, accelerator(2))

    parts = tmp_path / "parts"
    train_game_state(root, parts, recipe, encoder, accelerator(2), max_steps=3)
    checkpoints = parts / "checkpoints" / "game_state"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-00000002", "step-00000003"]
    saved = load_file(checkpoints / "step-00000002" / "model.safetensors")
    assert len(saved) == 28 + 15 and not any("base_layer" in name for name in saved)
    # interrupted after logging step 3, before its checkpoint was complete
    (checkpoints / "step-00000003" / "trainer_state.json").unlink()
    with pytest.raises(FileExistsError):
        train_game_state(root, parts, recipe, encoder, accelerator(2))
    resumed = train_game_state(root, parts, recipe, encoder, accelerator(2), resume=True)

    expected, got = final_weights(whole), final_weights(resumed)
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[k], got[k]) for k in expected)
    logged = [(tmp_path / run / "logs" / "game_state" / "losses.jsonl").read_text().splitlines()
              for run in ("whole", "parts")]
    assert len(logged[0]) == 6 and logged[0] == logged[1]


def test_target_representations_are_the_models_teacher_forced_ones(dataset, encoder):
    root, rows = dataset
    model = tiny_game_state_model(WIDTH, seed=0, representation_source="queries")
    windows = [EpisodeWindow(tuple(rows[0:1])), EpisodeWindow(tuple(rows[4:7]))]
    histories = [list(shot_representations(encoder, root, w.history)) for w in windows]
    representations = target_representations(model, windows, histories)
    assert representations.shape == (2, 226, WIDTH)
    prompt = window_prompt(model.tokenizer, windows[1])
    assert torch.allclose(representations[1], model.represent(prompt.input_ids, histories[1])[0])
    shuffled = [histories[0], histories[1][::-1]]
    assert not torch.allclose(target_representations(model, windows, shuffled)[1],
                              representations[1])
    with pytest.raises(ValueError, match="history"):
        target_representations(model, windows, [[], []])
