"""The endpoints this UI adds, through gradio_client on the served preview app."""

from __future__ import annotations

import pytest
from conftest import QIQI_VALUES
from gradio_client import Client
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
