"""The paper's metrics (docs/design.md §12), as we define them, and the judge's answer format.

The paper does not publish exact definitions; ours are in `METRICS` (one sentence each, the
report prints them). Every per-turn value is a float or `None` (not measurable for that turn);
a game-level number is the mean over the turns that have one. Pure functions on tensors and
numbers, plus `TurnScorer`, which batches one game's turns through the backbones.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from animegamer.data.flow import MotionLevels
from animegamer.evaluate.backbones import ClipBackbone, DistanceFn, FeatureCache
from animegamer.game.rules import GameStates, Instruction
from animegamer.nano.probes import NanoProbes, probe_agreement

FRAMES_PER_TURN = 4
"""Frames sampled (evenly, first and last included) from every clip for the image metrics."""


@dataclass(frozen=True)
class MetricSpec:
    key: str
    label: str
    group: str
    higher_is_better: bool
    definition: str
    paper: tuple[float, float] | None = None
    """(AnimeGamer, GC) from the paper's table, where it reports this metric."""


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("clip_i_ref", "CLIP-I", "character consistency", True,
               "Mean cosine similarity of the CLIP image embeddings of the sampled generated "
               "frames and of the character's reference image.", (0.8132, 0.7960)),
    MetricSpec("clip_i_gt", "CLIP-I (GT)", "character consistency", True,
               "Mean cosine similarity of the CLIP image embeddings of each sampled generated "
               "frame and the ground-truth frame at the same position (dataset games only)."),
    MetricSpec("clip_c", "CLIP-C", "contextual consistency", True,
               "Mean cosine similarity of the CLIP image embeddings of a turn's first frame and "
               "the previous turn's last frame (turns after the first): whether the game goes on "
               "where it left off (ours; the paper judges this criterion only by its judge)."),
    MetricSpec("dreamsim_ref", "DreamSim", "character consistency", True,
               "1 − the mean DreamSim distance between the sampled generated frames and the "
               "character's reference image.", (0.7403, 0.6416)),
    MetricSpec("dreamsim_gt", "DreamSim (GT)", "character consistency", True,
               "1 − the mean DreamSim distance between each sampled generated frame and the "
               "ground-truth frame at the same position (dataset games only)."),
    MetricSpec("clip_t", "CLIP-T", "semantic consistency", True,
               "Mean cosine similarity of the CLIP text embedding of the whole instruction "
               "sentence and the CLIP image embeddings of the sampled generated frames.",
               (0.4161, 0.3339)),
    MetricSpec("clip_te", "CLIP-T^E", "semantic consistency", True,
               "Mean cosine similarity of the CLIP text embedding of the background "
               "(\"time, place\") and the CLIP image embeddings of the sampled generated frames.",
               (0.4012, 0.3158)),
    MetricSpec("acc_f", "ACC-F", "motion", True,
               "Share of turns whose generated clip's motion level (Farneback motion scope "
               "quantised by the character's levels) equals the target level.", (0.6744, 0.4249)),
    MetricSpec("mae_f", "MAE-F", "motion", False,
               "Mean absolute difference between the generated clip's motion level and the "
               "target level.", (0.4238, 0.7223)),
    MetricSpec("acc_s", "ACC-S", "state update", True,
               "Share of predicted state deltas (social, entertainment, stamina) equal to the "
               "target deltas (dataset games, or benchmark turns that give targets).",
               (0.6773, 0.6779)),
    MetricSpec("acc_s_sign", "ACC-S (sign)", "state update", True,
               "Share of predicted state deltas whose direction (down, none, up) is the target's: "
               "whether the game moves each gauge the right way."),
    MetricSpec("mae_s", "MAE-S", "state update", False,
               "Mean absolute difference between the predicted and the target state deltas.",
               (0.5872, 0.5888)),
    MetricSpec("seconds_per_turn", "s/turn", "cost", False,
               "Mean wall-clock seconds of a turn in the engine (prediction, denoising, "
               "decoding, writing the clip), metrics excluded.", (24.0, float("nan"))),
    MetricSpec("peak_memory_mb", "peak memory (MB)", "cost", False,
               "Peak memory of the evaluation process in MiB after the turn: "
               "torch.cuda.max_memory_allocated on a GPU, the resident set (RSS) on a CPU."),
)
JUDGE_CRITERIA = (
    "overall", "instruction_following", "contextual_consistency", "character_consistency",
    "style_consistency", "state_update",
)
JUDGE_METRICS: tuple[MetricSpec, ...] = tuple(
    MetricSpec(f"judge_{name}", f"judge: {name.replace('_', ' ')}", "judge", True,
               f"The judge model's 1–10 score for {name.replace('_', ' ')}, averaged over the "
               "turns it answered in the required format.")
    for name in JUDGE_CRITERIA
)
PROBE_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("probe_time", "probe: time of day", "world probes", True,
               "Share of turns whose clip's time of day, that of the Nano world background "
               "(every place × time) nearest to the clip's median frame, is the instruction's "
               "(animegamer.nano.probes)."),
    MetricSpec("probe_place", "probe: place", "world probes", True,
               "Share of turns whose clip's place, that of the Nano world background nearest "
               "to the clip's median frame, is the instruction's place (phrases such as "
               "\"grassy hill\" read as their place)."),
    MetricSpec("probe_character", "probe: character", "world probes", True,
               "Share of turns whose clip's character, by the palette votes of the pixels that "
               "differ from the background, is the instruction's (Qiqi or Sosuke)."),
    MetricSpec("probe_motion", "probe: motion", "world probes", True,
               "Share of turns whose clip's coarse motion class (fly, jump, lie, ride, travel, "
               "sit, still), measured on the sprite's height, width and movement, is the "
               "instruction's."),
)
"""The Nano world's probes (`--probes nano`), recorded only when the engine plays that world."""
SPECS = {spec.key: spec for spec in (*METRICS, *JUDGE_METRICS, *PROBE_METRICS)}


def probe_scores(probes: NanoProbes, clip: np.ndarray,
                 instruction: Instruction) -> dict[str, object]:
    """`probe_<name>`: 1.0 when the world probe of the whole clip [F, H, W, 3] agrees with the
    instruction, 0.0 when not, None when the instruction's word is outside the world; and
    `probe_labels`, what each probe read."""
    result = probes.probe(clip)
    agreement = probe_agreement(result, instruction)
    return {**{f"probe_{name}": None if agreed is None else float(agreed)
               for name, agreed in agreement.items()},
            "probe_labels": result.labels()}


def sample_indices(frame_count: int, count: int = FRAMES_PER_TURN) -> list[int]:
    """`count` evenly spaced frame indices, first and last included (fewer for a short clip)."""
    if frame_count < 1:
        raise ValueError("a clip needs at least one frame")
    return sorted({round(i) for i in np.linspace(0, frame_count - 1, min(count, frame_count))})


def mean_cosine(embeds: torch.Tensor, targets: torch.Tensor) -> float:
    """Mean cosine similarity of embeddings [N, D] with one target [D] or paired targets [N, D]."""
    if targets.ndim == 1:
        targets = targets.expand_as(embeds)
    if targets.shape != embeds.shape:
        raise ValueError(f"cannot pair {list(embeds.shape)} with {list(targets.shape)}")
    return float(torch.nn.functional.cosine_similarity(embeds, targets, dim=-1).mean())


def dreamsim_similarity(distance: DistanceFn, images: np.ndarray, targets: np.ndarray) -> float:
    """1 − mean DreamSim distance of images [N, H, W, 3] to one target [1, ...] or N paired."""
    if len(targets) == 1:
        targets = np.repeat(targets, len(images), axis=0)
    return 1.0 - float(distance(images, targets).mean())


def level_errors(generated: int, target: int) -> tuple[float, float]:
    """(ACC-F, MAE-F) of one turn: 1.0 when the levels are equal, and |generated − target|."""
    return float(generated == target), float(abs(generated - target))


def state_errors(predicted: Sequence[int], target: Sequence[int]) -> tuple[float, float]:
    """(ACC-S, MAE-S) of one turn over its deltas (social, entertainment, stamina)."""
    if len(predicted) != len(target) or not target:
        raise ValueError(f"cannot compare states {list(predicted)} and {list(target)}")
    pairs = list(zip(predicted, target, strict=True))
    return (sum(p == t for p, t in pairs) / len(pairs),
            sum(abs(p - t) for p, t in pairs) / len(pairs))


def state_sign_accuracy(predicted: Sequence[int], target: Sequence[int]) -> float:
    """Share of a turn's deltas whose sign (−1, 0, +1) equals the target's."""
    if len(predicted) != len(target) or not target:
        raise ValueError(f"cannot compare states {list(predicted)} and {list(target)}")
    signs = [(p > 0) - (p < 0) == (t > 0) - (t < 0) for p, t in zip(predicted, target, strict=True)]
    return sum(signs) / len(signs)


def state_deltas(states: GameStates) -> tuple[int, int, int]:
    return states.sc, states.et, states.st


INTERVAL_LEVEL = 0.95
INTERVAL_RESAMPLES = 2000


def game_interval(records: Sequence[Mapping[str, Any]], key: str,
                  resamples: int = INTERVAL_RESAMPLES, seed: int = 0) -> list[float] | None:
    """A 95 % interval of the mean of `key` over turns, by resampling whole games with
    replacement (a game's turns share its scene and history, so they are not independent
    draws); None with fewer than two games that have a value. Deterministic for `seed`."""
    games: dict[str, list[float]] = {}
    for record in records:
        if record.get(key) is not None:
            games.setdefault(str(record["game"]), []).append(float(record[key]))
    return _games_resampled(games, resamples, seed)


def paired_interval(first: Sequence[Mapping[str, Any]], second: Sequence[Mapping[str, Any]],
                    key: str, resamples: int = INTERVAL_RESAMPLES,
                    seed: int = 0) -> list[float] | None:
    """A 95 % interval of how much `second`'s mean of `key` exceeds `first`'s, over the turns
    both scored (the same game id and turn), by resampling whole games: two runs on the same
    games, so what a game's character or scene does to both cancels. None with fewer than two
    shared games."""
    before = {(str(r["game"]), int(r["turn"])): float(r[key])
              for r in first if r.get(key) is not None}
    games: dict[str, list[float]] = {}
    for record in second:
        turn = (str(record["game"]), int(record["turn"]))
        if record.get(key) is not None and turn in before:
            games.setdefault(turn[0], []).append(float(record[key]) - before[turn])
    return _games_resampled(games, resamples, seed)


def _games_resampled(games: Mapping[str, Sequence[float]], resamples: int,
                     seed: int) -> list[float] | None:
    """The central 95 % of the turn mean when the games (their turns' values) are drawn with
    replacement `resamples` times."""
    if len(games) < 2:
        return None
    sums = np.array([sum(values) for values in games.values()])
    counts = np.array([len(values) for values in games.values()])
    drawn = np.random.default_rng(seed).integers(0, len(games), (resamples, len(games)))
    means = sums[drawn].sum(1) / counts[drawn].sum(1)
    tail = (1 - INTERVAL_LEVEL) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return [float(low), float(high)]


def summarise(records: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> dict[str, dict]:
    """Per metric: the mean over turns that have a value, their count, a 95 % interval of the
    mean with games resampled (`game_interval`), and the mean by turn index (does quality
    fall as the game goes on?)."""
    summary: dict[str, dict] = {}
    for key in keys:
        values = [(int(r["turn"]), float(r[key])) for r in records if r.get(key) is not None]
        by_turn: dict[int, list[float]] = {}
        for turn, value in values:
            by_turn.setdefault(turn, []).append(value)
        summary[key] = {
            "mean": float(np.mean([v for _, v in values])) if values else None,
            "count": len(values),
            "interval": game_interval(records, key),
            "by_turn": {str(t): float(np.mean(v)) for t, v in sorted(by_turn.items())},
        }
    return summary


@dataclass
class TurnSample:
    """What a turn leaves to score: sampled frames, its texts, and its targets."""

    frames: np.ndarray
    """Sampled generated frames, uint8 [K, H, W, 3]."""
    scope: float
    instruction: Instruction
    played_level: int
    predicted: GameStates
    target_level: int | None = None
    target_states: tuple[int, int, int] | None = None
    ground_truth: np.ndarray | None = None
    """Ground-truth frames at the same positions, uint8 [K, H', W', 3]."""
    previous_frame: np.ndarray | None = None
    """The previous turn's last generated frame, uint8 [H, W, 3] (None on a game's first turn)."""


class TurnScorer:
    """Scores the turns of one game at once: one CLIP batch for every generated frame, cached
    embeddings for the reference, the ground truth and the texts."""

    def __init__(
        self,
        clip: ClipBackbone,
        cache: FeatureCache,
        levels: MotionLevels,
        reference: np.ndarray | None,
        dreamsim: DistanceFn | None = None,
    ) -> None:
        self.clip = clip
        self.cache = cache
        self.levels = levels
        self.reference = reference
        self.dreamsim = dreamsim
        self._reference_embed = (
            None if reference is None else cache.images(clip, reference[None])[0]
        )

    def score(self, samples: Sequence[TurnSample]) -> list[dict[str, float | int | None]]:
        if not samples:
            return []
        images = [s.frames for s in samples]
        images += [s.previous_frame[None] for s in samples if s.previous_frame is not None]
        generated = self.clip.image_embeds(np.concatenate(images))
        previous = iter(generated[sum(len(s.frames) for s in samples):])
        texts = self.cache.texts(self.clip, [s.instruction.text for s in samples])
        backgrounds = self.cache.texts(
            self.clip, [f"{s.instruction.time}, {s.instruction.place}" for s in samples]
        )
        results, start = [], 0
        for index, sample in enumerate(samples):
            embeds = generated[start : start + len(sample.frames)]
            start += len(sample.frames)
            result = self._turn(sample, embeds, texts[index], backgrounds[index])
            if sample.previous_frame is not None:
                result["clip_c"] = mean_cosine(embeds[:1], next(previous))
            results.append(result)
        return results

    def _turn(self, sample: TurnSample, embeds: torch.Tensor, text: torch.Tensor,
              background: torch.Tensor) -> dict[str, float | int | None]:
        level = self.levels.level(sample.scope)
        target_level = sample.played_level if sample.target_level is None else sample.target_level
        acc_f, mae_f = level_errors(level, target_level)
        result: dict[str, float | int | None] = {
            "generated_level": level, "target_level": target_level,
            "clip_i_ref": None if self._reference_embed is None
            else mean_cosine(embeds, self._reference_embed),
            "clip_t": mean_cosine(embeds, text), "clip_te": mean_cosine(embeds, background),
            "acc_f": acc_f, "mae_f": mae_f,
            "clip_i_gt": None, "clip_c": None, "dreamsim_ref": None, "dreamsim_gt": None,
            "acc_s": None, "acc_s_sign": None, "mae_s": None,
        }
        if sample.ground_truth is not None:
            truth = self.cache.images(self.clip, sample.ground_truth)
            result["clip_i_gt"] = mean_cosine(embeds, truth)
        if self.dreamsim is not None:
            if self.reference is not None:
                result["dreamsim_ref"] = dreamsim_similarity(
                    self.dreamsim, sample.frames, self.reference[None]
                )
            if sample.ground_truth is not None:
                result["dreamsim_gt"] = dreamsim_similarity(
                    self.dreamsim, sample.frames, _like(sample.ground_truth, sample.frames)
                )
        if sample.target_states is not None:
            predicted = state_deltas(sample.predicted)
            result["acc_s"], result["mae_s"] = state_errors(predicted, sample.target_states)
            result["acc_s_sign"] = state_sign_accuracy(predicted, sample.target_states)
        return result


def _like(images: np.ndarray, shape_of: np.ndarray) -> np.ndarray:
    """`images` resized to the frames' height and width (DreamSim compares equal sizes)."""
    from PIL import Image

    height, width = shape_of.shape[1:3]
    if images.shape[1:3] == (height, width):
        return images
    return np.stack([np.asarray(Image.fromarray(i).resize((width, height))) for i in images])


# ---- the judge ----

JudgeFn = Callable[[np.ndarray, str], str]
"""A vision-language judge: sampled frames uint8 [K, H, W, 3] and the prompt → its answer."""
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


class JudgeAnswerError(ValueError):
    """A judge answer that is not exactly the required JSON object."""


def judge_prompt(template: str, character: str, instruction: Instruction,
                 previous: Sequence[str], states: GameStates) -> str:
    """The judge's prompt: `template` (prompts/judge.txt) with the turn filled in."""
    context = "\n".join(f"- {text}" for text in previous) or "- (this is the first turn)"
    return template.format(
        character=character, instruction=instruction.text, previous=context,
        social=states.sc, entertainment=states.et, stamina=states.st,
        criteria=", ".join(JUDGE_CRITERIA),
    )


def parse_judge_answer(answer: str) -> dict[str, int]:
    """The six scores from an answer that is one JSON object with exactly the six criteria as
    keys and whole numbers 1..10 as values (a Markdown code fence around it is allowed)."""
    text = answer.strip()
    fenced = _FENCE.match(text)
    text = fenced.group(1) if fenced else text
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise JudgeAnswerError(f"not JSON ({error.msg})") from None
    if not isinstance(data, dict) or set(data) != set(JUDGE_CRITERIA):
        keys = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise JudgeAnswerError(f"expected the keys {list(JUDGE_CRITERIA)}, got {keys}")
    scores = {}
    for name in JUDGE_CRITERIA:
        value = data[name]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10:
            raise JudgeAnswerError(f"{name} must be a whole number 1..10, got {value!r}")
        scores[name] = value
    return scores


def judge_turn(judge: JudgeFn, frames: np.ndarray, prompt: str) -> dict[str, object]:
    """`judge_<criterion>` scores, or all `None` with `judge_missing` saying why."""
    try:
        scores = parse_judge_answer(judge(frames, prompt))
    except JudgeAnswerError as error:
        return {**{f"judge_{name}": None for name in JUDGE_CRITERIA},
                "judge_missing": f"unparsable answer: {error}"}
    except Exception as error:
        return {**{f"judge_{name}": None for name in JUDGE_CRITERIA},
                "judge_missing": f"judge failed: {error}"}
    return {f"judge_{name}": float(score) for name, score in scores.items()}
