"""The Blocks as built for each engine kind: which banner (and that it follows the chosen
character), which chips, which endpoints."""

from __future__ import annotations

import copy
import html

import gradio as gr
import pytest

from animegamer.characters.registry import load_registry
from animegamer.nano.vocabulary import closed_vocabulary
from animegamer.serving.casting import GameEngine
from animegamer.serving.engine import Casting
from animegamer.serving.settings import EngineKind, Settings
from animegamer.ui import GameUI
from animegamer.ui.blocks import build_app
from animegamer.ui.chips import PARTS, registry_vocabulary, vocabulary_for
from animegamer.ui.events import character_banner


def components(demo) -> dict[str, dict]:
    """The Blocks' components by elem_id."""
    return {
        c["props"]["elem_id"]: c["props"]
        for c in demo.config["components"]
        if c.get("props", {}).get("elem_id")
    }


@pytest.mark.parametrize(
    ("kind", "headline"),
    [("preview", "Qiqi: played by the preview engine, tiny untrained models on the CPU"),
     ("nano", "Qiqi: played by the Nano world, a small anime world trained on a CPU"),
     ("real", "Qiqi: trained here, CPU")],
)
def test_banner_and_chips_follow_the_engine(preview_engine, tmp_path, kind, headline):
    engine = copy.copy(preview_engine)
    engine.kind = EngineKind(kind)
    engine.origin = "trained" if kind == "real" else preview_engine.origin
    engine.vocabulary = closed_vocabulary() if kind == "nano" else None
    registry = load_registry()
    demo = build_app(engine, registry, Settings(output_dir=tmp_path))
    shown = components(demo)
    assert html.escape(headline) in shown["ag-engine"]["value"]
    assert "Sosuke" not in shown["ag-engine"]["value"]
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


def test_the_banner_follows_the_chosen_character(preview_engine, tmp_path):
    """Qiqi played by the Nano world (no GPU), Sosuke by weights trained here on the CPU: the
    banner names what plays the character the picker shows, and changes with it."""
    castings = [
        Casting("Qiqi", EngineKind.NANO, "nano/qiqi", "Nano world", note="its weights need a GPU"),
        Casting("Sosuke", EngineKind.REAL, "runs/sosuke/run/character", "trained"),
    ]
    engines = dict.fromkeys(["Qiqi", "Sosuke"], preview_engine)
    engine = GameEngine(castings, engines, preview_engine.clips, "No GPU was found. Characters: …")
    demo = build_app(engine, load_registry(), Settings(output_dir=tmp_path))
    shown = components(demo)
    assert "Qiqi: played by the Nano world" in shown["ag-engine"]["value"]
    ids = {c["props"].get("elem_id"): c["id"] for c in demo.config["components"]}
    follows = [d for d in demo.config["dependencies"]
               if [ids["ag-character"], "change"] in [list(t) for t in d["targets"]]]
    assert [d["outputs"] for d in follows] == [[ids["ag-engine"]]]
    ui = GameUI(engine, load_registry())
    sosuke = character_banner(ui, "Sosuke")
    assert "<summary>Sosuke: trained here, CPU</summary>" in sosuke and "Nano" not in sosuke
    assert "Qiqi: played by the Nano world" in character_banner(ui, "Qiqi")
    assert character_banner(ui, "<script>") == gr.update()  # not a character: no change


def test_on_spaces_the_header_says_how_to_skip_the_queue():
    from animegamer.ui.layout import header_html

    assert "Duplicate this Space" not in header_html()
    header = header_html("someone/animegamer")
    assert 'href="https://huggingface.co/spaces/someone/animegamer?duplicate=true"' in header
    hostile = header_html('x/y" onmouseover="alert(1)')
    assert "Duplicate this Space" not in hostile and "onmouseover" not in hostile
    assert Settings.from_env({"SPACE_ID": "someone/animegamer"}).space_id == "someone/animegamer"
