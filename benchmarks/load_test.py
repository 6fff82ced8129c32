"""Many players at once against `python app.py` (preview engine), then every game restarted.

Starts the app in a subprocess on 127.0.0.1, warms it up with one game, then runs `--clients`
gradio_client players in parallel, each playing `--turns` turns, and restarts every game. Prints
the turns played, the errors, the server's resident memory and the output folder's size at each
point. A server that keeps nothing of finished games ends near its warmed-up memory and with an
empty output folder (discarded files are deleted after the grace period, on the next action).

    .venv/bin/python benchmarks/load_test.py --clients 8 --turns 5
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from gradio_client import Client

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from animegamer.serving.clips import DELETE_GRACE_S  # noqa: E402

QIQI = ("Qiqi", "quickly", "fly on broomstick", "day", "sky")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def folder_mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def wait_for(url: str, process: subprocess.Popen, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the app exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer in {timeout_s} s")


def player(url: str, turns: int) -> tuple[Client, int, list[str]]:
    client = Client(url, verbose=False)
    played, errors = 0, []
    for turn in range(turns):
        try:
            client.predict(*QIQI, "", str(turn), api_name="/play")
            played += 1
        except Exception as error:  # a benchmark counts failures instead of stopping
            errors.append(f"{type(error).__name__}: {error}")
    return client, played, errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--steps", type=int, default=8, help="preview diffusion steps")
    args = parser.parse_args()

    output = Path(tempfile.mkdtemp(prefix="animegamer-load-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    env = {
        **os.environ,
        "ANIMEGAMER_ENGINE": "preview",
        "ANIMEGAMER_PREVIEW_STEPS": str(args.steps),
        "ANIMEGAMER_OUTPUT_DIR": str(output),
        "GRADIO_SERVER_NAME": "127.0.0.1",
        "GRADIO_SERVER_PORT": str(port),
        "GRADIO_ANALYTICS_ENABLED": "False",
    }
    server = subprocess.Popen(
        [sys.executable, "app.py"], cwd=REPO, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(url, server)
        started_mib = rss_mib(server.pid)
        warm, _, _ = player(url, 1)
        warm.predict(api_name="/restart")
        warm_mib = rss_mib(server.pid)

        began = time.perf_counter()
        with ThreadPoolExecutor(args.clients) as pool:
            results = list(pool.map(lambda _: player(url, args.turns), range(args.clients)))
        elapsed = time.perf_counter() - began
        loaded_mib, loaded_disk = rss_mib(server.pid), folder_mib(output)
        played = sum(count for _, count, _ in results)
        errors = [error for _, _, errs in results for error in errs]

        for client, _, _ in results:
            client.predict(api_name="/restart")
        time.sleep(DELETE_GRACE_S + 1)
        warm.predict(api_name="/restart")  # any action deletes what is due
        after_mib, after_disk = rss_mib(server.pid), folder_mib(output)
    finally:
        server.terminate()
        server.wait(timeout=30)

    print(f"clients {args.clients} × turns {args.turns} ({args.steps} preview steps)")
    print(f"turns played      {played} / {args.clients * args.turns} in {elapsed:.1f} s "
          f"({played / elapsed:.2f} turns/s)")
    print(f"errors            {len(errors)}")
    for error in errors[:5]:
        print(f"  {error[:160]}")
    print(f"RSS MiB           start {started_mib:.0f} · warmed up {warm_mib:.0f} · "
          f"after the games {loaded_mib:.0f} · after restart {after_mib:.0f} "
          f"({100 * (after_mib - warm_mib) / warm_mib:+.1f} % vs warmed up)")
    print(f"output MiB        after the games {loaded_disk:.2f} · after restart {after_disk:.2f}")


if __name__ == "__main__":
    main()
