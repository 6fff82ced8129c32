"""The two networks of AnimeGamer: the game-state model and the animation-shot decoder."""
