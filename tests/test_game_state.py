"""GameStateModel: representation, state generation, the frame-token rule and state parsing."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from safetensors.torch import load_file
from transformers import LogitsProcessorList

from animegamer import game, tokens
from animegamer.convert.mllm import convert_mllm
from animegamer.models.game_state import FrameTokenRule, GameStateModel, GameStates
from animegamer.models.tiny_game_state import save_tiny_game_state
from animegamer.tokens import (
    FRAME0_ID,
    FRAME_END_ID,
    FRAME_ID,
    NUM_QUERY_TOKENS,
    STATE_TOKENS_GENERATED,
    HistoryTurn,
    Prompt,
    attention_mask_4d,
    build_prompt,
    parse_state_ids,
    strength_id,
)

CASES = ("w1_t0", "w1_t1", "w2_t0", "w2_t1")
TOLERANCE = 1e-4


# ---- the frame-token rule ----


def _rule(last_ids: list[int], vocab: int = 32284) -> tuple[torch.Tensor, torch.Tensor]:
    scores = torch.randn(len(last_ids), vocab) - 5.0
    before = scores.clone()
    out = FrameTokenRule()(torch.tensor([[1, i] for i in last_ids]), scores)
    return before, out


def test_rule_forces_the_next_frame_token() -> None:
    cases = {FRAME_ID: FRAME0_ID, FRAME0_ID: FRAME0_ID + 1, FRAME0_ID + 98: FRAME0_ID + 99,
             FRAME0_ID + 99: FRAME_END_ID}
    before, out = _rule(list(cases))
    for row, forced in enumerate(cases.values()):
        assert out[row, forced] == before[row].max() + 10.0
        changed = (out[row] != before[row]).nonzero().flatten().tolist()
        assert changed == [forced]


def test_rule_zeroes_frame_logits_elsewhere() -> None:
    before, out = _rule([5, FRAME0_ID + 100, FRAME_END_ID])
    zeroed = [*range(FRAME0_ID, FRAME0_ID + 100), FRAME_END_ID]
    for row in range(3):
        assert bool((out[row, zeroed] == 0.0).all()), "zero, not -inf"
        keep = torch.ones(out.shape[1], dtype=torch.bool)
        keep[zeroed] = False
        assert torch.equal(out[row, keep], before[row, keep])
        assert out[row, FRAME_ID] == before[row, FRAME_ID]
        assert out[row, FRAME0_ID + 100] == before[row, FRAME0_ID + 100]


# ---- state parsing ----


def _states_ids(ml: int, sc: int, et: int, st: int) -> list[int]:
    return [strength_id(ml), 32275, 32276, strength_id(sc), 32277, 32278, strength_id(et),
            32279, 32280, strength_id(st), 32281, 32281, 32283, 2]


def test_parse_well_formed() -> None:
    assert parse_state_ids(_states_ids(3, -2, 5, -5)) == GameStates(3, -2, 5, -5)
    shortest = _states_ids(1, 0, 0, 0)[:STATE_TOKENS_GENERATED]
    assert parse_state_ids(shortest) == GameStates(1, 0, 0, 0)
    assert parse_state_ids(torch.tensor(_states_ids(2, 1, 1, 1))) == GameStates(2, 1, 1, 1)
    assert GameStates is tokens.GameStates is game.GameStates


@pytest.mark.parametrize("ids", [
    [],
    _states_ids(3, 1, 1, 1)[:9],
    [13, 28705, 1, 2, 3, 4, 5, 6, 7, 8, 9],
    [32275, *_states_ids(3, 1, 1, 1)],
    [strength_id(3), 32275, 32276, 32281, 32277, 32278, strength_id(1), 32279, 32280,
     strength_id(1)],
    [strength_id(3), 32275, 32276, strength_id(1), 32277, 32278, strength_id(1), 32279, 32280,
     32273],
    [40000, 32275, 32276, 99999, 32277, 32278, -1, 32279, 32280, 32261],
    [32261 + 0, 0, 0, 32273, 0, 0, 32261, 0, 0, 32273],
])
def test_parse_malformed_gives_none(ids) -> None:
    assert parse_state_ids(ids) is None


# ---- tiny model ----


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return GameStateModel.from_pretrained(save_tiny_game_state(tmp_path_factory.mktemp("tiny")))


@pytest.fixture(scope="module")
def tiny_prompt(tiny_model):
    history = [HistoryTurn("Character: A; Motion: slowly walk; Background: day park.",
                           GameStates(3, 1, -1, 2))]
    return build_prompt(tiny_model.tokenizer, history, "Character: A; Motion: run; Background: x.")


def _representation(seed: int, width: int = 64) -> torch.Tensor:
    return torch.randn(NUM_QUERY_TOKENS, width, generator=torch.Generator().manual_seed(seed))


def test_tiny_model_properties(tiny_model) -> None:
    assert tiny_model.representation_dim == 64
    assert tiny_model.dtype == torch.float32 and tiny_model.device.type == "cpu"
    assert tiny_model.llm.config._attn_implementation == "sdpa"
    assert tiny_model.llm.config.vocab_size == 32284


def test_represent_matches_its_definition(tiny_model, tiny_prompt) -> None:
    history = [_representation(0)]
    out = tiny_model.represent(tiny_prompt.input_ids, history)
    assert out.shape == (1, NUM_QUERY_TOKENS, 64) and out.dtype == torch.float32
    with torch.no_grad():
        embeds = tiny_model.llm.get_input_embeddings()(tiny_prompt.input_ids).clone()
        embeds[0, tiny_prompt.history_blocks[0]] = tiny_model.input_resampler(history[0])
        hidden = tiny_model.llm.model(
            inputs_embeds=embeds, attention_mask=attention_mask_4d(tiny_prompt)
        ).last_hidden_state
        expected = tiny_model.output_resampler(hidden[:, -NUM_QUERY_TOKENS:])
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-5)


def test_represent_depends_on_history_and_mask(tiny_model, tiny_prompt) -> None:
    a = tiny_model.represent(tiny_prompt.input_ids, [_representation(0)])
    b = tiny_model.represent(tiny_prompt.input_ids, [_representation(1)])
    assert not torch.allclose(a, b)
    with torch.no_grad():
        _, embeds = tiny_model.embed_prompt(tiny_prompt.input_ids, [_representation(0)])
        causal = tiny_model.llm.model(inputs_embeds=embeds).last_hidden_state
    assert not torch.allclose(tiny_model.output_resampler(causal[:, -NUM_QUERY_TOKENS:]), a)


def test_to_moves_every_part(tmp_path) -> None:
    model = GameStateModel.from_pretrained(save_tiny_game_state(tmp_path))
    assert model.to("meta") is model and model.device.type == "meta"
    modules = (model.llm, model.input_resampler, model.output_resampler)
    assert all(p.device.type == "meta" for m in modules for p in m.parameters())


def test_history_count_must_match_blocks(tiny_model, tiny_prompt) -> None:
    with pytest.raises(ValueError, match="history blocks"):
        tiny_model.represent(tiny_prompt.input_ids, [])
    with pytest.raises(ValueError, match="history blocks"):
        tiny_model.predict_states(tiny_prompt.input_ids, [_representation(0)] * 2)


@pytest.mark.parametrize("width", [48, 1920])
def test_any_representation_width(tmp_path, width) -> None:
    model = GameStateModel.from_pretrained(save_tiny_game_state(tmp_path, width, seed=3))
    assert model.representation_dim == width
    prompt = build_prompt(model.tokenizer, [HistoryTurn("a", GameStates())], "b")
    out = model.represent(prompt.input_ids, [_representation(2, width)])
    assert out.shape == (1, NUM_QUERY_TOKENS, width)


def test_generation_injects_history(tiny_model, tiny_prompt) -> None:
    """The first generated token follows the prefill logits *with* history injected."""
    history = [_representation(5)]
    with torch.no_grad():
        _, embeds = tiny_model.embed_prompt(tiny_prompt.input_ids, history)
        logits = tiny_model.llm(inputs_embeds=embeds).logits[:, -1]
    expected = LogitsProcessorList([FrameTokenRule()])(tiny_prompt.input_ids, logits).argmax(-1)
    generated = tiny_model.generate_state_ids(tiny_prompt.input_ids, history, max_new_tokens=1)
    assert generated.tolist() == expected.tolist()


def test_predict_states_reads_the_first_tokens_of_the_full_generation(
        tiny_model, tiny_prompt, monkeypatch, caplog) -> None:
    history = [_representation(7)]
    full = tiny_model.generate_state_ids(tiny_prompt.input_ids, history, max_new_tokens=40)
    assert STATE_TOKENS_GENERATED <= full.shape[0] <= 40
    calls = []
    original = tiny_model.generate_state_ids

    def spy(*args, **kwargs):
        calls.append(original(*args, **kwargs))
        return calls[-1]

    monkeypatch.setattr(tiny_model, "generate_state_ids", spy)
    with caplog.at_level(logging.WARNING):
        states = tiny_model.predict_states(tiny_prompt.input_ids, history)
    assert torch.equal(calls[0], full[:STATE_TOKENS_GENERATED])
    assert states == (parse_state_ids(full.tolist()) or GameStates())


def test_predict_states_malformed_gives_zeros_and_warns(tiny_model, tiny_prompt, monkeypatch,
                                                       caplog) -> None:
    monkeypatch.setattr(tiny_model, "generate_state_ids",
                        lambda *a, **k: torch.tensor([5, 6, 7]))
    with caplog.at_level(logging.WARNING, logger="animegamer.models.game_state"):
        assert tiny_model.predict_states(tiny_prompt.input_ids, [_representation(0)]) == (
            GameStates(0, 0, 0, 0))
    assert "malformed" in caplog.text


def test_predict_states_well_formed(tiny_model, tiny_prompt, monkeypatch) -> None:
    monkeypatch.setattr(tiny_model, "generate_state_ids",
                        lambda *a, **k: torch.tensor(_states_ids(4, -3, 2, 0)[:10]))
    assert tiny_model.predict_states(tiny_prompt.input_ids, [_representation(0)]) == (
        GameStates(4, -3, 2, 0))


def test_bfloat16_path(tmp_path, tiny_model, tiny_prompt) -> None:
    model = GameStateModel.from_pretrained(save_tiny_game_state(tmp_path), dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16
    history = [_representation(0)]
    out = model.represent(tiny_prompt.input_ids, history)
    assert out.dtype == torch.bfloat16 and out.shape == (1, NUM_QUERY_TOKENS, 64)
    reference = tiny_model.represent(tiny_prompt.input_ids, history)
    assert (out.float() - reference).abs().max() < 0.05
    assert isinstance(model.predict_states(tiny_prompt.input_ids, history), GameStates)


# ---- reference: the release's MLLM on seeded tiny weights ----


@pytest.fixture(scope="module")
def reference_model(reference_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("converted")
    mllm = reference_dir / "mllm"
    convert_mllm(mllm / "release" / "pytorch_model.bin", mllm / "base_llm", out)
    return GameStateModel.from_pretrained(out)


@pytest.fixture(scope="module")
def reference_io(reference_dir):
    return load_file(reference_dir / "mllm" / "mllm_io.safetensors")


def _history(tensors, case: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
    ids = tensors[f"{case}/bi_input_ids"]
    count = len(Prompt.from_ids(ids).history_blocks)
    return ids, [tensors[f"{case}/bi_video_embeds"][0, j] for j in range(count)]


@pytest.mark.reference
@pytest.mark.parametrize("case", CASES)
def test_reference_representation(reference_model, reference_io, case) -> None:
    ids, history = _history(reference_io, case)
    _, embeds = reference_model.embed_prompt(ids, history)
    torch.testing.assert_close(embeds, reference_io[f"{case}/bi_inputs_embeds"],
                               rtol=0, atol=TOLERANCE)
    out = reference_model.represent(ids, history)
    assert (out - reference_io[f"{case}/bi_vid_output"]).abs().max() <= TOLERANCE


@pytest.mark.reference
@pytest.mark.parametrize("case", CASES)
def test_reference_prefill_logits(reference_model, reference_io, case) -> None:
    """W=1: the release's logits. w2_t1: what the release gives with history injected (it fed
    plain token embeddings because of a transformers 4.44 quirk; we inject as in training)."""
    ids, history = _history(reference_io, case)
    with torch.no_grad():
        _, embeds = reference_model.embed_prompt(ids, history)
        logits = reference_model.llm(inputs_embeds=embeds).logits[:, -1]
    key = ("gen_alt_prefill_last_logits_if_inputs_embeds_used" if history
           else "gen_prefill_last_logits")
    assert (logits - reference_io[f"{case}/{key}"]).abs().max() <= TOLERANCE


@pytest.mark.reference
@pytest.mark.parametrize("case", ["w1_t0", "w1_t1", "w2_t0"])
def test_reference_greedy_sequences(reference_model, reference_io, case) -> None:
    ids, history = _history(reference_io, case)
    generated = reference_model.generate_state_ids(ids, history)
    expected = reference_io[f"{case}/gen_sequences"][0, ids.shape[1]:]
    assert torch.equal(generated, expected)
    assert reference_model.predict_states(ids, history) == GameStates(0, 0, 0, 0)


@pytest.mark.reference
def test_reference_first_token_with_history(reference_model, reference_io) -> None:
    ids, history = _history(reference_io, "w2_t1")
    logits = reference_io["w2_t1/gen_alt_prefill_last_logits_if_inputs_embeds_used"].clone()
    expected = FrameTokenRule()(ids, logits).argmax(-1)
    generated = reference_model.generate_state_ids(ids, history, max_new_tokens=1)
    assert generated.tolist() == expected.tolist()


@pytest.mark.reference
def test_reference_manifest_states_are_zero(reference_dir) -> None:
    manifest = json.loads((reference_dir / "mllm" / "mllm_manifest.json").read_text())
    assert all(t["pred_character_states"] == [0, 0, 0, 0] for t in manifest["turns"].values())
