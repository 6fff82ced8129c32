"""Playing instructions as turns without the UI: `play(PlayOptions(...))` is what
`python -m animegamer play` runs (`headless`)."""

from animegamer.play.headless import PlayOptions, PlayResult, describe, play, read_all

__all__ = ["PlayOptions", "PlayResult", "describe", "play", "read_all"]
