"""The evaluation command: metrics on tiny random backbones, games played on the preview engine,
resume, the report's escaping, and --compare."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from animegamer.data import dataset, layout
from animegamer.data.flow import MotionLevels
from animegamer.evaluate import backbones
from animegamer.evaluate.__main__ import main
from animegamer.evaluate.backbones import FeatureCache, load_dreamsim, tiny_clip
from animegamer.evaluate.benchmark import (
    TURNS_FILE,
    BenchmarkError,
    BenchmarkRunner,
    RunOptions,
    levels_from_values,
    load_benchmark,
    read_turns,
)
from animegamer.evaluate.metrics import (
    JUDGE_CRITERIA,
    JudgeAnswerError,
    TurnSample,
    TurnScorer,
    dreamsim_similarity,
    game_interval,
    judge_turn,
    level_errors,
    mean_cosine,
    paired_interval,
    parse_judge_answer,
    sample_indices,
    state_errors,
    state_sign_accuracy,
)
from animegamer.evaluate.reporting import worst_turns, write_report
from animegamer.game.rules import GameStates, make_instruction
from animegamer.video.writer import write_mp4

REPO = Path(__file__).resolve().parents[1]
LEVELS = MotionLevels((1.0, 2.0, 3.0, 4.0), (0.5, 1.5, 2.5, 3.5, 4.5))
HOSTILE_GAME = "<img src=x onerror=alert(1)>"
GOOD_ANSWER = json.dumps({name: 7 for name in JUDGE_CRITERIA})
JUDGE_TEMPLATE = (REPO / "animegamer/evaluate/prompts/judge.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def clip():
    return tiny_clip()


def _frames(seed: int, count: int = 17, height: int = 32, width: int = 48) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (count, height, width, 3), dtype=np.uint8)


def _instruction(motion: str = "walk", time: str = "day", place: str = "town"):
    return make_instruction({"character": "Nano", "adverb": "slowly", "motion": motion,
                             "time": time, "place": place})


def _fake_distance(first: np.ndarray, second: np.ndarray) -> torch.Tensor:
    """A stand-in for DreamSim: mean absolute pixel difference in [0, 1]."""
    diff = np.abs(first.astype(np.float64) - second.astype(np.float64)) / 255
    return torch.tensor(diff.reshape(len(first), -1).mean(axis=1))


# ---- metric functions ----

def test_identical_images_have_clip_i_one_and_different_ones_less(clip):
    image = _frames(0, 1)
    embeds = clip.image_embeds(np.repeat(image, 3, axis=0))
    assert mean_cosine(embeds, clip.image_embeds(image)[0]) == pytest.approx(1.0, abs=1e-5)
    assert torch.allclose(embeds.norm(dim=-1), torch.ones(3))
    other = clip.image_embeds(_frames(1, 1))[0]
    assert mean_cosine(embeds, other) < 1.0 - 1e-4


def test_mean_cosine_hand_cases():
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    assert mean_cosine(a, torch.tensor([1.0, 0.0])) == pytest.approx(0.5)
    assert mean_cosine(a, torch.tensor([[-1.0, 0.0], [0.0, 1.0]])) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="pair"):
        mean_cosine(a, torch.zeros(3, 2))


def test_level_and_state_errors():
    assert level_errors(3, 3) == (1.0, 0.0)
    assert level_errors(1, 4) == (0.0, 3.0)
    assert state_errors((1, 0, -1), (1, 2, -1)) == pytest.approx((2 / 3, 2 / 3))
    assert state_errors((0, 0, 0), (0, 0, 0)) == (1.0, 0.0)
    assert state_sign_accuracy((2, 0, -1), (1, 1, -5)) == pytest.approx(2 / 3)
    assert state_sign_accuracy((0, 3, -2), (0, 1, -1)) == 1.0
    with pytest.raises(ValueError):
        state_sign_accuracy((1,), (1, 0))
    with pytest.raises(ValueError):
        state_errors((1, 2), (1, 2, 3))


def test_dreamsim_similarity_and_skip_note(tmp_path, monkeypatch):
    images = _frames(2, 3)
    assert dreamsim_similarity(_fake_distance, images, images) == pytest.approx(1.0)
    assert dreamsim_similarity(_fake_distance, images, images[:1]) < 1.0
    monkeypatch.setattr(backbones.importlib.util, "find_spec", lambda name: None)
    distance, note = load_dreamsim(tmp_path)
    assert distance is None and note.startswith("skipped:") and "not installed" in note


def test_sample_indices_and_levels_from_values():
    assert sample_indices(17, 4) == [0, 5, 11, 16]
    assert sample_indices(2, 4) == [0, 1]
    levels = levels_from_values((0.5, 1.0, 5.0, 20.0, 40.0))
    assert [levels.level(s) for s in (0.5, 0.8, 2.0, 3.0, 30.0, 40.0)] == [1, 2, 2, 3, 5, 5]
    assert levels.value(5) == 40.0


def test_scorer_hand_checkable_turn(clip, tmp_path):
    frame = _frames(3, 1, 40, 60)
    scorer = TurnScorer(clip, FeatureCache(tmp_path), LEVELS, frame[0], _fake_distance)
    sample = TurnSample(
        frames=np.repeat(frame, 2, axis=0), scope=2.5, instruction=_instruction(),
        played_level=4, predicted=GameStates(ml=4, sc=1, et=0, st=-1), target_level=5,
        target_states=(1, 2, -1), ground_truth=np.repeat(frame, 2, axis=0),
        previous_frame=frame[0],
    )
    (result,) = scorer.score([sample])
    assert result["clip_c"] == pytest.approx(1.0, abs=1e-5)
    assert result["clip_i_ref"] == pytest.approx(1.0, abs=1e-5)
    assert result["clip_i_gt"] == pytest.approx(1.0, abs=1e-5)
    assert result["dreamsim_ref"] == pytest.approx(1.0) and result["dreamsim_gt"] == 1.0
    assert (result["generated_level"], result["target_level"]) == (3, 5)
    assert (result["acc_f"], result["mae_f"]) == (0.0, 2.0)
    assert result["acc_s"] == pytest.approx(2 / 3) and result["mae_s"] == pytest.approx(2 / 3)
    texts = clip.text_embeds([sample.instruction.text, "day, town"])
    image = clip.image_embeds(frame)[0]
    assert result["clip_t"] == pytest.approx(float(texts[0] @ image), abs=1e-5)
    assert result["clip_te"] == pytest.approx(float(texts[1] @ image), abs=1e-5)
    assert len(list(tmp_path.glob("*.safetensors"))) == 4  # reference, 2 texts, ground truth


def test_free_play_target_is_the_played_level(clip, tmp_path):
    scorer = TurnScorer(clip, FeatureCache(tmp_path), LEVELS, None)
    sample = TurnSample(frames=_frames(4, 2), scope=0.7, instruction=_instruction(),
                        played_level=2, predicted=GameStates(ml=2))
    (result,) = scorer.score([sample])
    assert (result["generated_level"], result["target_level"], result["mae_f"]) == (1, 2, 1.0)
    assert result["clip_i_ref"] is None and result["acc_s"] is None
    assert result["clip_c"] is None  # a game's first turn has no previous frame


def test_judge_answers_are_parsed_strictly():
    assert parse_judge_answer(GOOD_ANSWER) == {name: 7 for name in JUDGE_CRITERIA}
    assert parse_judge_answer(f"```json\n{GOOD_ANSWER}\n```")["overall"] == 7
    bad = {name: 7 for name in JUDGE_CRITERIA}
    for broken, reason in (
        ("Overall: 7", "not JSON"), (json.dumps({**bad, "overall": 11}), "1..10"),
        (json.dumps({**bad, "overall": 7.5}), "whole number"),
        (json.dumps({k: v for k, v in bad.items() if k != "state_update"}), "keys"),
    ):
        with pytest.raises(JudgeAnswerError, match=reason):
            parse_judge_answer(broken)
    missing = judge_turn(lambda frames, prompt: "I'd say 8/10", _frames(5, 2), "prompt")
    assert missing["judge_overall"] is None and "unparsable" in str(missing["judge_missing"])
    scored = judge_turn(lambda frames, prompt: GOOD_ANSWER, _frames(5, 2), "prompt")
    assert scored["judge_state_update"] == 7.0 and "judge_missing" not in scored


def test_shipped_benchmarks_are_three_games_of_ten_turns():
    for name, character in (("qiqi", "Qiqi"), ("sosuke", "Sosuke"), ("nano", "Qiqi")):
        benchmark = load_benchmark(REPO / "benchmarks/games" / f"{name}.json", character)
        assert [len(game.turns) for game in benchmark.games] == [10, 10, 10]
        assert all(t.instruction.character == character
                   for game in benchmark.games for t in game.turns)
    with pytest.raises(BenchmarkError, match="not Sosuke"):
        load_benchmark(REPO / "benchmarks/games/qiqi.json", "Sosuke")


# ---- playing games on the preview engine ----

def _write_benchmark(path: Path) -> Path:
    turns = [
        {"adverb": "slowly", "motion": "walk", "time": "day", "place": "town"},
        {"adverb": "happily", "motion": 'jump "high" & <b>away</b>', "time": "day",
         "place": "grass", "states": [1, 0, -1], "motion_level": 2},
        {"adverb": "gently", "motion": "wave hand", "time": "night", "place": "street"},
        {"adverb": "quickly", "motion": "run", "time": "night", "place": "street"},
    ]
    data = {"character": "Nano", "games": [{"id": HOSTILE_GAME, "turns": turns},
                                           {"id": "second", "turns": turns[::-1]}]}
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _judge(frames: np.ndarray, prompt: str) -> str:
    return "no idea" if "wave hand" in prompt.split("This turn's instruction:")[1] else GOOD_ANSWER


def _runner(engine, clip, out: Path, levels: MotionLevels = LEVELS, window: int = 2,
            reference: np.ndarray | None = None, flush_every: int = 10) -> BenchmarkRunner:
    scorer = TurnScorer(clip, FeatureCache(out / "cache" / "features"), levels, reference)
    options = RunOptions(out, window=window, steps=1, frames_per_turn=3, progress=False,
                         flush_every=flush_every)
    return BenchmarkRunner(engine, "Nano", scorer, options, _judge, JUDGE_TEMPLATE)


@pytest.fixture(scope="module")
def json_run(preview_engine, clip, tmp_path_factory):
    root = tmp_path_factory.mktemp("json-run")
    benchmark = load_benchmark(_write_benchmark(root / "bench.json"), "Nano", turns=3)
    out = root / "out"
    records = _runner(preview_engine, clip, out, reference=_frames(6, 1)[0]).run(benchmark)
    write_report(out, records, {"character": "Nano", "window": 2, "engine": "preview",
                                "clip": "tiny"})
    return benchmark, out, records


def test_json_games_are_played_scored_and_reported(json_run):
    _, out, records = json_run
    assert [(r["game"], r["turn"]) for r in records] == [
        (HOSTILE_GAME, 1), (HOSTILE_GAME, 2), (HOSTILE_GAME, 3),
        ("second", 1), ("second", 2), ("second", 3)]
    assert len((out / TURNS_FILE).read_text().splitlines()) == 6
    metrics = json.loads((out / "metrics.json").read_text())
    summary = metrics["summary"]
    assert metrics["meta"]["turns"] == 6 and metrics["meta"]["games"] == 2
    assert summary["clip_t"]["count"] == 6 and summary["clip_i_ref"]["count"] == 6
    assert summary["acc_s"]["count"] == 2  # only the turns whose file gives states
    assert set(summary["clip_t"]["by_turn"]) == {"1", "2", "3"}
    assert summary["seconds_per_turn"]["mean"] > 0 and summary["peak_memory_mb"]["max"] > 0
    judged = [r for r in records if r["judge_overall"] is not None]
    assert len(judged) == 4 and len(metrics["judge_missing"]) == 2
    target_given = next(r for r in records if r["instruction"]["place"] == "grass")
    assert target_given["target_level"] == 2
    assert all((out / r["generated_frames"]).is_file() for r in records)
    assert all(r["truth_frames"] is None for r in records)
    assert [r["clip_c"] is None for r in records] == [True, False, False] * 2


def test_the_report_escapes_what_players_typed(json_run):
    _, out, _ = json_run
    page = (out / "report.html").read_text()
    assert HOSTILE_GAME not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert 'jump &quot;high&quot; &amp; baway/b' in page
    assert page.count("<svg") >= 8 and "Worst five turns" in page
    markdown = (out / "report.md").read_text()
    assert "| semantic consistency | CLIP-T |" in markdown and "0.4161" in markdown
    assert markdown.count("**Warning**") == 2 and "mean nothing" in page


def test_worst_turns_order(json_run):
    _, _, records = json_run
    worst = worst_turns(records, "clip_t", 3)
    assert [r["clip_t"] for r in worst] == sorted(r["clip_t"] for r in records)[:3]
    assert worst_turns(records, "mae_f", 1)[0]["mae_f"] == max(r["mae_f"] for r in records)


def test_a_rerun_plays_only_the_missing_turns_with_the_same_history(
        json_run, preview_engine, clip, monkeypatch, tmp_path):
    benchmark, out, records = json_run
    assert not (out / "cache/representations").exists() or not any(
        (out / "cache/representations").iterdir())  # finished games keep no representations
    game = dataclasses.replace(benchmark, games=benchmark.games[:1])
    played = []
    original = type(preview_engine).play

    def interrupted(engine, session, instruction, **kwargs):
        if len(session.turns) == 2:
            raise KeyboardInterrupt
        return original(engine, session, instruction, **kwargs)

    monkeypatch.setattr(type(preview_engine), "play", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _runner(preview_engine, clip, tmp_path, flush_every=1).run(game)
    assert sorted(read_turns(tmp_path)) == [(HOSTILE_GAME, 1), (HOSTILE_GAME, 2)]

    def counting(engine, session, instruction, **kwargs):
        played.append((len(session.turns), instruction.motion))
        return original(engine, session, instruction, **kwargs)

    monkeypatch.setattr(type(preview_engine), "play", counting)
    again = _runner(preview_engine, clip, tmp_path).run(game)
    assert played == [(2, "wave hand")]  # resumed after two rebuilt turns
    assert [r["turn"] for r in again] == [1, 2, 3]
    # the same history gives the same turn as the uninterrupted run
    assert again[2]["predicted_states"] == records[2]["predicted_states"]
    assert again[2]["clip_t"] == pytest.approx(records[2]["clip_t"], abs=1e-5)
    assert again[2]["clip_c"] == pytest.approx(records[2]["clip_c"], abs=1e-5)
    played.clear()
    assert len(_runner(preview_engine, clip, out).run(benchmark)) == 6 and played == []


# ---- a dataset's test split, teacher-forced ----

@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("dataset")
    rows = []
    shots = [("ep-a", 0, "walk", 1, (1, 0, 0)), ("ep-a", 1, "run", 4, (0, 1, -2)),
             ("ep-b", 0, "sit", 2, (0, 0, 1))]
    for number, (episode, index, motion, level, (sc, et, st)) in enumerate(shots):
        clip = f"clips/v/shot{number}.mp4"
        write_mp4(_frames(10 + number, 17, 32, 48), folder / clip)
        rows.append({
            "shot_id": f"shot{number}", "video": "v.mp4", "start": float(number),
            "episode_id": episode, "episode_index": index, "character": "Nano",
            "adverb": "slowly", "motion": motion, "time": "day", "place": "town",
            "instruction": _instruction(motion).text, "motion_scope": 1.0,
            "motion_level": level, "sc": sc, "et": et, "st": st, "clip_path": clip,
            "features_path": None,
        })
    dataset.write_splits(folder, {"test": rows})
    (folder / layout.LEVELS).write_text(json.dumps(LEVELS.to_dict()))
    from PIL import Image

    Image.fromarray(_frames(20, 1)[0]).save(folder / "reference.png")
    return folder


def test_dataset_games_are_teacher_forced(preview_engine, clip, tiny_dataset, tmp_path):
    benchmark = load_benchmark(tiny_dataset, "Nano")
    assert [g.game_id for g in benchmark.games] == ["ep-a", "ep-b"]
    assert benchmark.levels == LEVELS and benchmark.reference is not None
    records = _runner(preview_engine, clip, tmp_path, benchmark.levels).run(benchmark)
    assert [r["target_level"] for r in records] == [1, 4, 2]
    # teacher forcing: each turn enters the game's history with the dataset's states, whatever
    # the model predicted
    assert [r["history_states"] for r in records] == [
        {"ml": 1, "sc": 1, "et": 0, "st": 0, "unreadable": False},
        {"ml": 4, "sc": 0, "et": 1, "st": -2, "unreadable": False},
        {"ml": 2, "sc": 0, "et": 0, "st": 1, "unreadable": False},
    ]
    assert all(r["clip_i_gt"] is not None and -1 <= r["clip_i_gt"] <= 1 for r in records)
    truths = [(1, 0, 0), (0, 1, -2), (0, 0, 1)]
    for record, truth in zip(records, truths, strict=True):
        predicted = [record["predicted_states"][name] for name in ("sc", "et", "st")]
        # ACC-S, MAE-S and sign accuracy by their definitions, over the three deltas
        same = [p == t for p, t in zip(predicted, truth, strict=True)]
        errors = [abs(p - t) for p, t in zip(predicted, truth, strict=True)]
        signs = [np.sign(p) == np.sign(t) for p, t in zip(predicted, truth, strict=True)]
        assert record["acc_s"] == pytest.approx(sum(same) / 3)
        assert record["mae_s"] == pytest.approx(sum(errors) / 3)
        assert record["acc_s_sign"] == pytest.approx(sum(signs) / 3)
    assert all((tmp_path / r["truth_frames"]).is_file() for r in records)
    write_report(tmp_path, records, {"character": "Nano"})
    assert "ground truth" in (tmp_path / "report.html").read_text()
    from PIL import Image

    grid = Image.open(tmp_path / "grid.png")
    strip = Image.open(tmp_path / records[0]["generated_frames"])
    assert grid.size == (300 + strip.width, strip.height * len(records))
    row = np.asarray(grid.convert("RGB"))[: strip.height]
    assert np.array_equal(row[:, 300:], np.asarray(strip.convert("RGB")))
    assert (row[:, :300] < 128).any()  # the instruction is written beside its frames


def test_the_interval_resamples_whole_games():
    """Games whose turns all agree: resampling turns would make the interval as narrow as
    the 10 turns allow; resampling games gives the spread of the 2 game means."""
    records = [{"game": game, "turn": turn, "hit": value}
               for game, value in (("a", 1.0), ("b", 0.0)) for turn in range(1, 6)]
    assert game_interval(records, "hit") == [0.0, 1.0]
    many = [{"game": f"g{g}", "turn": 1, "hit": float(g % 2)} for g in range(200)]
    low, high = game_interval(many, "hit")
    assert 0.42 < low < 0.5 < high < 0.58
    assert game_interval(many, "hit") == [low, high]  # deterministic
    assert game_interval(records[:5], "hit") is None  # one game
    assert game_interval([{**r, "hit": None} for r in records], "hit") is None


def test_the_paired_interval_cancels_what_games_share():
    """Two runs on the same games, the second 0.05 lower on every turn: the games' own spread
    (all hits or all misses) widens each run's interval to [0, 1], not the difference's."""
    first = [{"game": game, "turn": turn, "hit": value}
             for game, value in (("a", 1.0), ("b", 0.0), ("c", 1.0)) for turn in (1, 2)]
    second = [{**record, "hit": record["hit"] - 0.05} for record in first]
    assert game_interval(first, "hit") == [0.0, 1.0]
    low, high = paired_interval(first, second, "hit")
    assert low == pytest.approx(-0.05) and high == pytest.approx(-0.05)
    elsewhere = [{**record, "game": "other"} for record in second]
    assert paired_interval(first, elsewhere, "hit") is None  # no game in common
    assert paired_interval(first, second[:2], "hit") is None  # one game in common


def test_the_report_gives_each_mean_its_interval(json_run):
    _, out, records = json_run
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("clip_t", "seconds_per_turn"):
        low, high = metrics["summary"][key]["interval"]
        assert low <= metrics["summary"][key]["mean"] <= high
        assert [low, high] == game_interval(records, key)
    row = next(line for line in (out / "report.md").read_text().splitlines()
               if line.startswith("| semantic consistency | CLIP-T |"))
    low, high = metrics["summary"]["clip_t"]["interval"]
    assert f"| [{low:.2f}, {high:.2f}] | 6 |" in row
    page = (out / "report.html").read_text()
    assert f"<td>[{low:.2f}, {high:.2f}]</td><td>6</td>" in page


def test_compare_writes_both_reports_side_by_side(json_run, tmp_path):
    _, out, _ = json_run
    other = tmp_path / "other"
    other.mkdir()
    metrics = json.loads((out / "metrics.json").read_text())
    metrics["summary"]["clip_t"]["mean"] += 0.25
    metrics["summary"]["mae_f"]["mean"] += 1.0
    (other / "metrics.json").write_text(json.dumps(metrics))
    turns = [json.loads(line) for line in (out / TURNS_FILE).read_text().splitlines()]
    (other / TURNS_FILE).write_text("".join(
        json.dumps({**turn, "clip_t": turn["clip_t"] + 0.25}) + "\n" for turn in turns))
    assert main(["--compare", str(out), str(other), "--out", str(tmp_path / "cmp")]) == 0
    text = (tmp_path / "cmp/compare.md").read_text()
    assert "| metric | A | B | B − A |  | 95 % (paired games) |" in text
    assert "| CLIP-T |" in text and "+0.2500 | better | [+0.25, +0.25] |" in text
    assert "+1.0000 | worse | [+0.00, +0.00] |" in text  # MAE-F changed in metrics.json only
    page = (tmp_path / "cmp/compare.html").read_text()
    assert '<td class="better">+0.2500</td><td>[+0.25, +0.25]</td>' in page


def test_the_command_runs_a_window_study(preview_engine, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("animegamer.evaluate.evaluation.create_preview_engine",
                        lambda settings: preview_engine)
    out = tmp_path / "study"
    code = main(["--character", "Qiqi", "--benchmark", str(REPO / "benchmarks/games/nano.json"),
                 "--out", str(out), "--engine", "preview", "--clip", "tiny", "--turns", "1",
                 "--limit", "1", "--steps", "1", "--window", "1", "2", "--no-progress"])
    assert code == 0
    for window in (1, 2):
        metrics = json.loads((out / f"window-{window}/metrics.json").read_text())
        assert metrics["meta"]["window"] == window and metrics["meta"]["turns"] == 1
        assert metrics["meta"]["reference"].endswith("qiqi.png")  # the registry's avatar
        assert "geometric" in metrics["meta"]["levels"]
    table = (out / "windows.md").read_text()
    assert "| metric | window 1 | window 2 |" in table and "| CLIP-C |" in table
    assert "window study" in capsys.readouterr().out


def test_the_command_refuses_a_missing_benchmark(tmp_path, capsys):
    code = main(["--character", "Nano", "--benchmark", str(tmp_path / "nothing.json"),
                 "--out", str(tmp_path / "out"), "--engine", "preview", "--clip", "tiny"])
    assert code == 2 and "neither a benchmark file nor a dataset" in capsys.readouterr().err


# ---- the Nano world's probes ----

def test_probe_scores_of_a_rendered_shot_agree_with_its_instruction():
    from animegamer.evaluate.metrics import probe_scores
    from animegamer.nano.probes import NanoProbes
    from animegamer.nano.renderer import NanoRenderer, WorldState

    instruction = make_instruction({"character": "Sosuke", "adverb": "quickly",
                                    "motion": "run along the road", "time": "evening",
                                    "place": "city street"})
    shot = NanoRenderer().render(instruction, WorldState(30.0, 0.0, 1, "day", "town"))
    scores = probe_scores(NanoProbes(), shot.frames, instruction)
    assert scores["probe_labels"] == {"time": "evening", "place": "street",
                                      "character": "Sosuke", "motion": "travel"}
    assert [scores[f"probe_{n}"] for n in ("time", "place", "character", "motion")] == [1.0] * 4
    other = make_instruction({**instruction.fields(), "character": "Nano", "time": "night"})
    wrong = probe_scores(NanoProbes(), shot.frames, other)
    assert wrong["probe_character"] is None and wrong["probe_time"] == 0.0


def test_a_probed_run_reports_the_world_probes(preview_engine, clip, json_run, tmp_path):
    from animegamer.nano.probes import NanoProbes

    benchmark, out, _ = json_run
    first = dataclasses.replace(benchmark, games=benchmark.games[1:])
    runner = _runner(preview_engine, clip, tmp_path)
    runner.probes = NanoProbes()
    records = runner.run(first)
    assert all(r["probe_time"] in (0.0, 1.0) and r["probe_character"] is None for r in records)
    assert all(set(r["probe_labels"]) == {"time", "place", "character", "motion"}
               for r in records)
    metrics = write_report(tmp_path, records, {"character": "Nano", "probes": "nano"})
    summary = metrics["summary"]
    assert summary["probe_place"]["count"] == len(records)
    assert summary["probe_place"]["mean"] == pytest.approx(
        np.mean([r["probe_place"] for r in records]))
    assert summary["probe_character"] == {"mean": None, "count": 0, "interval": None,
                                          "by_turn": {}}
    assert "coarse motion class" in metrics["definitions"]["probe_motion"]
    markdown = (tmp_path / "report.md").read_text()
    assert "| world probes | probe: place |" in markdown
    assert "probe: motion" in (tmp_path / "report.html").read_text()
    unprobed = json.loads((out / "metrics.json").read_text())
    assert not any(key.startswith("probe_") for key in unprobed["definitions"])


def test_probes_run_for_a_nano_models_folder_only(tmp_path):
    from animegamer.characters.conversion.character import LAYOUT_FORMAT, MANIFEST_NAME
    from animegamer.evaluate.__main__ import build_parser, options_from
    from animegamer.evaluate.evaluation import probes_for as probes_of

    def probes_for(*extra: str):
        args = build_parser().parse_args(["--out", str(tmp_path / "out"), "--benchmark",
                                          str(tmp_path / "games.json"), *extra])
        return probes_of(options_from(args))

    nano, other = tmp_path / "nano", tmp_path / "other"
    for folder, world in ((nano, {"world": "nano"}), (other, {})):
        folder.mkdir()
        (folder / MANIFEST_NAME).write_text(json.dumps({"format": LAYOUT_FORMAT,
                                                        "character": "Qiqi", **world}))
    probes, note = probes_for("--character", "Qiqi", "--models", str(nano))
    assert probes is not None and "Nano world" in note
    assert probes_for("--character", "Qiqi", "--models", str(other))[0] is None
    assert probes_for("--character", "Qiqi", "--models", str(nano), "--probes", "none")[0] is None
    assert probes_for("--character", "Qiqi", "--models", str(tmp_path / "missing"))[0] is None
    assert probes_for("--character", "Qiqi", "--probes", "nano")[0] is not None


def test_the_command_reports_the_probes_when_asked(preview_engine, tmp_path, monkeypatch):
    monkeypatch.setattr("animegamer.evaluate.evaluation.create_preview_engine",
                        lambda settings: preview_engine)
    out = tmp_path / "probed"
    code = main(["--character", "Qiqi", "--benchmark", str(REPO / "benchmarks/games/nano.json"),
                 "--out", str(out), "--engine", "preview", "--clip", "tiny", "--turns", "2",
                 "--limit", "1", "--steps", "1", "--probes", "nano", "--no-progress"])
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["meta"]["probes"] == "nano (--probes nano)"
    for name in ("time", "place", "character", "motion"):
        assert metrics["summary"][f"probe_{name}"]["count"] == 2
        assert 0.0 <= metrics["summary"][f"probe_{name}"]["mean"] <= 1.0
    assert "| world probes | probe: character |" in (out / "report.md").read_text()
