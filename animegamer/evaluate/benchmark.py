"""Benchmark games, and playing them through a `TurnEngine` resumably.

Two sources of games:
- a JSON file of instruction sequences, played freely (the model's own states and
  representations form the history, as in a real game);
- a dataset folder's test split: each episode is a game, teacher-forced: every turn's
  instruction, and the states the next prompt carries for it, come from the data, and the
  target is the data's next shot (its clip, motion level and state deltas). The history's
  representations are the model's own predictions for the earlier data turns: the engine does
  not load the shot encoder that would make them from the ground-truth clips.

Every scored turn is appended to `OUT/turns.jsonl`, and its representation kept in
`OUT/cache/representations/` until its game is over, so a rerun skips finished games, rebuilds
an unfinished game's session from its records, and plays only the turns that are missing.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import resource
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from animegamer.data import dataset, layout
from animegamer.data.decode import read_clip
from animegamer.data.flow import LEVEL_COUNT, MotionLevels, motion_scope
from animegamer.evaluate.metrics import (
    FRAMES_PER_TURN,
    JudgeFn,
    TurnSample,
    TurnScorer,
    judge_prompt,
    judge_turn,
    probe_scores,
    sample_indices,
)
from animegamer.game.rules import (
    INSTRUCTION_FIELDS,
    GameStates,
    Gauges,
    Instruction,
    Session,
    Timings,
    apply_states,
    make_instruction,
    new_session,
    record_turn,
)
from animegamer.nano.probes import NanoProbes
from animegamer.serving.engine import TurnEngine

TURNS_FILE = "turns.jsonl"
REPRESENTATIONS = "cache/representations"
FRAMES = "frames"
THUMB_HEIGHT = 96
SEEDS_PER_GAME = 1000
REFERENCE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")


class BenchmarkError(ValueError):
    """A benchmark file or dataset that cannot be played; the message says what is wrong."""


@dataclass(frozen=True)
class Target:
    """What a turn should have produced, where known."""

    motion_level: int | None = None
    states: tuple[int, int, int] | None = None
    """(social, entertainment, stamina) deltas."""
    clip: Path | None = None


@dataclass(frozen=True)
class BenchmarkTurn:
    instruction: Instruction
    target: Target = field(default_factory=Target)


@dataclass(frozen=True)
class BenchmarkGame:
    game_id: str
    turns: tuple[BenchmarkTurn, ...]
    teacher_forced: bool = False


@dataclass(frozen=True)
class Benchmark:
    """Games to play, and what the source knows about the character."""

    name: str
    games: tuple[BenchmarkGame, ...]
    reference: Path | None = None
    levels: MotionLevels | None = None

    @property
    def turn_count(self) -> int:
        return sum(len(game.turns) for game in self.games)


def load_benchmark(source: Path, character: str, turns: int = 10,
                   limit: int | None = None) -> Benchmark:
    """Games from a JSON file or a dataset folder, each cut to `turns`, the first `limit`."""
    if turns < 1:
        raise BenchmarkError(f"--turns must be at least 1, got {turns}")
    if source.is_dir():
        benchmark = _dataset_benchmark(source)
    elif source.is_file():
        benchmark = _file_benchmark(source, character)
    else:
        raise BenchmarkError(f"{source} is neither a benchmark file nor a dataset folder")
    games = tuple(
        dataclasses.replace(game, turns=game.turns[:turns]) for game in benchmark.games
    )[:limit]
    if not games:
        raise BenchmarkError(f"{source} holds no games")
    return dataclasses.replace(benchmark, games=games)


def _instruction(fields: dict[str, Any], where: str) -> Instruction:
    try:
        return make_instruction({name: fields.get(name) for name in INSTRUCTION_FIELDS})
    except ValueError as error:
        raise BenchmarkError(f"{where}: {error}") from None


def _file_benchmark(path: Path, character: str) -> Benchmark:
    """A JSON file: {"character": NAME, "games": [{"id": ID, "turns": [{adverb, motion, time,
    place, optional character, motion_level, states: [sc, et, st]}, ...]}, ...]}."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BenchmarkError(f"{path}: cannot read the benchmark ({error})") from None
    if not isinstance(data, dict) or not isinstance(data.get("games"), list):
        raise BenchmarkError(f"{path}: expected an object with a list of 'games'")
    named = str(data.get("character", character))
    if named.lower() != character.lower():
        raise BenchmarkError(f"{path} is a benchmark of {named}, not {character}")
    games = []
    for number, game in enumerate(data["games"], 1):
        if not isinstance(game, dict) or not isinstance(game.get("turns"), list):
            raise BenchmarkError(f"{path}: game {number} needs a list of 'turns'")
        turns = []
        for index, turn in enumerate(game["turns"], 1):
            where = f"{path}: game {number}, turn {index}"
            if not isinstance(turn, dict):
                raise BenchmarkError(f"{where}: a turn is an object of instruction fields")
            states = turn.get("states")
            if states is not None and (not isinstance(states, list) or len(states) != 3 or not all(
                    isinstance(s, int) and -5 <= s <= 5 for s in states)):
                raise BenchmarkError(f"{where}: states are three whole numbers in -5..5")
            level = turn.get("motion_level")
            if level is not None and level not in range(1, LEVEL_COUNT + 1):
                raise BenchmarkError(f"{where}: motion_level must be 1..{LEVEL_COUNT}")
            turns.append(BenchmarkTurn(
                _instruction({"character": named, **turn}, where),
                Target(motion_level=level, states=tuple(states) if states else None),
            ))
        games.append(BenchmarkGame(str(game.get("id", f"game-{number}")), tuple(turns)))
    return Benchmark(path.stem, tuple(games))


def _dataset_benchmark(folder: Path) -> Benchmark:
    rows = dataset.read_rows(folder).get("test")
    if not rows:
        raise BenchmarkError(f"{folder} has no test split (data/test-*.parquet)")
    episodes: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        episodes.setdefault(row["episode_id"], []).append(row)
    games = []
    for episode_id, shots in episodes.items():
        shots.sort(key=lambda row: row["episode_index"])
        turns = tuple(
            BenchmarkTurn(
                _instruction(row, f"{folder}: shot {row['shot_id']}"),
                Target(int(row["motion_level"]), (row["sc"], row["et"], row["st"]),
                       folder / row["clip_path"]),
            )
            for row in shots
        )
        games.append(BenchmarkGame(episode_id, turns, teacher_forced=True))
    references = [folder / f"{layout.REFERENCE}{s}" for s in REFERENCE_SUFFIXES]
    levels_file = folder / layout.LEVELS
    levels = (MotionLevels.from_dict(json.loads(levels_file.read_text()))
              if levels_file.is_file() else None)
    return Benchmark(folder.name, tuple(games),
                     next((p for p in references if p.is_file()), None), levels)


def levels_from_values(values: Sequence[float]) -> MotionLevels:
    """Levels for a decoder's motion-scope table alone (no dataset): each boundary is the
    geometric mean of two neighbouring level values, so a clip is given the level whose value
    is nearest on a log scale."""
    boundaries = tuple(math.sqrt(a * b) for a, b in itertools.pairwise(values))
    return MotionLevels(boundaries, tuple(values))


def peak_memory_mb() -> float:
    """Peak GPU memory allocated by torch when a GPU is in use, else the peak RSS (MiB)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass(frozen=True)
class RunOptions:
    out: Path
    window: int = 1
    seed: int = 0
    steps: int | None = None
    frames_per_turn: int = FRAMES_PER_TURN
    flush_every: int = 10
    """Turns scored (one CLIP batch) and appended at a time; a game's end flushes too."""
    progress: bool = True


def read_turns(out: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """The scored turns of an earlier run, by (game id, turn); a torn last line is ignored."""
    path = out / TURNS_FILE
    records: dict[tuple[str, int], dict[str, Any]] = {}
    if not path.is_file():
        return records
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        records[(record["game"], record["turn"])] = record
    return records


def _representation_path(out: Path, game: str, turn: int) -> Path:
    safe = layout.video_id(game)
    return out / REPRESENTATIONS / safe / f"{turn:04d}.safetensors"


def _resume(session: Session, records: Iterator[dict[str, Any]], out: Path) -> Session:
    """The session after the recorded turns (those whose representation is on disk)."""
    for record in records:
        path = _representation_path(out, record["game"], record["turn"])
        if not path.is_file():
            break
        session = record_turn(
            session,
            instruction=make_instruction(record["instruction"]),
            states=GameStates(**record["history_states"]),
            motion_scope_value=record["played_scope"],
            representation=load_file(str(path))["representation"],
            seed=record["seed"],
            clip_path=record["clip"],
            timings=Timings(**record["timings"]),
        )
    return session


def _last_frame(clip: str) -> np.ndarray | None:
    """The last frame of a clip written earlier, or None when it is gone."""
    return read_clip(Path(clip))[-1] if Path(clip).is_file() else None


def _teacher_forced(session: Session, states: GameStates) -> Session:
    """The session with its last turn carrying the data's states (and the gauges they give)."""
    *earlier, last = session.turns
    previous = earlier[-1].gauges if earlier else Gauges()
    turn = dataclasses.replace(last, states=states, gauges=apply_states(previous, states))
    return dataclasses.replace(session, turns=(*earlier, turn))


def _strip(frames: np.ndarray, out: Path, name: str) -> str:
    """Save frames side by side, THUMB_HEIGHT high, as a PNG under `out`; returns `name`."""
    from PIL import Image

    strip = np.concatenate(list(frames), axis=1)
    image = Image.fromarray(strip)
    width = max(1, round(image.width * THUMB_HEIGHT / image.height))
    path = out / name
    path.parent.mkdir(parents=True, exist_ok=True)
    image.resize((width, THUMB_HEIGHT), Image.Resampling.BICUBIC).save(path)
    return name


class BenchmarkRunner:
    """Plays a benchmark's games on an engine, scores them, and appends the turn records."""

    def __init__(self, engine: TurnEngine, character: str, scorer: TurnScorer,
                 options: RunOptions, judge: JudgeFn | None = None,
                 judge_template: str = "", probes: NanoProbes | None = None) -> None:
        self.engine = engine
        self.character = character
        self.scorer = scorer
        self.options = options
        self.judge = judge
        self.judge_template = judge_template
        self.probes = probes
        """The Nano world's probes, run on every whole clip when the engine plays that world."""

    def run(self, benchmark: Benchmark) -> list[dict[str, Any]]:
        """Play every missing turn; returns all turn records of the benchmark, in game order."""
        out = self.options.out
        out.mkdir(parents=True, exist_ok=True)
        done = read_turns(out)
        keys = [(g.game_id, i) for g in benchmark.games for i in range(1, len(g.turns) + 1)]
        with tqdm(total=len(keys), initial=sum(k in done for k in keys), unit="turn",
                  desc="evaluate", disable=not self.options.progress) as bar:
            for number, game in enumerate(benchmark.games):
                self._play_game(game, number, done, bar)
        done = read_turns(out)
        return [done[key] for key in keys if key in done]

    def _play_game(self, game: BenchmarkGame, number: int,
                   done: dict[tuple[str, int], dict[str, Any]], bar: tqdm) -> None:
        out = self.options.out
        recorded = []
        for index in range(1, len(game.turns) + 1):
            if (game.game_id, index) not in done:
                break
            recorded.append(done[(game.game_id, index)])
        if len(recorded) == len(game.turns):
            return
        session = _resume(new_session(self.character, self.options.window), iter(recorded), out)
        previous = _last_frame(session.turns[-1].clip_path) if session.turns else None
        pending: list[tuple[dict[str, Any], TurnSample, np.ndarray]] = []
        for index in range(len(session.turns) + 1, len(game.turns) + 1):
            turn = game.turns[index - 1]
            seed = self.options.seed + SEEDS_PER_GAME * number + index
            session = self.engine.play(session, turn.instruction, seed=seed,
                                       num_inference_steps=self.options.steps)
            played = session.turns[-1]
            predicted = played.states
            if game.teacher_forced and turn.target.states is not None:
                sc, et, st = turn.target.states
                ml = turn.target.motion_level or predicted.ml
                session = _teacher_forced(session, GameStates(ml=ml, sc=sc, et=et, st=st))
            record, sample, frames = self._observe(game, index, session, turn, predicted)
            sample.previous_frame, previous = previous, frames[-1]
            pending.append((record, sample, frames))
            if len(pending) >= self.options.flush_every:
                self._flush(pending, game, bar)
                pending = []
        self._flush(pending, game, bar)
        shutil.rmtree(_representation_path(out, game.game_id, 1).parent, ignore_errors=True)

    def _observe(self, game: BenchmarkGame, index: int, session: Session, turn: BenchmarkTurn,
                 predicted: GameStates) -> tuple[dict[str, Any], TurnSample, np.ndarray]:
        out = self.options.out
        played = session.turns[-1]
        path = _representation_path(out, game.game_id, index)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({"representation": session.representations[-1].contiguous()}, str(path))
        clip = read_clip(Path(played.clip_path))
        picks = sample_indices(len(clip), self.options.frames_per_turn)
        truth = None
        folder = f"{FRAMES}/{layout.video_id(game.game_id)}"
        record: dict[str, Any] = {
            "game": game.game_id, "turn": index, "teacher_forced": game.teacher_forced,
            "instruction": played.instruction.fields(), "text": played.instruction.text,
            "seed": played.seed, "clip": played.clip_path,
            "predicted_states": dataclasses.asdict(predicted),
            "history_states": dataclasses.asdict(played.states),
            "played_level": played.motion_level, "played_scope": played.motion_scope,
            "timings": dataclasses.asdict(played.timings),
            "seconds_per_turn": played.timings.total_s, "peak_memory_mb": peak_memory_mb(),
            "generated_frames": _strip(clip[picks], out, f"{folder}/{index:04d}-generated.png"),
            "truth_frames": None,
            "target_clip": str(turn.target.clip) if turn.target.clip else None,
        }
        if turn.target.clip is not None:
            full = read_clip(turn.target.clip)
            truth = full[sample_indices(len(full), len(picks))]
            record["truth_frames"] = _strip(truth, out, f"{folder}/{index:04d}-truth.png")
        scope = motion_scope(clip)
        record["generated_scope"] = scope
        if self.probes is not None:
            record.update(probe_scores(self.probes, clip, played.instruction))
        sample = TurnSample(
            frames=clip[picks], scope=scope, instruction=played.instruction,
            played_level=played.motion_level, predicted=predicted,
            target_level=turn.target.motion_level, target_states=turn.target.states,
            ground_truth=truth if truth is not None and len(truth) == len(picks) else None,
        )
        return record, sample, clip[picks]

    def _flush(self, pending: Sequence[tuple[dict[str, Any], TurnSample, np.ndarray]],
               game: BenchmarkGame, bar: tqdm) -> None:
        if not pending:
            return
        scores = self.scorer.score([sample for _, sample, _ in pending])
        with (self.options.out / TURNS_FILE).open("a", encoding="utf-8") as file:
            for (record, sample, frames), score in zip(pending, scores, strict=True):
                record.update(score)
                if self.judge is not None:
                    record.update(self._judge(game, record, sample, frames))
                file.write(json.dumps(record) + "\n")
                file.flush()
                bar.update(1)

    def _judge(self, game: BenchmarkGame, record: dict[str, Any], sample: TurnSample,
               frames: np.ndarray) -> dict[str, object]:
        assert self.judge is not None
        previous = [t.instruction.text for t in game.turns[: record["turn"] - 1]][-3:]
        prompt = judge_prompt(self.judge_template, self.character, sample.instruction, previous,
                              sample.predicted)
        return judge_turn(self.judge, frames, prompt)


def reference_image(path: Path | None) -> np.ndarray | None:
    """The reference image as uint8 [H, W, 3], or None."""
    if path is None:
        return None
    from PIL import Image

    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))

