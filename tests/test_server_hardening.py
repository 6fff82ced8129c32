"""The served app under hostile or hurried use: it never freezes, never copies its models on a
page load, keeps each game's actions in order, and bounds the work a saved game can ask for.

Each test drives `python app.py`'s app on 127.0.0.1 (preview engine) through gradio_client and
plain HTTP, as a player or an attacker would.
"""

from __future__ import annotations

import copy
import json
import statistics
import threading
import time
import zipfile
from pathlib import Path

import httpx
import pytest
import torch
from conftest import QIQI_VALUES
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError
from gradio_client.utils import Status

from animegamer.characters.registry import load_registry
from animegamer.serving.settings import Settings, SettingsError
from animegamer.ui.blocks import build_app

QIQI = QIQI_VALUES
SLOW_INSTRUCTION = "Character: Qiqi; Motion: quickly fly; Background: day" + " " * 1500 + ";"


def play(client: Client, text: str = "", seed: str = "random"):
    return client.predict(*QIQI, text, seed, api_name="/play")


def timed_get(url: str) -> float:
    started = time.perf_counter()
    response = httpx.get(url, timeout=30)
    response.raise_for_status()
    return time.perf_counter() - started


def median_get(url: str, count: int = 5) -> float:
    return statistics.median(timed_get(url) for _ in range(count))


def clip_of(output) -> Path:
    return Path(output["video"] if isinstance(output, dict) else output)


# 1. A long instruction never holds the server ---------------------------------------------------


@pytest.mark.parametrize("endpoint", ["/parse", "/play"])
def test_a_long_instruction_is_refused_at_once_while_others_are_served(served_app, endpoint):
    client = Client(served_app, verbose=False)
    args = (SLOW_INSTRUCTION,) if endpoint == "/parse" else (*QIQI, SLOW_INSTRUCTION, "random")
    page_times: list[float] = []
    other = threading.Thread(target=lambda: page_times.append(timed_get(served_app)))
    started = time.perf_counter()
    job = client.submit(*args, api_name=endpoint)
    other.start()
    with pytest.raises(AppError, match="too long"):
        job.result(timeout=30)
    answered = time.perf_counter() - started
    other.join(timeout=30)
    assert answered < 2.0
    assert page_times and page_times[0] < 2.0


# 2. A page load copies no model -----------------------------------------------------------------


def test_the_blocks_config_holds_no_model(preview_engine, tmp_path, monkeypatch):
    demo = build_app(preview_engine, load_registry(), Settings(output_dir=tmp_path))

    def refuse(tensor, memo):
        raise AssertionError("a tensor was reached from the Blocks config")

    monkeypatch.setattr(torch.Tensor, "__deepcopy__", refuse)
    copy.deepcopy(demo.config)  # what Gradio does on every page load and API client start


def test_config_is_as_fast_after_a_turn_as_before(served_app):
    config = served_app.rstrip("/") + "/config"
    before = median_get(config)
    play(Client(served_app, verbose=False), seed="1")
    after = median_get(config)
    assert after < 3 * before + 0.05, (before, after)


# 3. A game's actions happen in order ------------------------------------------------------------


def play_then(client: Client, action: str, delay_s: float):
    """Start a turn, then `action` once the turn's function runs (it reports progress) and
    `delay_s` more have passed, so the action arrives during the turn or just after it."""
    turn = client.submit(*QIQI, "", "random", api_name="/play")
    deadline = time.monotonic() + 60
    while turn.status().code not in (Status.PROGRESS, Status.FINISHED) and not turn.done():
        assert time.monotonic() < deadline, "the turn never started"
        time.sleep(0.005)
    time.sleep(delay_s)
    after = client.predict(api_name=f"/{action}")
    return turn.result(timeout=60), after


def save_and_load(client: Client) -> dict:
    saved = client.predict(api_name="/save")
    return client.predict(handle_file(saved), api_name="/load")[0]


@pytest.mark.parametrize("delay_s", [0.0, 0.3])
def test_undo_during_a_turn_waits_for_it_and_undoes_it(served_app, delay_s):
    client = Client(served_app, verbose=False)
    play(client, seed="3")
    turn, undone = play_then(client, "undo", delay_s)
    assert turn[0]["turns"] == 2
    assert undone[0]["turns"] == 1
    assert client.predict(api_name="/playthrough")
    assert save_and_load(client)["turns"] == 1
    assert play(client, seed="4")[0]["turns"] == 2


@pytest.mark.parametrize("delay_s", [0.0, 0.3])
def test_restart_during_a_turn_is_not_undone_by_it(served_app, delay_s):
    client = Client(served_app, verbose=False)
    turn, restarted = play_then(client, "restart", delay_s)
    assert turn[0]["turns"] == 1 and restarted[0]["turns"] == 0
    again = play(client, seed="5")
    assert again[0]["turns"] == 1  # the turn that was running did not come back
    assert client.predict(api_name="/playthrough")
    assert save_and_load(client)["turns"] == 1


def test_play_play_undo_save_load_round_trips(served_app):
    client = Client(served_app, verbose=False)
    play(client, seed="6")
    play(client, seed="7")
    assert client.predict(api_name="/undo")[0]["turns"] == 1
    loaded = save_and_load(client)
    assert loaded["turns"] == 1 and loaded["last_turn"]["seed"] == 6
    assert play(client, seed="8")[0]["turns"] == 2


# 4. Loads are bounded by work, not only bytes ---------------------------------------------------


def long_game_save(path: Path, turns: int) -> Path:
    """A save that is valid in form, of `turns` turns (no clips: refused before they matter)."""
    from safetensors.torch import save as save_safetensors

    turn = {
        "index": 1,
        "instruction": dict(zip(("character", "adverb", "motion", "time", "place"), QIQI,
                                strict=True)),
        "states": {"ml": 0, "sc": 0, "et": 0, "st": 0},
        "motion_level": 3, "motion_scope": 5.0,
        "gauges": {"stamina": 50, "social": 45, "entertainment": 45},
        "seed": 1, "timings": {"predict_s": 0.1, "decode_s": 0.1, "total_s": 0.2},
    }
    game = {"format": "animegamer-save", "version": 1, "character": "Qiqi", "window": 1,
            "turns": [{**turn, "index": i} for i in range(1, turns + 1)]}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("game.json", json.dumps(game))
        archive.writestr("representations.safetensors", save_safetensors({}))
    return path


def many_entries_zip(path: Path, entries: int) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for i in range(entries):
            archive.writestr(f"clips/turn_{i:06d}.mp4", b"")
    return path


@pytest.mark.parametrize(
    ("make", "reason"),
    [(lambda p: long_game_save(p, 20_000), "game.json is too large|1000 turns"),
     (lambda p: many_entries_zip(p, 30_000), "30000 entries")],
    ids=["20000-turns", "30000-entries"],
)
def test_an_oversized_game_is_refused_within_seconds(served_app, tmp_path, make, reason):
    client = Client(served_app, verbose=False)
    path = make(tmp_path / "huge.zip")
    started = time.perf_counter()
    with pytest.raises(AppError, match=reason):
        client.predict(handle_file(str(path)), api_name="/load")
    assert time.perf_counter() - started < 5.0
    assert timed_get(served_app) < 2.0
    assert client.predict(api_name="/restart")[0]["turns"] == 0


# Start-up ---------------------------------------------------------------------------------------


def test_an_output_dir_that_would_expose_other_files_is_refused(tmp_path, repo_root):
    from animegamer.ui.startup import check_output_dir

    for bad in (Path("/"), repo_root, repo_root.parent, Path.home()):
        with pytest.raises(SettingsError, match="cannot hold the game's files"):
            check_output_dir(bad)
    assert check_output_dir(tmp_path / "clips") == (tmp_path / "clips").resolve()
    assert (tmp_path / "clips").is_dir()


# Loads read only uploads; every refusal has a message -------------------------------------------


def test_a_client_cannot_load_another_players_save_by_its_server_path(served_app):
    owner, other = Client(served_app, verbose=False), Client(served_app, verbose=False)
    play(owner, seed="9")
    saved = owner.predict(api_name="/save")
    assert Path(saved).is_file()  # this test runs beside the server: the path is real
    for sent in ({"path": saved}, {"path": saved, "meta": {}}):
        with pytest.raises(AppError) as refused:
            other.predict(sent, api_name="/load")
        assert str(refused.value).startswith("Cannot load this saved game: This file was not "
                                             "uploaded to this server")
    assert other.predict(api_name="/restart")[0]["turns"] == 0
    assert other.predict(handle_file(saved), api_name="/load")[0]["turns"] == 1  # uploaded


@pytest.mark.parametrize("text", [["Qiqi", "fly"], 42, {"motion": "fly"}, True])
def test_play_with_the_text_of_another_json_type_gets_a_titled_message(served_app, text):
    client = Client(served_app, verbose=False)
    with pytest.raises(AppError) as refused:
        client.predict(*QIQI, text, "random", api_name="/play")
    kind = type(text).__name__
    expected = {"list": "a list", "int": "a number", "dict": "an object", "bool": "true or false"}
    assert str(refused.value).startswith(
        f"Invalid instruction: The instruction text must be text; got {expected[kind]} ("
    )
