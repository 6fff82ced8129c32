"""The Gradio UI: `build_app` (`blocks`: the layout, its events and API), `GameUI` (the actions),
`create_app`."""

from animegamer.ui.blocks import build_app
from animegamer.ui.callbacks import GameUI
from animegamer.ui.layout import launch_options
from animegamer.ui.startup import create_app
from animegamer.ui.state import Player, Screen, Update

__all__ = ["GameUI", "Player", "Screen", "Update", "build_app", "create_app", "launch_options"]
