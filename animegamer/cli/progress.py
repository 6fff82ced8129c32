"""Progress that reads as well in a log as on a terminal.

On a terminal a stage draws tqdm's bar. Anywhere else (a pipe, a file, a notebook's captured
stream, CI) tqdm's bar is either hidden or a run of carriage returns; there a stage prints a
plain line every `LINE_INTERVAL` seconds instead, with its count, the time so far and an
estimate of the time left, and one line when it ends:

    decoder: 250/1000 steps, loss 0.1234; 4.1 min so far, about 12 min left
    decoder: 1000/1000 steps in 16 min

The lines go to standard output with the command's other lines, in their order; standard error
keeps only warnings and errors (a refused input is one line there).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO

from tqdm.auto import tqdm

LINE_INTERVAL = 30.0
"""Seconds between a log's progress lines."""


def duration(seconds: float) -> str:
    """`seconds` as a person says it: "40 s", "4.1 min", "12 min", "1.5 h"."""
    if seconds < 59.5:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    if minutes < 9.95:
        return f"{minutes:.1f} min"
    if minutes < 59.5:
        return f"{minutes:.0f} min"
    return f"{minutes / 60:.1f} h"


class LineProgress:
    """A stage's progress as plain lines (see the module doc). Counts from `initial` (a resumed
    stage), so the estimate uses the rate of this run's own steps."""

    def __init__(
        self,
        iterable: Iterable[Any] | None = None,
        *,
        total: int,
        desc: str,
        unit: str,
        initial: int = 0,
        stream: TextIO | None = None,
        interval: float = LINE_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc, unit
        self.n = self.initial = initial
        self.stream = stream if stream is not None else sys.stdout
        self.interval, self.clock = interval, clock
        self.started = self.last_line = clock()
        self.postfix = ""
        self.closed = False

    def __iter__(self) -> Iterator[Any]:
        assert self.iterable is not None, "LineProgress was given nothing to iterate"
        try:
            for item in self.iterable:
                yield item
                self.update()
        finally:
            self.close()

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if now - self.last_line >= self.interval and self.n < self.total:
            self.last_line = now
            self._write(self._running_line(now - self.started))

    def set_postfix(self, **values: Any) -> None:
        self.postfix = ", ".join(f"{key} {value}" for key, value in values.items())

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.n > self.initial:
            elapsed = self.clock() - self.started
            self._write(f"{self._count()} in {duration(elapsed)}")

    def _count(self) -> str:
        return f"{self.desc}: {self.n}/{self.total} {self.unit}s"

    def _running_line(self, elapsed: float) -> str:
        line = self._count() + (f", {self.postfix}" if self.postfix else "")
        left = elapsed / (self.n - self.initial) * (self.total - self.n)
        return f"{line}; {duration(elapsed)} so far, about {duration(left)} left"

    def _write(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()


def progress(
    iterable: Iterable[Any] | None = None,
    *,
    total: int,
    desc: str,
    unit: str = "step",
    initial: int = 0,
    disable: bool = False,
) -> tqdm | LineProgress:
    """The stage's progress: tqdm's bar on a terminal, `LineProgress` elsewhere, nothing when
    `disable` (another process of a multi-process run speaks for it). Use it as tqdm: iterate
    it, or `update` / `set_postfix` / `close` it, or hold it in a `with`."""
    if disable or sys.stdout.isatty():
        return tqdm(iterable, total=total, initial=initial, desc=desc, unit=unit, disable=disable,
                    file=sys.stdout)
    return LineProgress(iterable, total=total, desc=desc, unit=unit, initial=initial)
