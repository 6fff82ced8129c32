"""The one error type of the data pipeline: its message names the file and says what to do."""

from __future__ import annotations

import errno
from pathlib import Path


class DataError(Exception):
    """Input the pipeline cannot use, or a write that failed; the CLI prints the message."""


def write_error(path: Path, error: BaseException) -> DataError:
    """A `DataError` for a failed write of `path`; a full disk says so and how to go on."""
    text = str(error)
    if getattr(error, "errno", None) == errno.ENOSPC or "No space left" in text:
        return DataError(
            f"no space left on device writing {path}. Everything written before it is kept: "
            "free some space and rerun the same command to continue."
        )
    reason = (text.strip().splitlines() or [type(error).__name__])[-1]
    return DataError(f"could not write {path}: {reason}")


class VideoError(DataError):
    """A source video that cannot be read; the build skips it and says why in the report."""
