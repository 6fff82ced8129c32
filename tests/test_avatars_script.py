"""The avatars (`scripts/draw_avatars.py`) are drawn from the Nano world's sprites, and the
shipped ones are those drawings."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytest.importorskip("animegamer.nano.sprites", reason="the Nano world's sprites are missing")

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "draw_avatars.py"
_spec = importlib.util.spec_from_file_location("draw_avatars", SCRIPT)
assert _spec is not None and _spec.loader is not None
avatars = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(avatars)
AVATAR_SIZE, draw_avatar = avatars.AVATAR_SIZE, avatars.draw_avatar


@pytest.mark.parametrize("name", ["Qiqi", "Sosuke"])
def test_avatars_are_round_sprite_portraits_and_the_shipped_ones_match(name, repo_root):
    avatar = draw_avatar(name)
    pixels = np.asarray(avatar)
    assert avatar.mode == "RGBA" and avatar.size == (AVATAR_SIZE, AVATAR_SIZE)
    assert pixels[0, 0, 3] == 0 and pixels[AVATAR_SIZE // 2, AVATAR_SIZE // 2, 3] == 255
    assert len(np.unique(pixels[..., :3].reshape(-1, 3), axis=0)) >= 4  # a drawing, not a letter
    shipped = repo_root / "assets" / "avatars" / f"{name.lower()}.png"
    assert np.array_equal(np.asarray(Image.open(shipped).convert("RGBA")), pixels)
    assert shipped.stat().st_size < 50_000


def test_a_character_the_nano_world_does_not_draw_is_refused():
    with pytest.raises(ValueError, match="no sprite"):
        draw_avatar("Totoro")
