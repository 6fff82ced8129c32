"""The dataset on disk: the row schema, the Parquet splits, and the dataset card.

Rows go through the `datasets` library (`Dataset.from_list` with `row_features()`, then
`to_parquet`), one file per split under `data/`. The card's YAML names the split files, so the
folder loads with `datasets.load_dataset(DATASET)` (or `load_dataset("parquet", data_files=...)`)
and can be pushed to the Hub as it is. Paths in rows are relative to the dataset folder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from animegamer.data import layout
from animegamer.data.store import write_atomic

SPLITS = ("train", "test")


def row_features() -> Any:
    """The row schema (a `datasets.Features`)."""
    from datasets import Features, Value

    text = Value("string")
    return Features(
        {
            "shot_id": text, "video": text, "start": Value("float64"),
            "episode_id": text, "episode_index": Value("int32"),
            "character": text, "adverb": text, "motion": text, "time": text, "place": text,
            "instruction": text,
            "motion_scope": Value("float64"), "motion_level": Value("int8"),
            "sc": Value("int8"), "et": Value("int8"), "st": Value("int8"),
            "clip_path": text, "features_path": text,
        }
    )


def split_file(split: str) -> str:
    return f"{layout.DATA}/{split}-00000-of-00001.parquet"


def write_splits(out: Path, rows: Mapping[str, Sequence[dict[str, Any]]]) -> list[str]:
    """Write each non-empty split's rows; remove split files of an earlier build that are not
    written now. Returns the splits written."""
    from datasets import Dataset

    schema = row_features()
    written = []
    for split in SPLITS:
        target = out / split_file(split)
        if rows.get(split):
            table = Dataset.from_list(list(rows[split]), features=schema)

            def write(partial: Path, table: Any = table) -> None:
                table.to_parquet(str(partial))

            write_atomic(target, write)
            written.append(split)
        else:
            target.unlink(missing_ok=True)
    return written


def card(character: str, splits: Sequence[str], counts: Mapping[str, int]) -> str:
    """The dataset card: YAML that points `datasets` at the split files, and a short text."""
    files = "".join(f"  - split: {s}\n    path: {split_file(s)}\n" for s in splits)
    sizes = ", ".join(f"{counts[s]} {s}" for s in splits) or "no"
    return (
        "---\nconfigs:\n- config_name: default\n  data_files:\n"
        f"{files}---\n\n"
        f"# AnimeGamer shots of {character}\n\n"
        f"Built by `python -m animegamer.data build`: {sizes} shots. Each row is a 17-frame "
        "clip (`clip_path`, 8 fps) with its instruction, motion scope and level, and the state "
        "labels (social, entertainment, stamina). `report.json` says what was skipped and why; "
        "`levels.json` holds the fitted motion levels.\n"
    )


def write_card(out: Path, text: str) -> Path:
    return write_atomic(out / layout.CARD, lambda p: p.write_text(text, encoding="utf-8"))


def read_rows(out: Path) -> dict[str, list[dict[str, Any]]]:
    """The rows of each split present (read with pyarrow: no `datasets` cache is written)."""
    import pyarrow.parquet as pq

    return {
        split: pq.read_table(out / split_file(split)).to_pylist()
        for split in SPLITS
        if (out / split_file(split)).is_file()
    }
