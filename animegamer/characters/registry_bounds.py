"""The character registry's format and bounds: every value its schema accepts is bounded by
these (the schema in `registry.py`, its error messages in `registry_messages.py`)."""

REGISTRY_FORMAT = 1
MAX_NAME_CHARS = 64
MAX_DISPLAY_CHARS = 100
MAX_CHARACTERS = 100
MAX_EXAMPLES = 50
MAX_PATH_CHARS = 4096
MAX_REVISION_CHARS = 255
MAX_LATENT_SIDE = 256
"""A latent side of 256 is a 2048-pixel video side; the release's decoder is 60×90."""
AVATAR_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif")
