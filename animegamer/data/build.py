"""`build`: a folder of videos → an annotated, episode-ordered dataset, resumably.

Stages: clips (per video, in worker processes: decode, cuts, clips, motion scope, clip files) →
answers (an annotator, batched) → annotations (strict parse) → features (an extractor, batched) →
rows (levels, episodes, split, Parquet, report). Each expensive result is recorded in `work/` as
soon as it exists (see `store`), and every id is derived from the input, so a rerun after any
interruption picks up the records, does only what is missing, and writes the same dataset an
uninterrupted build would. Only one clip's frames are ever in memory.
"""

from __future__ import annotations

import json
import multiprocessing
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from animegamer.cli.progress import progress
from animegamer.data import dataset, layout
from animegamer.data.annotate import (
    ANSWER_FIELDS,
    Annotation,
    AnnotationRequest,
    Annotator,
    AnswerError,
    parse_answer,
)
from animegamer.data.decode import read_clip
from animegamer.data.episodes import (
    EPISODE_GAP_S,
    TEST_FRACTION,
    ShotPlace,
    Split,
    SplitShot,
    assign_episodes,
    choose_split,
)
from animegamer.data.errors import DataError, write_error
from animegamer.data.extract import ExtractOptions, VideoJob, extract_video, run_job
from animegamer.data.features import ShotFeatureExtractor, is_current, write_features
from animegamer.data.flow import MotionLevels
from animegamer.data.matching import check_unmatched, explain, guess_unit
from animegamer.data.report import Skip, make_report
from animegamer.data.shots import MIN_SEGMENT_SECONDS
from animegamer.data.store import append_record, read_records, write_atomic, write_json
from animegamer.game.rules import MAX_FIELD_CHARS, normalise_field

VIDEO_SUFFIXES = (".mp4", ".mkv", ".webm", ".mov", ".avi", ".m4v", ".ts", ".mpg", ".mpeg")
WORK_FORMAT = 2
"""2: cuts by four detectors and the foreground's discontinuity (a build of format 1 found other
cuts, so its clips are not continued)."""
EMPTY_AS_NULL = ("character_present", "social", "entertainment", "stamina")
"""Answer fields the template leaves null (a flag or a number), the others empty text."""


@dataclass(frozen=True)
class BuildOptions:
    videos: Path
    character: str
    reference_image: Path
    out: Path
    extract: ExtractOptions = field(default_factory=ExtractOptions)
    limit: int | None = None
    num_proc: int = 1
    batch_size: int = 8
    test_fraction: float = TEST_FRACTION
    episode_gap: float = EPISODE_GAP_S
    allow_unmatched: bool = False
    """Build on even when more than a tenth of a file's answers match no shot, or their starts
    look like another unit (`matching`); a build with `limit` always does."""


@dataclass(frozen=True)
class Shot:
    """A kept clip on its way to a row."""

    shot_id: str
    video: str
    start: float
    scope: float
    clip: str

    @property
    def video_id(self) -> str:
        return layout.video_id(self.video)


@dataclass
class BuildResult:
    report: dict[str, Any]
    seconds: dict[str, float] = field(default_factory=dict)


def check_inputs(options: BuildOptions) -> str:
    """The character's name as instructions will carry it, once the inputs are checked."""
    character = normalise_field(options.character)
    if not character or len(character) > MAX_FIELD_CHARS or set(character) & set(";:"):
        raise DataError(
            f"--character {options.character!r}: a name of 1-{MAX_FIELD_CHARS} characters "
            "without ';' or ':' is needed (it goes into every instruction)"
        )
    if not options.videos.is_dir():
        raise DataError(f"{options.videos}: no such folder of videos")
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(options.reference_image) as image:
            image.verify()
    except FileNotFoundError:
        raise DataError(f"{options.reference_image}: reference image not found") from None
    except (OSError, UnidentifiedImageError, ValueError) as error:
        raise DataError(f"{options.reference_image}: not a readable image ({error})") from None
    return character


def find_videos(folder: Path, out: Path) -> list[tuple[Path, str]]:
    """(path, name relative to `folder`) of every video below `folder`, sorted by name; the
    output folder is never read as input."""
    found = []
    for path in folder.rglob("*"):
        if path.suffix.lower() in VIDEO_SUFFIXES and path.is_file():
            if path.resolve().is_relative_to(out.resolve()):
                continue
            found.append((path, path.relative_to(folder).as_posix()))
    if not found:
        raise DataError(f"{folder}: no videos ({' '.join(VIDEO_SUFFIXES)})")
    return sorted(found, key=lambda item: item[1])


def _lock_options(options: BuildOptions, character: str) -> None:
    """Record what the clips depend on; refuse to continue a build made with other values."""
    wanted = {"format": WORK_FORMAT, "character": character, **asdict(options.extract)}
    path = options.out / layout.OPTIONS
    if path.is_file():
        recorded = json.loads(path.read_text(encoding="utf-8"))
        changed = sorted(key for key in wanted.keys() | recorded.keys()
                         if wanted.get(key) != recorded.get(key))
        if changed:
            raise DataError(
                f"{options.out} was built with other values of {', '.join(changed)} "
                f"({path}); rerun with the same options, or build into a new folder"
            )
        return
    write_json(path, wanted)


def _copy_reference(options: BuildOptions) -> None:
    suffix = options.reference_image.suffix.lower()
    target = options.out / f"{layout.REFERENCE}{suffix}"
    for old in options.out.glob(f"{layout.REFERENCE}.*"):
        if old != target:
            old.unlink()
    write_atomic(target, lambda partial: shutil.copyfile(options.reference_image, partial))


def _finished(record: dict[str, Any] | None, cap: int | None) -> bool:
    """Whether a video's last record covers what this build needs from it."""
    if record is None:
        return False
    if record["status"] == "failed" or record["complete"]:
        return True
    return cap is not None and record["cap"] is not None and record["cap"] >= cap


def _extract_stage(
    options: BuildOptions, videos: Sequence[tuple[Path, str]]
) -> list[dict[str, Any]]:
    """The video records, in video order, up to the video that reaches `--limit` kept shots."""
    last = {r["video"]: r for r in read_records(options.out / layout.VIDEO_LOG)}
    done: dict[str, dict[str, bool]] = {}
    for record in read_records(options.out / layout.CLIP_LOG):
        done.setdefault(record["video"], {})[record["shot_id"]] = record["status"] == "kept"
    cap = options.limit
    jobs = [
        VideoJob(path, name, options.out, cap, done.get(name, {}))
        for path, name in videos
        if not _finished(last.get(name), cap)
    ]
    pool = None
    results: Iterator[dict[str, Any]]
    if options.num_proc > 1 and len(jobs) > 1:
        pool = multiprocessing.get_context("spawn").Pool(min(options.num_proc, len(jobs)))
        results = pool.imap(run_job, [(job, options.extract) for job in jobs])
    else:
        results = (extract_video(job, options.extract) for job in jobs)
    records, kept = [], 0
    try:
        with progress(total=len(videos), desc="clips", unit="video") as bar:
            for _, name in videos:
                record = last[name] if _finished(last.get(name), cap) else next(results)
                records.append(record)
                kept += record.get("kept", 0)
                bar.update()
                bar.set_postfix(kept=kept)
                if cap is not None and kept >= cap:
                    break
    finally:
        if pool is not None:
            pool.terminate()
    return records


def _shots(
    options: BuildOptions, videos: Sequence[dict[str, Any]]
) -> tuple[list[Shot], list[Skip]]:
    """The kept shots of the extracted videos in order (the first `--limit`), and the static
    ones as skips (`Skip.start` and `Skip.video` say where every shot that is not kept lies)."""
    order = {record["video"]: index for index, record in enumerate(videos)}
    done = {record["video"] for record in videos if record["status"] == "done"}
    kept: dict[str, Shot] = {}
    skips: dict[str, Skip] = {}
    for record in read_records(options.out / layout.CLIP_LOG):
        if record["video"] not in done:
            continue
        if record["status"] == "kept":
            kept.setdefault(record["shot_id"], Shot(
                record["shot_id"], record["video"], record["start"], record["scope"],
                record["clip"],
            ))
        else:
            reason = f"moving pixels {record['moving']:.2%} < {options.extract.min_moving:.2%}"
            skips.setdefault(record["shot_id"], Skip(
                record["shot_id"], record["video"], record["start"], "clips", "static", reason
            ))
    shots = sorted(kept.values(), key=lambda s: (order[s.video], s.start))[: options.limit]
    static = sorted(skips.values(), key=lambda s: (order[s.video], s.start))
    return shots, static


def _batches(
    items: Sequence[Any], size: int, done: Callable[[Any], bool], desc: str
) -> Iterator[Sequence[Any]]:
    """The batches (fixed: items `k·size` to `(k+1)·size`) that hold an item not `done` yet.

    A batch is the unit of work because a model's numbers can depend on what else is in its
    batch: a resumed build recomputes whole batches, as the uninterrupted build made them.
    """
    batches = [items[begin : begin + size] for begin in range(0, len(items), size)]
    pending = [batch for batch in batches if not all(done(item) for item in batch)]
    with progress(total=sum(map(len, pending)), desc=desc, unit="shot") as bar:
        for batch in pending:
            yield batch
            bar.update(len(batch))


def _answers(
    options: BuildOptions, character: str, annotator: Annotator, shots: Sequence[Shot]
) -> dict[str, str | None]:
    """Each shot's raw answer (None: the annotator has none); a model's answers are recorded."""
    log = options.out / layout.ANSWER_LOG
    answers: dict[str, str | None] = {}
    if annotator.cached:
        answers = {
            r["shot_id"]: r["answer"] for r in read_records(log) if r["annotator"] == annotator.name
        }

    def answered(shot: Shot) -> bool:
        return shot.shot_id in answers

    for batch in _batches(shots, options.batch_size, answered, "answers"):
        requests = [
            AnnotationRequest(s.video, s.start, options.out / s.clip, character,
                              options.reference_image)
            for s in batch
        ]
        for shot, text in zip(batch, annotator.answer(requests), strict=True):
            answers[shot.shot_id] = text
            if annotator.cached and text is not None:
                record = {"shot_id": shot.shot_id, "annotator": annotator.name, "answer": text}
                append_record(log, record)
    return answers


def _annotate(
    shots: Sequence[Shot], answers: dict[str, str | None], character: str, source: str
) -> tuple[list[tuple[Shot, Annotation]], list[Skip]]:
    annotated, skips = [], []
    for shot in shots:
        text = answers.get(shot.shot_id)
        try:
            if text is None:
                raise AnswerError("no answer", f"no answer for this shot in {source}")
            annotated.append((shot, parse_answer(text, character)))
        except AnswerError as error:
            skips.append(Skip(shot.shot_id, shot.video, shot.start, "annotate", error.kind,
                              str(error)))
    return annotated, skips


def _answer_report(
    annotator: Annotator, shots: Sequence[Shot], static: Sequence[Skip],
    answers: dict[str, str | None], videos: Sequence[dict[str, Any]],
) -> dict[str, Any]:
    """Which answers found a shot, which matched none (a file's, with the reason, and the unit
    their starts seem to be in: `matching.guess_unit`) and which kept shots have none."""
    every = [(s.video, s.start) for s in shots] + [(s.video, s.start) for s in static]
    unmatched = explain(annotator.unmatched(sorted(every)), videos)
    missing = [
        {"video": s.video, "start": s.start, "end": round(s.start + MIN_SEGMENT_SECONDS, 6)}
        for s in shots if answers.get(s.shot_id) is None
    ]
    open_starts: dict[str, list[float]] = {}
    for s in shots:
        if answers.get(s.shot_id) is None:
            open_starts.setdefault(s.video, []).append(s.start)
    fps = {record["video"]: record.get("fps", 0.0) for record in videos}
    unit = guess_unit(unmatched, open_starts, fps) if unmatched else None
    return {
        "source": annotator.name, "given": annotator.given,
        "matched": len(shots) - len(missing), "unmatched": unmatched,
        "unit": asdict(unit) if unit else None, "shots_without_answer": missing,
    }


def _write_template(options: BuildOptions, shots: Sequence[Shot]) -> None:
    """`answers_template.jsonl`: one line per kept shot with empty answer fields, for people or
    tools that annotate by hand (`--annotations` reads it back once filled in)."""
    empty = {name: None if name in EMPTY_AS_NULL else "" for name in ANSWER_FIELDS}
    lines = [
        json.dumps({"video": s.video, "start": s.start,
                    "end": round(s.start + MIN_SEGMENT_SECONDS, 6), "answer": empty})
        for s in shots
    ]
    text = "".join(line + "\n" for line in lines)
    write_atomic(options.out / layout.TEMPLATE,
                 lambda partial: partial.write_text(text, encoding="utf-8"))


def _motion_text(annotation: Annotation) -> str:
    return f"{annotation.instruction.adverb} {annotation.instruction.motion}"


def _features(
    options: BuildOptions,
    extractor: ShotFeatureExtractor,
    annotated: Sequence[tuple[Shot, Annotation]],
) -> None:
    """Write the features of every annotated shot that lacks current ones."""

    def current(item: tuple[Shot, Annotation]) -> bool:
        shot, annotation = item
        path = options.out / layout.features_path(shot.video_id, shot.shot_id)
        return is_current(path, extractor.name, _motion_text(annotation))

    for batch in _batches(annotated, options.batch_size, current, "features"):
        first = np.stack([read_clip(options.out / shot.clip)[0] for shot, _ in batch])
        texts = [_motion_text(annotation) for _, annotation in batch]
        images, words = extractor.image_features(first), extractor.text_features(texts)
        for index, (shot, _) in enumerate(batch):
            path = options.out / layout.features_path(shot.video_id, shot.shot_id)
            write_features(path, images[index], words[index], extractor.name, texts[index])


def _rows(
    options: BuildOptions,
    annotated: Sequence[tuple[Shot, Annotation]],
    levels: MotionLevels,
    with_features: bool,
) -> tuple[dict[str, list[dict[str, Any]]], Split]:
    """The rows of each split, and how the test split was chosen (`episodes.choose_split`)."""
    places = [
        ShotPlace(shot.video_id, shot.start, a.instruction.time, a.instruction.place)
        for shot, a in annotated
    ]
    episodes = assign_episodes(places, options.episode_gap)
    split = choose_split(
        [SplitShot(shot.shot_id, shot.video, episode)
         for (shot, _), (episode, _) in zip(annotated, episodes, strict=True)],
        options.test_fraction,
    )
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in dataset.SPLITS}
    for (shot, annotation), (episode, index) in zip(annotated, episodes, strict=True):
        instruction = annotation.instruction
        rows["test" if shot.shot_id in split.test else "train"].append({
            "shot_id": shot.shot_id, "video": shot.video, "start": shot.start,
            "episode_id": episode, "episode_index": index,
            **instruction.fields(), "instruction": instruction.text,
            "motion_scope": shot.scope, "motion_level": levels.level(shot.scope),
            "sc": annotation.social, "et": annotation.entertainment, "st": annotation.stamina,
            "clip_path": shot.clip,
            "features_path": (
                layout.features_path(shot.video_id, shot.shot_id) if with_features else None
            ),
        })
    return rows, split


def build(
    options: BuildOptions, annotator: Annotator, extractor: ShotFeatureExtractor | None = None
) -> BuildResult:
    """Build (or continue building) the dataset in `options.out`; see the module docstring."""
    character = check_inputs(options)
    videos = find_videos(options.videos, options.out)
    try:
        options.out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise write_error(options.out, error) from None
    _lock_options(options, character)
    _copy_reference(options)
    seconds: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[stage] = now - clock
        clock = now

    records = _extract_stage(options, videos)
    shots, static = _shots(options, records)
    _write_template(options, shots)
    lap("clips")
    answers = _answers(options, character, annotator, shots)
    answer_report = _answer_report(annotator, shots, static, answers, records)
    if not options.allow_unmatched and options.limit is None:
        check_unmatched(answer_report, annotator.given)
    lap("answers")
    annotated, skipped = _annotate(shots, answers, character, annotator.name)
    if extractor is not None:
        _features(options, extractor, annotated)
    lap("features")
    levels = MotionLevels.fit(shot.scope for shot, _ in annotated) if annotated else None
    rows: dict[str, list[dict[str, Any]]] = {split: [] for split in dataset.SPLITS}
    split = Split("episodes", frozenset())
    if levels is not None:
        rows, split = _rows(options, annotated, levels, extractor is not None)
    splits = dataset.write_splits(options.out, rows)
    counts = {split: len(rows[split]) for split in splits}
    dataset.write_card(options.out, dataset.card(character, splits, counts))
    if levels is not None:
        write_json(options.out / layout.LEVELS, levels.to_dict())
    else:
        (options.out / layout.LEVELS).unlink(missing_ok=True)
    report = make_report(
        character=character, videos=records, videos_found=len(videos),
        stages={
            "clips": len(shots) + len(static), "static": len(static), "shots": len(shots),
            "answered": sum(answers.get(s.shot_id) is not None for s in shots),
            "annotated": len(annotated),
            "features": len(annotated) if extractor is not None else 0,
        },
        skips=[*static, *skipped], rows={split: rows[split] for split in splits}, levels=levels,
        answers=answer_report,
        split=split.record(len({shot.video for shot, _ in annotated})) if annotated else None,
    )
    write_json(options.out / layout.REPORT, report)
    lap("rows")
    return BuildResult(report, seconds)
