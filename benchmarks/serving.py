"""Many players at once against `python app.py`: throughput, latency and the batches that ran.

Starts the app (Nano by default) in a subprocess on 127.0.0.1 for each `--max-batch` value,
warms it up, times lone turns, then for each `--players` count lets that many gradio_client
players press Play at the same instant, `--turns` turns each (a player's turns one after
another). Prints per run the turns played and failed, the wall time, turns/s, p50/p95 turn
latency (as a player waits for it) and the batch sizes the server's log reports; then the
acceptance ratios: 8 simultaneous turns against 8 lone ones, and p95 against a lone turn.

    .venv/bin/python benchmarks/serving.py [--engine nano] [--max-batch 1 8]
        [--players 1 4 8 20] [--turns 2] [--batch-wait 0.1]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from gradio_client import Client
from load_test import free_port, wait_for

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from animegamer.serving.batching import BATCH_LOG  # noqa: E402

QIQI = ("Qiqi", "quickly", "fly on broomstick", "day", "sky")
WARM_UP_TURNS = 3
"""The first turns of a fresh server are slower (first calls of each kernel)."""
LONE_TURNS = 8
BATCH_LINE = re.compile(rf"{BATCH_LOG} (\d+) turns of \w+ in one batch")


@dataclass
class Run:
    players: int
    turns: int
    wall_s: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    batches: Counter[int] = field(default_factory=Counter)

    @property
    def played(self) -> int:
        return len(self.latencies)

    def percentile(self, share: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


class Server:
    """The app in a subprocess, its log read line by line (the batches it reports)."""

    def __init__(self, engine: str, max_batch: int, wait_s: float, steps: int | None) -> None:
        self.output = Path(tempfile.mkdtemp(prefix="animegamer-serving-"))
        port = free_port()
        self.url = f"http://127.0.0.1:{port}/"
        env = {
            **os.environ,
            "ANIMEGAMER_ENGINE": engine,
            "ANIMEGAMER_MAX_BATCH": str(max_batch),
            "ANIMEGAMER_BATCH_WAIT_S": str(wait_s),
            "ANIMEGAMER_OUTPUT_DIR": str(self.output),
            "GRADIO_SERVER_NAME": "127.0.0.1",
            "GRADIO_SERVER_PORT": str(port),
            "GRADIO_ANALYTICS_ENABLED": "False",
        }
        if steps:
            env["ANIMEGAMER_NANO_STEPS"] = env["ANIMEGAMER_PREVIEW_STEPS"] = str(steps)
        self.process = subprocess.Popen(
            [sys.executable, "app.py"], cwd=REPO, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        self.batches: Counter[int] = Counter()
        self._lock = threading.Lock()
        threading.Thread(target=self._read_log, daemon=True).start()

    def _read_log(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if match := BATCH_LINE.search(line):
                with self._lock:
                    self.batches[int(match.group(1))] += 1

    def take_batches(self) -> Counter[int]:
        time.sleep(0.5)  # the last batch's line
        with self._lock:
            taken, self.batches = self.batches, Counter()
        return taken

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def play_together(url: str, players: int, turns: int) -> Run:
    """`players` clients, connected first, press Play at the same instant."""
    clients = [Client(url, verbose=False) for _ in range(players)]
    start = threading.Barrier(players)
    run = Run(players, turns)
    lock = threading.Lock()

    def player(index: int) -> None:
        client = clients[index]
        start.wait()
        for turn in range(turns):
            began = time.perf_counter()
            try:
                client.predict(*QIQI, "", str(1000 * index + turn), api_name="/play")
            except Exception as error:  # a benchmark counts failures instead of stopping
                with lock:
                    run.errors.append(f"{type(error).__name__}: {error}")
                continue
            with lock:
                run.latencies.append(time.perf_counter() - began)

    began = time.perf_counter()
    with ThreadPoolExecutor(players) as pool:
        list(pool.map(player, range(players)))
    run.wall_s = time.perf_counter() - began
    for client in clients:
        client.predict(api_name="/restart")
    return run


def report(max_batch: int, lone_s: float, runs: list[Run]) -> None:
    print(f"\nmax batch {max_batch} · lone turn {lone_s:.2f} s (median of {LONE_TURNS})")
    print("players × turns | played | failed | wall s | turns/s | p50 s | p95 s | batches")
    for run in runs:
        batches = " ".join(f"{size}×{count}" for size, count in sorted(run.batches.items()))
        print(f"{run.players:>7} × {run.turns:<5} | {run.played:>6} | {len(run.errors):>6} | "
              f"{run.wall_s:>6.1f} | {run.played / run.wall_s:>7.2f} | "
              f"{run.percentile(0.5):>5.1f} | {run.percentile(0.95):>5.1f} | {batches or '-'}")
        for error in run.errors[:3]:
            print(f"    {error[:160]}")
    for run in runs:
        if run.players == 8 and run.turns >= 1:
            first_round = sorted(run.latencies)[7] if run.played >= 8 else float("nan")
            print(f"8 at once: the 8 first turns done after {first_round:.1f} s; "
                  f"8 lone turns one after another {8 * lone_s:.1f} s "
                  f"(ratio {8 * lone_s / first_round:.2f}, target ≥ 2.5)")
        if run.players == 20:
            print(f"20 players: p95 {run.percentile(0.95):.1f} s = "
                  f"{run.percentile(0.95) / lone_s:.1f} × a lone turn (target ≤ 6)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="nano", choices=("nano", "preview"))
    parser.add_argument("--max-batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--players", type=int, nargs="+", default=[1, 4, 8, 20])
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--batch-wait", type=float, default=0.1,
                        help="ANIMEGAMER_BATCH_WAIT_S of the server")
    parser.add_argument("--steps", type=int, default=None,
                        help="diffusion steps (default: the engine's)")
    args = parser.parse_args()
    print(f"{args.engine} engine, {os.cpu_count()} CPUs, {args.turns} turns a player")
    for max_batch in args.max_batch:
        server = Server(args.engine, max_batch, args.batch_wait, args.steps)
        try:
            wait_for(server.url, server.process)
            lone = play_together(server.url, 1, LONE_TURNS + WARM_UP_TURNS)
            lone_s = statistics.median(lone.latencies[WARM_UP_TURNS:])
            server.take_batches()
            runs = []
            for players in args.players:
                run = play_together(server.url, players, args.turns)
                run.batches = server.take_batches()
                singles = run.played - sum(size * count for size, count in run.batches.items())
                if singles > 0:
                    run.batches[1] += singles
                runs.append(run)
        finally:
            server.stop()
        report(max_batch, lone_s, runs)


if __name__ == "__main__":
    main()
