"""Added tokens, tokenizer builder, prompt builder and 4D masks."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from animegamer.game.representation import REPRESENTATION_TOKENS
from animegamer.game.rules import normalise_field
from animegamer.models.tiny_game_state import build_tiny_base_tokenizer, build_tiny_tokenizer
from animegamer.models.tokens import (
    ADDED_TOKENS,
    BOS_ID,
    FRAME0_ID,
    FRAME_END_ID,
    FRAME_ID,
    IMG_END_ID,
    IMG_ID,
    ML_ID,
    SPECIAL_IDS,
    ST_END_ID,
    TURN_END_ID,
    TURN_ID,
    VOCAB_SIZE,
    GameStates,
    HistoryTurn,
    Prompt,
    TokenizerError,
    add_animegamer_tokens,
    attention_mask_4d,
    build_prompt,
    build_tokenizer,
    check_tokenizer,
    load_tokenizer,
    strength_id,
    strength_value,
)

CASES = ("w1_t0", "w1_t1", "w2_t0", "w2_t1")
REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_tokenizer():
    return build_tiny_tokenizer()


def test_added_token_table() -> None:
    assert len(ADDED_TOKENS) == 284 and VOCAB_SIZE == 32284
    expected = {
        "<frame_00000>": 32000, "<frame_00255>": 32255, "<img>": 32256, "</img>": 32257,
        "<vid>": 32258, "</vid>": 32259, "<frame>": 32260, "</frame>": 32261,
        "<Strength_-5>": 32262, "<Strength_0>": 32267, "<Strength_5>": 32272,
        "<visual>": 32273, "<ML>": 32274, "</ML>": 32275, "<SC>": 32276, "</SC>": 32277,
        "<ET>": 32278, "</ET>": 32279, "<ST>": 32280, "</ST>": 32281, "<TURN>": 32282,
        "</TURN>": 32283,
    }
    for token, token_id in expected.items():
        assert ADDED_TOKENS[token_id - 32000] == token
    assert (IMG_ID, FRAME_ID, FRAME_END_ID, ML_ID, TURN_ID) == (32256, 32260, 32261, 32274, 32282)
    assert len(SPECIAL_IDS) == 17


def test_strength_ids() -> None:
    assert [strength_id(v) for v in (-5, 0, 5)] == [32262, 32267, 32272]
    assert all(strength_value(strength_id(v)) == v for v in range(-5, 6))
    assert strength_value(32261) is None and strength_value(32273) is None
    with pytest.raises(ValueError):
        strength_id(6)


def test_tiny_tokenizer_is_fast_and_complete(tiny_tokenizer) -> None:
    start = time.perf_counter()
    build_tiny_tokenizer()
    assert time.perf_counter() - start < 2.0
    base = build_tiny_base_tokenizer()
    assert len(base) == 32000
    assert base.convert_ids_to_tokens([0, 1, 2]) == ["<unk>", "<s>", "</s>"]
    check_tokenizer(tiny_tokenizer)
    decoder = tiny_tokenizer.added_tokens_decoder
    for offset, token in enumerate(ADDED_TOKENS):
        added = decoder[32000 + offset]
        assert added.content == token
        assert added.special == (32000 + offset in SPECIAL_IDS)
        assert added.normalized == (32000 + offset not in SPECIAL_IDS)
    ids = tiny_tokenizer.encode("<TURN>Character", add_special_tokens=False)
    assert ids[0] == TURN_ID and not tiny_tokenizer.convert_ids_to_tokens(ids[1]).startswith("▁")


def test_whole_word_tokens_keep_the_id_layout() -> None:
    plain = build_tiny_tokenizer()
    worded = build_tiny_tokenizer(("carefully", "fly", "Qiqi"))
    text = "Character: Qiqi; Motion: carefully fly; Background: day forest."
    assert len(worded) == len(plain) == VOCAB_SIZE
    assert worded.convert_ids_to_tokens(worded.encode(text, add_special_tokens=False))[9:15] == [
        ":", "▁Qiqi", ";", "▁M", "o", "t"]
    tokens = worded.tokenize("carefully fly flying")
    assert tokens == ["▁carefully", "▁fly", "▁fly", "i", "n", "g"]
    assert len(plain.tokenize("carefully fly")) == 12
    assert worded.convert_tokens_to_ids("<ML>") == plain.convert_tokens_to_ids("<ML>")
    with pytest.raises(ValueError, match="ASCII letters"):
        build_tiny_tokenizer(("lie down",))


def test_block_strings_encode_to_builder_ids(tiny_tokenizer) -> None:
    frames = "".join(f"<frame_{i:05d}>" for i in range(REPRESENTATION_TOKENS))
    video = tiny_tokenizer.encode(f"<img><frame>{frames}</frame></img>", add_special_tokens=False)
    states = tiny_tokenizer.encode(
        "<ML><Strength_3></ML><SC><Strength_-1></SC><ET><Strength_0></ET><ST><Strength_5></ST>"
        "</ST></TURN>", add_special_tokens=False)
    prompt = build_prompt(tiny_tokenizer, [HistoryTurn("x", GameStates(3, -1, 0, 5))], "y")
    ids = prompt.input_ids[0].tolist()
    start = prompt.history_blocks[0].start - 2
    assert ids[start:start + len(video)] == video
    assert ids[start + len(video):start + len(video) + len(states)] == states


def test_check_rejects_wrong_tokenizers(tmp_path) -> None:
    with pytest.raises(TokenizerError, match="32000"):
        add_animegamer_tokens(build_tiny_tokenizer())
    base = build_tiny_base_tokenizer()
    base.add_tokens(["<extra>"])
    with pytest.raises(TokenizerError):
        add_animegamer_tokens(base)
    shifted = build_tiny_base_tokenizer()
    shifted.add_tokens(list(reversed(ADDED_TOKENS)))
    with pytest.raises(TokenizerError, match="wrong ids"):
        check_tokenizer(shifted)
    build_tiny_base_tokenizer().save_pretrained(tmp_path / "base")
    with pytest.raises(TokenizerError):
        load_tokenizer(tmp_path / "base")


def test_saved_tokenizer_loads_without_sentencepiece_or_protobuf(tiny_tokenizer, tmp_path) -> None:
    tiny_tokenizer.save_pretrained(tmp_path)
    text = "<TURN>Character: Qiqi; Motion: run; Background: day.<img><frame><frame_00007>"
    code = (
        "import sys, json\n"
        "sys.modules['sentencepiece'] = None\n"
        "sys.modules['google.protobuf'] = None\n"
        "from animegamer.models.tokens import load_tokenizer\n"
        f"tok = load_tokenizer({str(tmp_path)!r})\n"
        f"print(json.dumps(tok.encode({text!r}, add_special_tokens=False)))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO_ROOT, timeout=120, check=True)
    assert json.loads(result.stdout.strip().splitlines()[-1]) == tiny_tokenizer.encode(
        text, add_special_tokens=False)


@pytest.mark.parametrize("folder", ["assets/nano/qiqi/tokenizer", "assets/nano/sosuke/tokenizer"])
def test_a_loaded_tokenizer_saves_the_same_files(folder, tmp_path) -> None:
    """A character trained on from a folder re-saves its tokenizer: the same bytes, not the
    loading machine's keys (`is_local`) or another class name."""
    load_tokenizer(REPO_ROOT / folder).save_pretrained(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / name).read_bytes() == (REPO_ROOT / folder / name).read_bytes(), name


def test_prompt_text_is_normalised_like_instruction_fields() -> None:
    assert normalise_field("  Character:\tQiqi;\n Motion:  run <TURN> ") == (
        "Character: Qiqi; Motion: run TURN")
    assert normalise_field("<Strength_3>") == "Strength_3"


def test_prompt_cannot_be_injected(tiny_tokenizer) -> None:
    prompt = build_prompt(tiny_tokenizer, [], "Character: <TURN>Qiqi<ML><Strength_5>; Motion: x")
    ids = prompt.input_ids[0].tolist()
    assert ids.count(TURN_ID) == 1 and ids.count(ML_ID) == 1
    assert not any(32262 <= i <= 32272 for i in ids)


def test_prompt_structure_window_1(tiny_tokenizer) -> None:
    prompt = build_prompt(tiny_tokenizer, [], "Character: Qiqi; Motion: run; Background: day.")
    ids = prompt.input_ids[0].tolist()
    assert prompt.input_ids.shape == (1, len(ids)) and prompt.input_ids.dtype == torch.long
    assert ids[:2] == [BOS_ID, TURN_ID] and prompt.history_blocks == []
    q = prompt.query_block
    assert ids[q] == list(range(FRAME0_ID, FRAME0_ID + REPRESENTATION_TOKENS))
    assert ids[q.start - 2:q.start] == [IMG_ID, FRAME_ID]
    assert ids[q.stop:] == [FRAME_END_ID, IMG_END_ID, ML_ID]


def test_prompt_structure_with_history(tiny_tokenizer) -> None:
    history = [HistoryTurn("Character: A; Motion: walk", GameStates(2, -5, 5, 1)),
               HistoryTurn("Character: A; Motion: run", GameStates(5, 0, -1, -3))]
    prompt = build_prompt(tiny_tokenizer, history, "Character: A; Motion: jump")
    ids = prompt.input_ids[0].tolist()
    assert len(prompt.history_blocks) == 2 and ids.count(TURN_ID) == 3
    for block, turn in zip(prompt.history_blocks, history, strict=True):
        assert ids[block] == list(range(FRAME0_ID, FRAME0_ID + REPRESENTATION_TOKENS))
        states = ids[block.stop + 2:block.stop + 16]
        s = turn.states
        assert states == [32274, strength_id(s.ml), 32275, 32276, strength_id(s.sc), 32277,
                          32278, strength_id(s.et), 32279, 32280, strength_id(s.st), ST_END_ID,
                          ST_END_ID, TURN_END_ID]
        assert ids[block.stop + 16] == TURN_ID
    located = Prompt.from_ids(prompt.input_ids)
    assert located.history_blocks == prompt.history_blocks
    assert located.query_block == prompt.query_block


def test_prompt_from_ids_rejects_broken_blocks(tiny_tokenizer) -> None:
    prompt = build_prompt(tiny_tokenizer, [], "x")
    broken = prompt.input_ids.clone()
    broken[0, prompt.query_block.start + 5] = FRAME0_ID + 7
    with pytest.raises(ValueError, match="frame block"):
        Prompt.from_ids(broken)
    with pytest.raises(ValueError, match="no frame block"):
        Prompt.from_ids(torch.tensor([[BOS_ID, TURN_ID, ML_ID]]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_mask_4d(tiny_tokenizer, dtype) -> None:
    prompt = build_prompt(tiny_tokenizer, [HistoryTurn("a", GameStates())], "b")
    mask = attention_mask_4d(prompt, dtype)
    n = prompt.length
    assert mask.shape == (1, 1, n, n) and mask.dtype == dtype
    blocked = mask[0, 0] == torch.finfo(dtype).min
    assert bool(((mask[0, 0] == 0) | blocked).all())
    expected = ~torch.ones(n, n, dtype=torch.bool).tril()
    q = prompt.query_block
    expected[q, q] = False
    assert torch.equal(blocked, expected)
    h = prompt.history_blocks[0]
    assert bool(blocked[h.start, h.start + 1]), "history blocks stay causal"


# ---- reference (the release's tokenizer and the demo's prompts) ----


@pytest.fixture(scope="module")
def reference_tokenizer(reference_dir):
    from transformers import LlamaTokenizer

    return LlamaTokenizer.from_pretrained(str(reference_dir / "tokenizer"))


@pytest.fixture(scope="module")
def built_tokenizer(reference_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("tokenizer")
    build_tokenizer(reference_dir / "mllm" / "base_llm").save_pretrained(out)
    return load_tokenizer(out)


@pytest.fixture(scope="module")
def reference_io(reference_dir):
    manifest = json.loads((reference_dir / "mllm" / "mllm_manifest.json").read_text())
    tensors = load_file(reference_dir / "mllm" / "mllm_io.safetensors")
    return manifest, tensors


@pytest.mark.reference
def test_added_token_ids_equal_release_tokenizer(built_tokenizer, reference_tokenizer) -> None:
    check_tokenizer(built_tokenizer, mistral_vocab=True)
    assert len(reference_tokenizer) == len(built_tokenizer) == VOCAB_SIZE
    assert built_tokenizer.convert_tokens_to_ids(ADDED_TOKENS) == (
        reference_tokenizer.convert_tokens_to_ids(ADDED_TOKENS))
    assert built_tokenizer.encode("<TURN>Character", add_special_tokens=False) == [32282, 15962]


@pytest.mark.reference
def test_text_encodes_like_release_tokenizer(built_tokenizer, reference_tokenizer,
                                             reference_io) -> None:
    manifest, _ = reference_io
    texts = {t for case in manifest["turns"].values() for t in case["instructions"]}
    texts |= {"Character: Sosuke; Motion: happily eat ramen; Background: evening kitchen.",
              "Motion: ¡olé! naïve café 東京 😀; Background: day/night sky."}
    for text in texts:
        for wrapped in (text, "<TURN>" + text, f"<img><frame><frame_00003>{text}</frame>"):
            assert built_tokenizer.encode(wrapped, add_special_tokens=False) == (
                reference_tokenizer.encode(wrapped, add_special_tokens=False)), wrapped


@pytest.mark.reference
@pytest.mark.parametrize("case", CASES)
def test_prompts_equal_demo_prompts(built_tokenizer, reference_io, case) -> None:
    """The demo wrote zeros in the history state block instead of turn 0's states; turn 0 was
    predicted all zeros too (random weights), so turn 0's own states give the same ids."""
    manifest, tensors = reference_io
    instructions = manifest["turns"][case]["instructions"]
    states = manifest["turns"]["w2_t0"]["pred_character_states"]
    window = int(case[1])
    history = [HistoryTurn(text, GameStates(*states))
               for text in instructions[:-1][-(window - 1):]] if window > 1 else []
    prompt = build_prompt(built_tokenizer, history, instructions[-1])
    assert torch.equal(prompt.input_ids, tensors[f"{case}/bi_input_ids"])
    assert torch.equal(prompt.input_ids, tensors[f"{case}/gen_input_ids"])
    assert torch.equal(attention_mask_4d(prompt), tensors[f"{case}/bi_mask4d"])
    history_mask = torch.zeros(prompt.length, dtype=torch.bool)
    for block in prompt.history_blocks:
        history_mask[block] = True
    assert torch.equal(history_mask, tensors[f"{case}/bi_ids_cmp_mask"][0].bool())


@pytest.mark.reference
def test_legacy_tokenizer_json_normaliser_is_ignored(reference_dir, reference_tokenizer,
                                                      tmp_path) -> None:
    """Mistral's hub folder also ships a tokenizer.json with the legacy Prepend/Replace
    normaliser, which would split `<frame_*>` tokens; the builder must not use it."""
    import shutil

    from tokenizers import normalizers
    from transformers import LlamaTokenizer

    base = tmp_path / "base"
    shutil.copytree(reference_dir / "mllm" / "base_llm", base)
    backend = LlamaTokenizer.from_pretrained(str(base)).backend_tokenizer
    backend.normalizer = normalizers.Sequence(
        [normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    backend.pre_tokenizer = None
    backend.save(str(base / "tokenizer.json"))
    (base / "tokenizer.model").unlink()
    built = build_tokenizer(base)
    check_tokenizer(built, mistral_vocab=True)
    text = "<TURN>Character: Qiqi; Motion: run.<img><frame><frame_00000><frame_00001></frame>"
    assert built.encode(text, add_special_tokens=False) == reference_tokenizer.encode(
        text, add_special_tokens=False)
