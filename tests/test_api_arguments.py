"""Every named endpoint under arguments of any JSON type: a titled refusal naming what came,
never an uncaught error (a property test over random JSON values, seeded)."""

from __future__ import annotations

import random
from typing import Any

import gradio as gr
import pytest
from conftest import QIQI_VALUES

from animegamer.characters.registry import load_registry
from animegamer.ui import GameUI, api
from animegamer.ui.state import GameSlot

CASES = 150
KINDS = {bool: "true or false", int: "a number", float: "a number", list: "a list",
         dict: "an object"}


def random_json(rng: random.Random, depth: int = 0) -> Any:
    """A JSON value that is not a string (nor null): a number, a bool, a list or an object,
    nested up to three levels."""
    kind = rng.choice(["bool", "int", "float", "list", "dict"] if depth < 3 else ["int", "bool"])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "int":
        return rng.choice([0, -1, 7, 2**70, rng.randint(-10**9, 10**9)])
    if kind == "float":
        return rng.choice([0.5, -3.25, 1e300, rng.uniform(-1e6, 1e6)])
    items = [rng.choice([None, "x" * rng.randint(0, 300), random_json(rng, depth + 1)])
             for _ in range(rng.randint(0, 5))]
    if kind == "list":
        return items
    return {f"k{i}": item for i, item in enumerate(items)}


@pytest.fixture(scope="module")
def ui(preview_engine):
    return GameUI(preview_engine, load_registry(), delete_grace_s=0)


def endpoints(ui: GameUI, slot: GameSlot) -> dict[str, tuple[Any, list[Any]]]:
    """Each endpoint's function and a valid argument list (the one to spoil)."""
    return {
        "/play": (lambda *a: api.play(ui, slot, *a, progress=None),
                  [*QIQI_VALUES, "", "random"]),
        "/parse": (lambda *a: api.parse(ui, slot, *a), ["quickly fly, day sky"]),
        "/character": (lambda *a: api.choose_character(ui, slot, *a), ["Qiqi"]),
        "/load": (lambda *a: api.load(ui, set(), slot, *a), [{"path": "game.zip"}]),
    }


def test_any_json_type_in_any_argument_gets_a_titled_refusal_naming_it(ui):
    rng = random.Random(51)
    slot = GameSlot(ui.root)
    calls = endpoints(ui, slot)
    for _ in range(CASES):
        name = rng.choice(sorted(calls))
        call, arguments = calls[name]
        position = rng.randrange(len(arguments))
        value = random_json(rng)
        if name == "/load" and rng.random() < 0.5:  # the path inside the file object
            arguments = [{"path": value}]
        else:
            arguments = [*arguments[:position], value, *arguments[position + 1:]]
        if name == "/play" and position == 6 and isinstance(value, int | float) \
                and not isinstance(value, bool):
            continue  # a number is a seed: a turn would be played
        with pytest.raises(gr.Error) as refused:
            call(*arguments)
        message, title = refused.value.message, refused.value.title
        assert title and title != "Error" and message.startswith(f"{title}: "), (name, value)
        if not (name == "/load" and arguments[0] is value and isinstance(value, dict)):
            assert f"got {KINDS[type(value)]}" in message, (name, value, message)  # not a file
        assert len(message) < 300
    assert slot.player is None  # no refused call started or changed a game
