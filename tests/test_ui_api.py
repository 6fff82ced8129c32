"""The endpoints this UI adds, through gradio_client on the served preview app."""

from __future__ import annotations

import pytest
from conftest import QIQI_VALUES
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError


def test_a_restart_and_a_switch_can_be_taken_back(served_app):
    client = Client(served_app, verbose=False)
    with pytest.raises(AppError, match="No earlier game: There is no earlier game"):
        client.predict(api_name="/previous_game")
    played = client.predict(*QIQI_VALUES, "", "3", api_name="/play")[0]
    assert client.predict(api_name="/restart")[0]["turns"] == 0
    back = client.predict(api_name="/previous_game")
    assert back[0]["turns"] == 1 and back[0]["gauges"] == played["gauges"]
    assert back[0]["last_turn"]["seed"] == 3

    switched = client.predict("Sosuke", api_name="/character")
    assert switched[0]["character"] == "Sosuke" and switched[0]["turns"] == 0
    again = client.predict(api_name="/previous_game")
    assert again[0]["character"] == "Qiqi" and again[0]["turns"] == 1


def test_errors_open_with_their_title(served_app):
    client = Client(served_app, verbose=False)
    with pytest.raises(AppError, match=r"^Invalid instruction: Motion is empty"):
        client.predict("Qiqi", "quickly", "", "day", "sky", "", "random", api_name="/play")
    with pytest.raises(AppError, match=r"^Nothing to undo: "):
        client.predict(api_name="/undo")


def refusal(client: Client, *args, api_name: str) -> AppError:
    with pytest.raises(AppError) as error:
        client.predict(*args, api_name=api_name)
    return error.value


def test_every_endpoint_refuses_a_bad_argument_with_a_title_and_a_message(served_app, tmp_path):
    """Each named endpoint, called with something it must refuse (a game with nothing to undo,
    save or go back to; a name, a seed, a text or a file it cannot use): a titled refusal whose
    message opens with the title. `/restart` takes nothing and refuses nothing."""
    client = Client(served_app, verbose=False)
    not_a_zip = tmp_path / "game.zip"
    not_a_zip.write_bytes(b"not a zip")
    calls = {
        "/play": (*QIQI_VALUES, "", "minus one"),
        "/parse": ("Motion: run; Mood: happy",),
        "/undo": (),
        "/previous_game": (),
        "/character": ("Nobody",),
        "/load": (handle_file(str(not_a_zip)),),
        "/save": (),
        "/playthrough": (),
    }
    named = Client(served_app, verbose=False).view_api(print_info=False, return_format="dict")
    assert set(named["named_endpoints"]) == {*calls, "/restart"}
    for api_name, args in calls.items():
        error = refusal(client, *args, api_name=api_name)
        assert error.title not in ("", "Error"), api_name
        assert error.message.startswith(f"{error.title}: ") and len(error.message) > 20, api_name
    not_uploaded = refusal(client, {"path": str(not_a_zip)},
                           api_name="/load")
    assert not_uploaded.title == "Cannot load this saved game"
    assert "was not uploaded" in not_uploaded.message
    not_text = refusal(client, 42, api_name="/parse")
    assert not_text.title == "Invalid instruction"
    # A number where text belongs is named with its kind and value (#51), not taken for text.
    assert not_text.message == ("Invalid instruction: The instruction text must be text; "
                                "got a number (42).")
    assert client.predict(api_name="/restart")[0]["turns"] == 0
