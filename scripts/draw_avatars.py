"""The characters' avatars, drawn from the Nano world's sprites (never from the films).

`python scripts/draw_avatars.py assets/avatars` writes `<name>.png` for each character the Nano
world draws: the sprite's head and shoulders, enlarged without smoothing (pixel art), on a round
tinted badge with a transparent outside. An asset script: the game only reads the PNGs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

AVATAR_SIZE = 128
BADGE = {"qiqi": (244, 196, 206), "sosuke": (190, 214, 240)}
"""The badge colour behind each character (their sprite's own background is plain grey)."""
SPRITE_BACKGROUND = (235, 235, 230)
HEAD_SHARE = 0.62
"""How much of the sprite's height, from the top of its head, the avatar shows."""
FACING_SHIFT = 0.12
"""The sprites face right: the square moves this share of its side that way, onto the face."""


def _head_box(mask: np.ndarray) -> tuple[int, int, int, int]:
    """A square (left, top, right, bottom) over the top `HEAD_SHARE` of the sprite in `mask`,
    centred on the head."""
    rows = np.nonzero(mask.any(axis=1))[0]
    top, bottom = int(rows.min()), int(rows.max())
    side = max(8, round((bottom - top) * HEAD_SHARE))
    head_rows = mask[top : top + max(3, side // 3)]
    centre = float(np.nonzero(head_rows.any(axis=0))[0].mean()) + FACING_SHIFT * side
    left = round(centre - side / 2)
    return left, top - 1, left + side, top - 1 + side


def draw_avatar(character: str, size: int = AVATAR_SIZE) -> Image.Image:
    """An RGBA avatar of `character` (a character the Nano world draws)."""
    from animegamer.nano.sprites import reference_image, sprite_mask  # after the path above

    sprite = reference_image(character, scale=1, background=SPRITE_BACKGROUND)
    pixels = np.asarray(sprite)
    mask = sprite_mask(pixels, np.full_like(pixels, SPRITE_BACKGROUND))
    badge = BADGE.get(character.casefold(), (220, 220, 220))
    flat = np.where(mask[..., None], pixels, np.array(badge, np.uint8))
    face = Image.fromarray(flat.astype(np.uint8)).crop(_head_box(mask))
    face = face.resize((size, size), Image.Resampling.NEAREST).convert("RGBA")
    round_mask = Image.new("L", (size, size), 0)
    ImageDraw.Draw(round_mask).ellipse((0, 0, size - 1, size - 1), fill=255)
    face.putalpha(round_mask)
    return face


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--characters", nargs="+", default=["Qiqi", "Sosuke"])
    args = parser.parse_args(argv)
    args.folder.mkdir(parents=True, exist_ok=True)
    for name in args.characters:
        path = args.folder / f"{name.lower()}.png"
        draw_avatar(name).save(path, optimize=True)
        print(path)


if __name__ == "__main__":
    main()
