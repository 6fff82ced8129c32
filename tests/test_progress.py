"""A stage's progress in a log: plain lines with the count, the time so far and the time left,
from the rate of this run's own steps (a resumed stage does not count the steps it inherited)."""

from __future__ import annotations

import io
import sys

import pytest
from tqdm.auto import tqdm

from animegamer.cli.progress import LineProgress, duration, progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("seconds, said", [
    (0.4, "0 s"), (40, "40 s"), (59.4, "59 s"), (60, "1.0 min"), (246, "4.1 min"),
    (720, "12 min"), (3540, "59 min"), (5400, "1.5 h"),
])
def test_durations_read_as_a_person_says_them(seconds, said):
    assert duration(seconds) == said


def test_a_line_every_interval_with_the_time_left_and_one_at_the_end():
    clock, stream = Clock(), io.StringIO()
    bar = LineProgress(total=10, desc="decoder", unit="step", stream=stream, interval=3,
                       clock=clock)
    for _ in range(10):
        clock.now += 2.0  # 2 s a step
        bar.update()
        bar.set_postfix(loss="0.1234")
    bar.close()
    bar.close()  # closing twice says it once
    assert stream.getvalue().splitlines() == [
        "decoder: 2/10 steps, loss 0.1234; 4 s so far, about 16 s left",
        "decoder: 4/10 steps, loss 0.1234; 8 s so far, about 12 s left",
        "decoder: 6/10 steps, loss 0.1234; 12 s so far, about 8 s left",
        "decoder: 8/10 steps, loss 0.1234; 16 s so far, about 4 s left",
        "decoder: 10/10 steps in 20 s",
    ]


def test_a_resumed_stage_estimates_from_its_own_steps():
    clock, stream = Clock(), io.StringIO()
    steps = LineProgress(range(600, 1000), total=1000, initial=600, desc="game state",
                         unit="step", stream=stream, interval=60, clock=clock)
    for step in steps:
        clock.now += 0.5
        if step == 800:
            break
    # 120 steps in 60 s: the 880 left take 440 s, whatever the first 600 took
    assert stream.getvalue().splitlines()[0] == (
        "game state: 720/1000 steps; 1.0 min so far, about 2.3 min left")


def test_a_stage_that_did_nothing_says_nothing():
    stream = io.StringIO()
    with LineProgress(total=5, initial=5, desc="adapt", unit="step", stream=stream):
        pass
    assert stream.getvalue() == ""


def test_a_terminal_gets_tqdm_and_a_log_gets_lines(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert isinstance(progress(total=3, desc="clips", unit="video"), LineProgress)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    bar = progress(total=3, desc="clips", unit="video")
    assert isinstance(bar, tqdm) and not isinstance(bar, LineProgress)
    bar.close()
    assert "clips" in terminal.getvalue()  # the bar is drawn on the terminal it was chosen for
    assert progress(total=3, desc="x", disable=True).disable
