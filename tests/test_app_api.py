"""The app served on 127.0.0.1 with the preview engine, driven through gradio_client."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from conftest import COMMAND_FORMS, QIQI_VALUES
from gradio.utils import get_upload_folder
from gradio_client import Client
from gradio_client.exceptions import AppError

from animegamer.ui.startup import app_settings

QIQI = QIQI_VALUES




def play(client: Client, fields=QIQI, text: str = "", seed: str = "random"):
    return client.predict(*fields, text, seed, api_name="/play")


def test_named_endpoints(served_app):
    api = Client(served_app, verbose=False).view_api(print_info=False, return_format="dict")
    names = set(api["named_endpoints"])
    assert {"/play", "/undo", "/restart", "/character", "/save", "/playthrough"} <= names
    params = [p["parameter_name"] for p in api["named_endpoints"]["/play"]["parameters"]]
    assert params == [
        "instruction_character", "adverb", "motion", "time", "place", "instruction_text",
        "seed_text",
    ]


def test_two_clients_play_independent_games(served_app):
    first = Client(served_app, verbose=False)
    second = Client(served_app, verbose=False)

    out = play(first, seed="21")
    after_one, chat, clip, gallery = out[0], out[1], out[2], out[3]
    summary = after_one
    assert summary["turns"] == 1 and summary["last_turn"]["seed"] == 21
    assert Path(clip["video"] if isinstance(clip, dict) else clip).is_file()
    assert len(gallery) == 1 and len(chat) == 2

    out = play(first, text="Character: Qiqi; Motion: gently sit on railing; Background: day town.")
    summary, gallery = out[0], out[3]
    assert summary["turns"] == 2 and len(gallery) == 2
    assert summary["last_turn"]["instruction"]["motion"] == "sit on railing"
    assert out[7:12] == ("Qiqi", "gently", "sit on railing", "day", "town")
    assert out[12] == ""

    fresh = second.predict(api_name="/restart")
    assert fresh[0]["turns"] == 0
    assert fresh[0]["gauges"] == {"stamina": 50, "social": 50, "entertainment": 50}
    assert fresh[3] == []
    own = play(second, seed="22")
    assert own[0]["turns"] == 1 and len(own[3]) == 1 and len(own[1]) == 2
    assert own[0]["gauges"] == after_one["gauges"]  # from fresh gauges, not after 2 turns

    undone = first.predict(api_name="/undo")
    assert undone[0]["turns"] == 1 and len(undone[3]) == 1
    assert undone[0]["gauges"] == after_one["gauges"]

    switched = second.predict("Sosuke", api_name="/character")
    assert switched[0]["character"] == "Sosuke" and switched[0]["turns"] == 0
    assert first.predict(api_name="/undo")[0]["character"] == "Qiqi"


def test_players_pressing_play_together_each_get_their_own_turn(served_app):
    """Six clients press Play at the same instant: the server lets them in together (its turn
    queue holds a batch) and each game holds exactly its own turn, with its own seed."""
    clients = [Client(served_app, verbose=False) for _ in range(6)]
    start = threading.Barrier(len(clients))
    summaries: list[dict] = [{} for _ in clients]

    def press(index: int) -> None:
        start.wait()
        summaries[index] = play(clients[index], seed=str(100 + index))[0]

    threads = [threading.Thread(target=press, args=(i,)) for i in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert [(s["turns"], s["last_turn"]["seed"]) for s in summaries] == [
        (1, 100 + index) for index in range(len(clients))
    ]
    for client in clients:
        client.predict(api_name="/restart")


def test_errors_reach_the_client_and_keep_the_game(served_app):
    client = Client(served_app, verbose=False)
    with pytest.raises(AppError, match="Motion is empty"):
        play(client, fields=("Qiqi", "quickly", "", "day", "sky"))
    with pytest.raises(AppError, match="no turn to undo"):
        client.predict(api_name="/undo")
    with pytest.raises(AppError, match="Could not read the instruction"):
        client.predict("Character: Qiqi; Mood: happy; Motion: run", api_name="/parse")
    assert client.predict(api_name="/restart")[0]["turns"] == 0


@pytest.fixture(scope="module")
def parse_client(served_app):
    """One client that only parses: its game stays fresh, so every form reads the same gaps."""
    return Client(served_app, verbose=False)


@pytest.mark.parametrize(("text", "expected"), COMMAND_FORMS)
def test_parse_reads_every_form_the_command_line_reads(parse_client, text, expected):
    assert parse_client.predict(text, api_name="/parse") == tuple(expected)


def test_a_refused_parse_says_why_once_in_plain_text(parse_client):
    with pytest.raises(AppError) as error:
        parse_client.predict("Motion: run; Mood: happy", api_name="/parse")
    message = str(error.value)
    assert message.startswith("Invalid instruction: Could not read the instruction. Type e.g. "
                              "'quickly fly on broomstick, day sky'")
    assert message.count("Could not read") == 1 and "&#" not in message and "&quot;" not in message


def test_app_settings_put_clips_under_gradios_temp_dir():
    settings = app_settings({"ANIMEGAMER_ENGINE": "preview"})
    assert settings.output_dir == Path(get_upload_folder()) / "animegamer"
    assert app_settings({"ANIMEGAMER_OUTPUT_DIR": "/srv/clips"}).output_dir == Path("/srv/clips")
