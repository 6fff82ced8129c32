"""The Blocks as built for each engine kind: which banner, which chips, which endpoints."""

from __future__ import annotations

import copy

import pytest

from animegamer.characters.registry import load_registry
from animegamer.nano.vocabulary import closed_vocabulary
from animegamer.serving.settings import Settings
from animegamer.ui.blocks import build_app
from animegamer.ui.chips import PARTS, registry_vocabulary, vocabulary_for
from animegamer.ui.views import BANNERS


def components(demo) -> dict[str, dict]:
    """The Blocks' components by elem_id."""
    return {
        c["props"]["elem_id"]: c["props"]
        for c in demo.config["components"]
        if c.get("props", {}).get("elem_id")
    }


def html_values(demo) -> str:
    return "".join(
        str(c["props"].get("value", ""))
        for c in demo.config["components"] if c.get("type") == "html"
    )


@pytest.mark.parametrize("kind", ["preview", "nano", "real"])
def test_banner_and_chips_follow_the_engine(preview_engine, tmp_path, kind):
    engine = copy.copy(preview_engine)
    engine.kind = kind
    engine.vocabulary = closed_vocabulary() if kind == "nano" else None
    registry = load_registry()
    demo = build_app(engine, registry, Settings(output_dir=tmp_path))
    shown = components(demo)
    header = html_values(demo)
    for other, line in BANNERS.items():
        assert (line in header) == (other == kind)
    for character in registry.characters:
        words = vocabulary_for(character, engine)
        for part in PARTS:
            samples = shown[f"ag-chips-{part}-{character.name}"]["samples"]
            assert samples == [[w] for w in words[part]]
    assert (words == registry_vocabulary(character)) == (kind != "nano")
    default_time = "day" if kind == "nano" else "day/night"
    assert shown["ag-command"]["value"] == f"quickly fly on broomstick, {default_time} sky"
    examples = shown["ag-examples-Qiqi"]["samples"]
    assert ["smoothly fly on broomstick, day countryside"] in examples  # the registry's examples
    assert len(examples) == len({tuple(e) for e in examples})


def test_named_endpoints_keep_their_names(preview_engine, tmp_path):
    demo = build_app(preview_engine, load_registry(), Settings(output_dir=tmp_path))
    names = {d["api_name"] for d in demo.config["dependencies"] if d.get("api_name")}
    assert {
        "play", "parse", "undo", "restart", "character", "load", "save", "playthrough",
        "previous_game",
    } <= names


def test_on_spaces_the_header_says_how_to_skip_the_queue(preview_engine):
    from animegamer.ui.layout import header_html

    assert "Duplicate this Space" not in header_html(preview_engine)
    header = header_html(preview_engine, "someone/animegamer")
    assert 'href="https://huggingface.co/spaces/someone/animegamer?duplicate=true"' in header
    hostile = header_html(preview_engine, 'x/y" onmouseover="alert(1)')
    assert "Duplicate this Space" not in hostile and "onmouseover" not in hostile
    assert Settings.from_env({"SPACE_ID": "someone/animegamer"}).space_id == "someone/animegamer"
