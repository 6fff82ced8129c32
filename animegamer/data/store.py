"""The build's work files: append-only JSONL records and atomic file writes.

A record is one line written with a single `write` (several worker processes may append to the
same file) and flushed to disk before the next step starts, so an interrupted build loses at most
the line being written. A torn last line is cut off when the file is read again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from animegamer.data.errors import DataError, write_error


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append `record` as one JSON line and flush it to disk."""
    line = (json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n").encode()
    try:
        with path.open("ab") as file:
            file.write(line)
            file.flush()
            os.fsync(file.fileno())
    except OSError as error:
        raise write_error(path, error) from None


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of a JSONL work file (none if it does not exist yet).

    A last line without its newline (the build stopped while writing it) is removed from the file;
    any other line that is not a JSON object means the file was damaged: `DataError`.
    """
    if not path.is_file():
        return []
    data = path.read_bytes()
    complete = data.rfind(b"\n") + 1
    if complete < len(data):
        with path.open("r+b") as file:
            file.truncate(complete)
    records = []
    for number, line in enumerate(data[:complete].splitlines(), start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            raise DataError(
                f"{path}, line {number}: not a record of this pipeline; the work folder is "
                "damaged (remove it to start the build over)"
            )
        records.append(record)
    return records


def write_atomic(path: Path, write: Callable[[Path], object]) -> Path:
    """Call `write(temporary path)`, then move the result to `path`: a reader never sees half a
    file, and a failed write leaves no partial file (the error names `path`)."""
    partial = path.with_name(f".{path.name}.partial{path.suffix}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(partial)
        partial.replace(path)
    except (OSError, RuntimeError) as error:
        partial.unlink(missing_ok=True)
        raise write_error(path, error) from None
    return path


def write_json(path: Path, data: Any) -> Path:
    text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return write_atomic(path, lambda partial: partial.write_text(text, encoding="utf-8"))
