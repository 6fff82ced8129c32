"""AnimeGamer: an infinite anime life simulation driven by a game-state MLLM and a video decoder."""

__version__ = "0.1.0"
