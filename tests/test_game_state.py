"""GameStateModel: representation, state generation, the frame-token rule and state parsing."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file
from transformers import LogitsProcessorList, MistralForCausalLM, PreTrainedModel

from animegamer.characters.conversion.mllm import convert_mllm
from animegamer.game import rules as game
from animegamer.game.representation import REPRESENTATION_TOKENS
from animegamer.game.rules import Instruction
from animegamer.models import game_state as game_state_module
from animegamer.models import tokens
from animegamer.models.game_state import (
    GameStateConfig,
    GameStateModel,
    GameStates,
)
from animegamer.models.game_state_defaults import GAME_STATE_CONFIG_NAME
from animegamer.models.generation_rules import FrameTokenRule
from animegamer.models.tiny_game_state import (
    save_tiny_game_state,
    tiny_game_state_model,
    tiny_mistral_config,
)
from animegamer.models.tokens import (
    FRAME0_ID,
    FRAME_END_ID,
    FRAME_ID,
    IMG_END_ID,
    ML_ID,
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
    return torch.randn(REPRESENTATION_TOKENS, width, generator=torch.Generator().manual_seed(seed))


def test_tiny_model_properties(tiny_model) -> None:
    assert isinstance(tiny_model, PreTrainedModel)
    assert isinstance(tiny_model.language_model, MistralForCausalLM)
    assert not hasattr(tiny_model, "llm")
    assert tiny_model.representation_dim == 64 == tiny_model.config.representation_dim
    assert tiny_model.config.representation_source == "last_226"
    assert tiny_model.config.text_config is tiny_model.language_model.config
    assert tiny_model.dtype == torch.float32 and tiny_model.device.type == "cpu"
    assert tiny_model.language_model.config._attn_implementation == "sdpa"
    assert tiny_model.language_model.config.vocab_size == 32284
    assert {name for name, _ in tiny_model.named_children()} == {
        "language_model", "input_resampler", "output_resampler"}


def test_represent_matches_its_definition(tiny_model, tiny_prompt) -> None:
    history = [_representation(0)]
    out = tiny_model.represent(tiny_prompt.input_ids, history)
    assert out.shape == (1, REPRESENTATION_TOKENS, 64) and out.dtype == torch.float32
    # the definition, written out: causal attention, except that the query frame block sees
    # itself whole; the history block holds the input resampler's output
    length, query = tiny_prompt.length, tiny_prompt.query_block
    blocked = torch.ones(length, length).triu(1).bool()
    blocked[query.start:query.stop, query.start:query.stop] = False
    mask = torch.zeros(1, 1, length, length).masked_fill(blocked, torch.finfo(torch.float32).min)
    with torch.no_grad():
        embeds = tiny_model.language_model.get_input_embeddings()(tiny_prompt.input_ids).clone()
        embeds[0, tiny_prompt.history_blocks[0]] = tiny_model.input_resampler(history[0])
        decoder = tiny_model.language_model.model
        hidden = decoder(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
        expected = tiny_model.output_resampler(hidden[:, -REPRESENTATION_TOKENS:])
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-5)


def test_represent_depends_on_history_and_mask(tiny_model, tiny_prompt) -> None:
    a = tiny_model.represent(tiny_prompt.input_ids, [_representation(0)])
    b = tiny_model.represent(tiny_prompt.input_ids, [_representation(1)])
    assert not torch.allclose(a, b)
    with torch.no_grad():
        _, embeds = tiny_model.embed_prompt(tiny_prompt.input_ids, [_representation(0)])
        causal = tiny_model.language_model.model(inputs_embeds=embeds).last_hidden_state
    assert not torch.allclose(tiny_model.output_resampler(causal[:, -REPRESENTATION_TOKENS:]), a)


def test_to_moves_every_part(tmp_path) -> None:
    model = GameStateModel.from_pretrained(save_tiny_game_state(tmp_path))
    assert model.to("meta") is model and model.device.type == "meta"
    modules = (model.language_model, model.input_resampler, model.output_resampler)
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
    assert out.shape == (1, REPRESENTATION_TOKENS, width)


def test_generation_injects_history(tiny_model, tiny_prompt) -> None:
    """The first generated token follows the prefill logits *with* history injected."""
    history = [_representation(5)]
    with torch.no_grad():
        _, embeds = tiny_model.embed_prompt(tiny_prompt.input_ids, history)
        logits = tiny_model.language_model(inputs_embeds=embeds).logits[:, -1]
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
    with caplog.at_level(logging.WARNING, logger="animegamer.models.generation_rules"):
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
    assert out.dtype == torch.bfloat16 and out.shape == (1, REPRESENTATION_TOKENS, 64)
    reference = tiny_model.represent(tiny_prompt.input_ids, history)
    assert (out.float() - reference).abs().max() < 0.05
    assert isinstance(model.predict_states(tiny_prompt.input_ids, history), GameStates)


# ---- the PreTrainedModel: config, save/load, predict, training plumbing, offload ----


def _turn(text: str, states: GameStates) -> SimpleNamespace:
    """A played turn as `predict` reads it (`game.Turn` has these two attributes)."""
    return SimpleNamespace(instruction=text, states=states)


def test_config_is_checked() -> None:
    with pytest.raises(Exception, match="representation_source"):
        GameStateConfig(representation_source="last_226 ")
    with pytest.raises(Exception, match="frame_token_id"):
        GameStateConfig(frame_token_id=5)
    default = GameStateConfig()
    assert default.text_config.vocab_size == tokens.VOCAB_SIZE
    assert (default.representation_dim, default.representation_length) == (1920, 226)


def test_save_pretrained_round_trip(tmp_path, tiny_prompt) -> None:
    model = tiny_game_state_model(48, seed=5, representation_source="queries")
    model.save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        GAME_STATE_CONFIG_NAME, "llm", "resamplers.safetensors", "tokenizer"]
    loaded = GameStateModel.from_pretrained(tmp_path)
    assert loaded.config.representation_source == "queries"
    assert loaded.representation_dim == 48
    own = model.state_dict()
    assert own.keys() == loaded.state_dict().keys()
    assert all(torch.equal(value, loaded.state_dict()[key]) for key, value in own.items())
    assert loaded.tokenizer.get_vocab() == model.tokenizer.get_vocab()
    history = [_representation(3, 48)]
    assert torch.equal(loaded.represent(tiny_prompt.input_ids, history),
                       model.represent(tiny_prompt.input_ids, history))
    assert torch.equal(loaded.generate_state_ids(tiny_prompt.input_ids, history, 12),
                       model.generate_state_ids(tiny_prompt.input_ids, history, 12))
    loaded.save_pretrained(tmp_path / "again")
    assert json.loads((tmp_path / "again" / GAME_STATE_CONFIG_NAME).read_text()) == json.loads(
        (tmp_path / GAME_STATE_CONFIG_NAME).read_text())


def test_a_fresh_model_from_its_config(tiny_prompt) -> None:
    config = GameStateConfig(text_config=tiny_mistral_config().to_dict(), representation_dim=32)
    model = GameStateModel(config).eval()
    assert isinstance(model.language_model, MistralForCausalLM)
    assert model.output_resampler.proj[2].out_features == 32
    assert model.input_resampler.proj[0].in_features == 32
    assert model.language_model.lm_head.weight.data_ptr() != (
        model.get_input_embeddings().weight.data_ptr())
    out = model.represent(tiny_prompt.input_ids, [_representation(0, 32)])
    assert out.shape == (1, REPRESENTATION_TOKENS, 32)
    with torch.no_grad():
        full = model(tiny_prompt.input_ids, [_representation(0, 32)])
        last = model(tiny_prompt.input_ids, [_representation(0, 32)], logits_to_keep=1)
    assert full.logits.shape == (1, tiny_prompt.length, tokens.VOCAB_SIZE) and full.loss is None
    torch.testing.assert_close(last.logits, full.logits[:, -1:], rtol=0, atol=1e-6)
    torch.testing.assert_close(last.representation, out, rtol=0, atol=0)


def test_queries_source_reads_the_target_turns_frame_queries(tiny_prompt) -> None:
    """`queries`: the 226 `<frame_*>` positions of the current turn, which end 3 positions
    before the prompt does (`</frame></img><ML>` follow them); `last_226` ends at `<ML>`."""
    queries = tiny_game_state_model(representation_source="queries")
    release = tiny_game_state_model()
    ids = tiny_prompt.input_ids[0]
    length = ids.shape[0]
    block = queries.representation_positions(tiny_prompt)
    assert (block.start, block.stop) == (length - 3 - REPRESENTATION_TOKENS, length - 3)
    assert ids[block].tolist() == list(range(FRAME0_ID, FRAME0_ID + REPRESENTATION_TOKENS))
    assert ids[block.stop:].tolist() == [FRAME_END_ID, IMG_END_ID, ML_ID]
    assert ids[block.start - 1] == FRAME_ID and block.start > tiny_prompt.history_blocks[0].stop
    last = release.representation_positions(tiny_prompt)
    assert (last.start, last.stop) == (length - REPRESENTATION_TOKENS, length)

    history = [_representation(4)]
    with torch.no_grad():
        _, embeds = queries.embed_prompt(tiny_prompt.input_ids, history)
        hidden = queries.language_model.model(
            inputs_embeds=embeds, attention_mask=attention_mask_4d(tiny_prompt)
        ).last_hidden_state
        at_queries = queries.output_resampler(hidden[:, length - 229:length - 3])
        at_end = queries.output_resampler(hidden[:, length - 226:])
    out = queries.represent(tiny_prompt.input_ids, history)
    torch.testing.assert_close(out, at_queries, rtol=0, atol=1e-6)
    assert not torch.allclose(out, at_end)
    torch.testing.assert_close(release.represent(tiny_prompt.input_ids, history), at_end,
                               rtol=0, atol=1e-6)


def test_predict_is_represent_and_predict_states_on_one_prompt(tiny_model, monkeypatch) -> None:
    past = _turn("Character: A; Motion: slowly walk; Background: day park.",
                 GameStates(3, 1, -1, 2))
    instruction = Instruction("A", "quickly", "run", "night", "sky")
    representation = _representation(6)
    built, seen = [], {}

    def spy(name):
        original = getattr(tiny_model, name)

        def recorded(input_ids, history_representations):
            seen[name] = (input_ids, list(history_representations))
            return original(input_ids, history_representations)

        return recorded

    def counted_build_prompt(*args):
        built.append(tokens.build_prompt(*args))
        return built[-1]

    monkeypatch.setattr(game_state_module, "build_prompt", counted_build_prompt)
    for name in ("represent", "predict_states"):
        monkeypatch.setattr(tiny_model, name, spy(name))
    got, states = tiny_model.predict([(past, representation)], instruction)

    expected = tokens.build_prompt(tiny_model.tokenizer, [HistoryTurn(past.instruction,
                                                                      past.states)],
                                   instruction.text)
    assert len(built) == 1 and torch.equal(built[0].input_ids, expected.input_ids)
    for input_ids, history in seen.values():
        assert input_ids is built[0].input_ids and history == [representation]
    assert torch.equal(got, tiny_model.represent(expected.input_ids, [representation]))
    assert states == tiny_model.predict_states(expected.input_ids, [representation])


def test_predict_without_history_is_the_release_window(tiny_model) -> None:
    text = "Character: A; Motion: quickly run; Background: night sky."
    representation, states = tiny_model.predict([], text)
    prompt = build_prompt(tiny_model.tokenizer, [], text)
    assert torch.equal(representation, tiny_model.represent(prompt.input_ids))
    assert states == tiny_model.predict_states(prompt.input_ids)


def test_gradient_checkpointing_backward_through_the_language_model(tiny_prompt) -> None:
    model = tiny_game_state_model(representation_source="queries").train()
    assert model.supports_gradient_checkpointing
    model.activation_checkpointing_enable()
    assert model.is_activation_checkpointing
    assert all(layer.gradient_checkpointing for layer in model.language_model.model.layers)
    calls = []
    # A pre-hook: the recomputation stops early, once the last tensor it needs is saved again.
    model.language_model.model.layers[0].mlp.register_forward_pre_hook(
        lambda *args: calls.append(1))

    labels = tiny_prompt.input_ids.clone()
    labels[:, :-4] = -100
    out = model(tiny_prompt.input_ids, [_representation(1)], labels=labels)
    target = torch.zeros_like(out.representation)
    loss = out.loss + torch.nn.functional.mse_loss(out.representation, target)
    assert out.logits.shape == (1, tiny_prompt.length, tokens.VOCAB_SIZE)
    assert len(calls) == 1
    loss.backward()
    assert len(calls) == 2, "the checkpointed layer is recomputed in the backward pass"
    for name in ("language_model.model.layers.0.self_attn.q_proj.weight",
                 "language_model.model.embed_tokens.weight", "language_model.lm_head.weight",
                 "input_resampler.proj.0.weight", "output_resampler.proj.2.weight"):
        grad = model.get_parameter(name).grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0, name


def test_low_vram_mode_holds_the_weights_on_the_device_only_during_predict(monkeypatch) -> None:
    model = tiny_game_state_model()
    model.enable_model_cpu_offload("cpu")
    same = [torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b for a, b in zip(
        model.predict([], "x"), tiny_game_state_model().predict([], "x"), strict=True)]
    assert same == [True, True]
    # an execution device told from the CPU, whose moves are recorded but not made
    model._offload_device = torch.device("meta")
    events: list[str] = []
    to = model.to
    generate = model.language_model.generate

    def moved(device, *args, **kwargs):
        events.append(f"to {torch.device(device).type}")
        return model if torch.device(device).type == "meta" else to(device, *args, **kwargs)

    def generated(*args, **kwargs):
        events.append("generate")
        return generate(*args, **kwargs)

    monkeypatch.setattr(model, "to", moved)
    monkeypatch.setattr(model.language_model, "generate", generated)
    model.predict([], "x")
    assert events == ["to meta", "generate", "to cpu"]

    events.clear()
    monkeypatch.setattr(model, "predict_states", lambda *a: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        model.predict([], "x")
    assert events == ["to meta", "to cpu"], "offloaded even when a turn fails"


def test_without_low_vram_mode_predict_moves_nothing(monkeypatch) -> None:
    model = tiny_game_state_model()
    monkeypatch.setattr(model, "to", lambda *a, **k: pytest.fail("moved"))
    model.predict([], "x")


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
        logits = reference_model.language_model(inputs_embeds=embeds).logits[:, -1]
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


def _greedy_with_the_training_mask(model, prompt, history, steps: int) -> list[int]:
    """Greedy decoding within the state grammar that reruns the whole sequence each step under
    `attention_mask_4d` (the query block bidirectional, everything else causal): what one-pass
    decoding of a model trained here must equal."""
    ids, generated, rule = prompt.input_ids, [], FrameTokenRule()
    for _ in range(steps):
        with torch.no_grad():
            extended = Prompt(ids, prompt.history_blocks, prompt.query_block)
            _, embeds = model.embed_prompt(ids, history)
            hidden = model.language_model.model(
                inputs_embeds=embeds, attention_mask=attention_mask_4d(extended)
            ).last_hidden_state
            logits = model.language_model.lm_head(hidden[:, -1])
        scores = rule(ids, logits.float())
        # the state grammar, written out: the fixed tag where it names one, else a strength
        expected = tokens.STATE_GRAMMAR[len(generated)]
        allowed = ([expected] if expected is not None
                   else list(range(tokens.strength_id(-5), tokens.strength_id(5) + 1)))
        next_id = torch.tensor([[max(allowed, key=lambda i: float(scores[0, i]))]])
        generated.append(int(next_id))
        if generated[-1] == tokens.EOS_ID:
            break
        ids = torch.cat([ids, next_id], dim=1)
    return generated


def test_trained_models_predict_in_one_pass_under_the_training_mask(tiny_prompt) -> None:
    # seed 2: weights under which the query block's attention pattern changes the argmax
    model = tiny_game_state_model(seed=2, representation_source="queries")
    history = [_representation(4)]
    representation, generated = model.represent_and_generate(tiny_prompt.input_ids, history)
    torch.testing.assert_close(representation, model.represent(tiny_prompt.input_ids, history),
                               rtol=0, atol=1e-5)
    expected = _greedy_with_the_training_mask(model, tiny_prompt, history,
                                              tokens.STATE_TOKENS_GENERATED)
    assert generated == expected and len(generated) == tokens.STATE_TOKENS_GENERATED
    # the release's path decodes causally: another pattern, here other tokens
    assert generated != model.generate_state_ids(
        tiny_prompt.input_ids, history, max_new_tokens=tokens.STATE_TOKENS_GENERATED
    ).tolist()


def test_predict_takes_the_one_pass_path_for_trained_models(tiny_model, monkeypatch) -> None:
    model = tiny_game_state_model(representation_source="queries")
    model.tokenizer = tiny_model.tokenizer
    state_ids = [tokens.strength_id(2), tokens.ML_END_ID, tokens.SC_ID, tokens.strength_id(1),
                 tokens.SC_END_ID, tokens.ET_ID, tokens.strength_id(0), tokens.ET_END_ID,
                 tokens.ST_ID, tokens.strength_id(-1)]
    monkeypatch.setattr(model, "represent_and_generate",
                        lambda ids, history: (torch.zeros(1, 226, 64), state_ids))
    monkeypatch.setattr(model, "predict_states", lambda *a: pytest.fail("release path used"))
    _, states = model.predict([], "Character: A; Motion: quickly run; Background: night sky.")
    assert states == GameStates(2, 1, 0, -1)
