"""The shot representation the two networks exchange: part of the game state the models exchange.

Plain constants, no imports: the pure game module and the save-file reader may import them
without loading any model code.
"""

REPRESENTATION_TOKENS = 226
"""Vectors in one shot representation (= frame positions of a video block in the prompt, = text
tokens of the decoder)."""
TEXT_TOKENS = 30
"""Its first rows: motion-description tokens (T5 padding/truncation length)."""
IMAGE_TOKENS = REPRESENTATION_TOKENS - TEXT_TOKENS
"""Its other rows: the first frame's image patches (a 14×14 grid)."""
