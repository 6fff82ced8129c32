"""`show`: a dataset at a glance — a contact sheet (PNG) and summary statistics."""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from animegamer.data import dataset, layout
from animegamer.data.decode import read_clip
from animegamer.data.errors import DataError
from animegamer.game.rules import ACTION_FIELDS

THUMB_WIDTH = 240
CAPTION_LINES = 4
FONT_SIZE = 12
LINE_HEIGHT = 15
COLUMNS = 4


def _thumbnail(out: Path, row: Mapping[str, Any]) -> Image.Image:
    frame = read_clip(out / row["clip_path"])[0]
    height = round(frame.shape[0] * THUMB_WIDTH / frame.shape[1])
    return Image.fromarray(frame).resize((THUMB_WIDTH, height), Image.Resampling.BICUBIC)


def _caption(row: Mapping[str, Any]) -> list[str]:
    states = f"ML {row['motion_level']}  SC {row['sc']:+d}  ET {row['et']:+d}  ST {row['st']:+d}"
    text = f"{row['adverb']} {row['motion']}; {row['time']} {row['place']}"
    lines = [f"{row['video']} @ {row['start']:.2f} s", states, *textwrap.wrap(text, 38)]
    return lines[:CAPTION_LINES]


def contact_sheet(
    out: Path, rows: Sequence[Mapping[str, Any]], columns: int = COLUMNS
) -> Image.Image:
    """A grid of the rows' first frames, each with its source, level, states and instruction."""
    if not rows:
        raise DataError(f"{out}: the dataset has no rows to show")
    thumbs = [_thumbnail(out, row) for row in rows]
    cell_h = max(t.height for t in thumbs) + CAPTION_LINES * LINE_HEIGHT + 8
    cell_w = THUMB_WIDTH + 8
    grid_rows = -(-len(rows) // columns)
    sheet = Image.new("RGB", (columns * cell_w, grid_rows * cell_h), "white")
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default(size=FONT_SIZE)
    for index, (row, thumb) in enumerate(zip(rows, thumbs, strict=True)):
        x, y = (index % columns) * cell_w + 4, (index // columns) * cell_h + 4
        sheet.paste(thumb, (x, y))
        for line_number, line in enumerate(_caption(row)):
            draw.text((x, y + thumb.height + 2 + line_number * LINE_HEIGHT), line, "black", font)
    return sheet


def summary(rows: Mapping[str, Sequence[Mapping[str, Any]]], report: Mapping[str, Any]) -> str:
    """Plain-text statistics: rows per split, episodes, levels, states, vocabulary, skips."""
    every = [row for split in rows.values() for row in split]
    lines = [f"rows: {', '.join(f'{split} {len(r)}' for split, r in rows.items())}"]
    episodes = Counter(row["episode_id"] for row in every)
    if episodes:
        lengths = list(episodes.values())
        lines.append(
            f"episodes: {len(episodes)} (shots per episode: mean {np.mean(lengths):.1f}, "
            f"max {max(lengths)})"
        )
    for level in range(1, 6):
        scopes = [row["motion_scope"] for row in every if row["motion_level"] == level]
        mean = f", mean scope {np.mean(scopes):.2f}" if scopes else ""
        lines.append(f"motion level {level}: {len(scopes)} shots{mean}")
    for name in ("sc", "et", "st"):
        values = Counter(row[name] for row in every)
        lines.append(f"{name}: " + ", ".join(f"{v:+d} × {n}" for v, n in sorted(values.items())))
    for name in ACTION_FIELDS:
        common = Counter(row[name] for row in every).most_common(8)
        lines.append(f"{name} ({len(set(r[name] for r in every))}): "
                     + ", ".join(f"{word} {n}" for word, n in common))
    skipped = report.get("skipped") or {}
    if skipped:
        lines.append("skipped: " + ", ".join(f"{kind} {n}" for kind, n in skipped.items()))
    return "\n".join(lines)


def show(
    out: Path, png: Path | None = None, split: str = "train", count: int = 24
) -> tuple[Path, str]:
    """Write the contact sheet of the first `count` rows of `split` (default path:
    DATASET/contact_sheet.png) and return it with the summary."""
    rows = dataset.read_rows(out)
    if not rows:
        raise DataError(f"{out}: no dataset here (no {layout.DATA}/*.parquet); build one first")
    if split not in rows:
        raise DataError(f"{out}: no split {split!r} (there are {', '.join(rows)})")
    report_path = out / layout.REPORT
    report = json.loads(report_path.read_text(encoding="utf-8")) if report_path.is_file() else {}
    png = png or out / "contact_sheet.png"
    contact_sheet(out, rows[split][:count]).save(png)
    return png, summary(rows, report)
