"""Memory of this process, for the stages of `benchmarks/memory.py`: its peak resident set and
the sampled peak of its anonymous memory (what must fit in RAM)."""

from __future__ import annotations

import resource
import threading
from pathlib import Path

GB = 1e9
"""The unit of every size the benchmark prints (10⁹ bytes)."""


class AnonymousPeak:
    """The peak of this process's anonymous resident memory (`RssAnon`, Linux), sampled every
    `interval` seconds in a thread. Unlike the peak RSS, it leaves out the pages of memory-mapped
    weight files, which the kernel can drop and read again: it is what must fit in RAM.
    `peak_gb` is None where /proc is not there."""

    def __init__(self, interval: float = 0.02):
        self.interval = interval
        self.peak_gb: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> AnonymousPeak:
        if Path("/proc/self/status").is_file():
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _sample(self) -> None:
        peak = 0
        status = Path("/proc/self/status")
        while True:
            for line in status.read_text().splitlines():
                if line.startswith("RssAnon:"):
                    peak = max(peak, int(line.split()[1]) * 1024)
            self.peak_gb = round(peak / GB, 2)
            if self._stop.wait(self.interval):
                return


def peak_rss_gb() -> float:
    """This process's peak RSS (`VmHWM`): `ru_maxrss` would include the parent's, which Linux
    carries over `exec`."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) * 1024 / GB, 2)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GB, 2)
