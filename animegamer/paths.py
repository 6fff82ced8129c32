"""Where the package, the character registry and the shipped Nano folders live (the bottom
layer: every other module may import it)."""

from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent
DEFAULT_REGISTRY = PACKAGE_ROOT.parent / "assets" / "characters.yaml"
DEFAULT_NANO_DIR = PACKAGE_ROOT.parent / "assets" / "nano"
"""AnimeGamer-Nano's trained character folders (one per character, `qiqi/` and `sosuke/`, and the
VAE they share, `vae/`), shipped in the repository."""
