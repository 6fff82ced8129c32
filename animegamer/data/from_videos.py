"""Videos → a dataset in one call, and the build told in a few lines.

    from animegamer.data.from_videos import build_dataset, summary

    result = build_dataset(BuildOptions(videos=Path("videos"), character="Kiki",
                                        reference_image=Path("kiki.png"), out=Path("dataset")),
                           annotations=Path("answers.jsonl"))
    print(summary(result))  # result.report is report.json, result.seconds each stage's time

Every option is checked before a model is loaded (`check_options`, then `build.check_inputs`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from animegamer.data.annotate import Annotator, AnswerFile, VisionLanguageModel
from animegamer.data.build import BuildOptions, BuildResult, build, check_inputs
from animegamer.data.errors import DataError
from animegamer.data.features import feature_extractor

SHOWN = 5
"""Unmatched answers and unanswered shots the summary names (all are in the report)."""


def check_options(options: BuildOptions) -> None:
    """`DataError` naming the first option out of its range."""
    height, width = options.extract.height, options.extract.width
    if min(height, width) < 16 or max(height, width) > 2048:
        raise DataError(f"--size {height} {width}: each side must be in 16..2048")
    if options.limit is not None and options.limit < 1:
        raise DataError("--limit must be at least 1")
    if options.num_proc < 1 or options.batch_size < 1:
        raise DataError("--num-proc and --batch-size must be at least 1")
    if not 0 <= options.test_fraction < 1:
        raise DataError("--test-fraction must be in [0, 1)")
    if not 0 < options.extract.min_moving < 1:
        raise DataError("--min-moving must be in (0, 1)")


def build_dataset(
    options: BuildOptions, annotations: Path | None = None, annotator: str | None = None,
    features: str = "none",
) -> BuildResult:
    """Build (or continue) the dataset `options.out`, the answers read from the `annotations`
    file or asked of the vision-language model `annotator` (one of the two), with the
    `features` (`FEATURE_KINDS`) cached. `DataError` for input it cannot use."""
    if (annotations is None) == (annotator is None):
        raise DataError("give the answers file or an annotator model (one of the two)")
    check_options(options)
    check_inputs(options)  # before a model is loaded for nothing
    reader: Annotator = (
        AnswerFile(annotations) if annotations is not None else VisionLanguageModel(str(annotator))
    )
    return build(options, reader, feature_extractor(features))


def _listed(items: Sequence[dict], describe: Callable[[dict], str]) -> str:
    shown = "; ".join(describe(item) for item in items[:SHOWN])
    return shown + (f"; and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def answer_lines(answers: dict) -> list[str]:
    """What the summary says about the answers: unmatched ones and shots without one."""
    lines = [f"answers: {answers['matched']} shots answered, {len(answers['unmatched'])} "
             f"answers matched no shot, {len(answers['shots_without_answer'])} shots without one"]
    if answers["unmatched"]:
        lines.append("  matched no shot: " + _listed(answers["unmatched"], lambda a: (
            f"line {a['line']} ({a['video']} at {a['start']} s): {a['reason']}")))
    if answers.get("unit"):
        unit = answers["unit"]
        lines.append(f"  their starts look like {unit['unit']} ({unit['fits']} match a shot "
                     f"read so): write seconds ({unit['example']})")
    if answers["shots_without_answer"]:
        lines.append("  no answer: " + _listed(answers["shots_without_answer"], lambda s: (
            f"{s['video']} {s['start']:.3f}-{s['end']:.3f} s")))
    return lines


def summary(result: BuildResult) -> str:
    """The build in a few lines (the report has everything)."""
    report, stages = result.report, result.report["stages"]
    videos = report["videos"]
    skipped = ", ".join(f"{kind} {n}" for kind, n in report["skipped"].items()) or "none"
    rows = ", ".join(f"{split} {n}" for split, n in stages["rows"].items()) or "none"
    if report.get("split"):
        rows += f" (test split: {report['split']['how']})"
    damaged = {**videos["failed"], **videos["partial"]}
    return "\n".join([
        f"videos: {videos['found']} found, {videos['done']} done, "
        f"{len(videos['failed'])} failed, {len(videos['partial'])} partial, "
        f"{videos['not_reached']} not reached",
        *(f"  {reason}" for reason in damaged.values()),
        f"shots: {len(_cuts(videos))} cuts, {stages['segments']} segments "
        f"({stages['segments_too_short']} under 2 s), {stages['clips']} clips, "
        f"{stages['shots']} kept, {stages['annotated']} annotated",
        *answer_lines(report["answers"]),
        f"skipped: {skipped}",
        f"shots per split: {rows}",
        "levels: " + (", ".join(f"{level}: {n}" for level, n in report["level_histogram"].items())
                      if report["levels"] else "none (no annotated shot)"),
        "seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in result.seconds.items()),
    ])


def _cuts(videos: dict) -> list[dict]:
    return [cut for cuts in videos["cuts"].values() for cut in cuts]
