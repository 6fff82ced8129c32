"""Backgrounds of the Nano world: each place drawn with PIL, under each time of day.

A background is the sky of the time (a gradient, the sun or the moon and stars), the place's
scenery in daylight colours multiplied by the time's light, and at night lit windows. Every
place shares the ground line `GROUND_Y`, so a character keeps its height when the place
changes. Backgrounds are static: whatever moves in a shot is the character.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np
from PIL import Image, ImageDraw

from animegamer.nano.vocabulary import PlaceSpec, TimeSpec

HEIGHT = 64
WIDTH = 96
GROUND_Y = 54
"""Row of the ground contact of a character on the ground (feet)."""
WINDOW_GLOW = (255, 215, 110)
SPRITE_LIGHT_FLOOR = 0.4
"""Characters keep this share of full light in any scene (the moon lights them at night), so
they stay recognisable while the scene around them is dark."""

RGB = tuple[int, int, int]
Light = tuple[float, float, float]


class _Painter:
    """Draws scenery in daylight colours, lit by the time of day."""

    def __init__(self, image: Image.Image, light: Light, night: bool) -> None:
        self.draw = ImageDraw.Draw(image)
        self.light = light
        self.night = night

    def colour(self, rgb: RGB) -> RGB:
        return tuple(min(255, round(c * k)) for c, k in zip(rgb, self.light, strict=True))  # type: ignore[return-value]

    def rect(self, box: tuple[float, float, float, float], rgb: RGB) -> None:
        self.draw.rectangle(box, fill=self.colour(rgb))

    def polygon(self, points: list[tuple[float, float]], rgb: RGB) -> None:
        self.draw.polygon(points, fill=self.colour(rgb))

    def ellipse(self, box: tuple[float, float, float, float], rgb: RGB) -> None:
        self.draw.ellipse(box, fill=self.colour(rgb))

    def window(self, box: tuple[float, float, float, float]) -> None:
        self.draw.rectangle(box, fill=WINDOW_GLOW if self.night else self.colour((120, 160, 200)))


def _sky(top: RGB, horizon: RGB) -> np.ndarray:
    ramp = np.linspace(0.0, 1.0, HEIGHT)[:, None, None]
    sky = (1 - ramp) * np.array(top) + ramp * np.array(horizon)
    return np.broadcast_to(sky, (HEIGHT, WIDTH, 3)).round().astype(np.uint8)


def _ground(p: _Painter, rgb: RGB, top: int = GROUND_Y - 2) -> None:
    p.rect((0, top, WIDTH, HEIGHT), rgb)


def _houses(p: _Painter, base: int, height: int, xs: range, seed: int) -> None:
    walls = ((240, 225, 190), (235, 180, 170), (180, 205, 230), (245, 240, 225))
    roofs = ((180, 60, 50), (90, 110, 160), (150, 90, 60))
    for index, x in enumerate(xs):
        h = height - 4 * ((index + seed) % 3)
        p.rect((x, base - h, x + 13, base), walls[(index + seed) % len(walls)])
        p.polygon([(x - 2, base - h), (x + 6.5, base - h - 7), (x + 15, base - h)],
                  roofs[(index + seed) % len(roofs)])
        p.window((x + 3, base - h + 4, x + 5, base - h + 7))
        p.window((x + 8, base - h + 4, x + 10, base - h + 7))


def _trees(p: _Painter, base: int, xs: range, size: int) -> None:
    for index, x in enumerate(xs):
        top = base - size - 3 * (index % 2)
        p.rect((x + size // 2 - 1, base - 6, x + size // 2 + 1, base), (95, 65, 40))
        p.polygon([(x, base - 5), (x + size // 2, top), (x + size, base - 5)],
                  (40 + 12 * (index % 3), 115 + 10 * (index % 2), 55))


def _sea(p: _Painter, top: int, bottom: int, x0: int = 0) -> None:
    p.rect((x0, top, WIDTH, bottom), (45, 120, 190))
    for y in range(top + 2, bottom, 4):
        for x in range(x0 + (y * 7) % 11, WIDTH, 13):
            p.rect((x, y, x + 4, y), (150, 200, 235))


def _paint_sky(p: _Painter) -> None:
    for box in ((6, 8, 30, 16), (50, 20, 80, 28), (20, 34, 44, 40), (70, 4, 92, 11)):
        p.ellipse(box, (250, 250, 252))
    p.rect((0, GROUND_Y - 1, WIDTH, HEIGHT), (245, 245, 250))
    for x in range(-6, WIDTH, 14):
        p.ellipse((x, GROUND_Y - 6, x + 18, GROUND_Y + 3), (245, 245, 250))


def _paint_town(p: _Painter) -> None:
    _houses(p, GROUND_Y - 2, 22, range(1, WIDTH, 16), 0)
    _ground(p, (150, 140, 130))
    p.rect((0, GROUND_Y - 10, WIDTH, GROUND_Y - 9), (110, 80, 60))
    for x in range(0, WIDTH, 6):
        p.rect((x, GROUND_Y - 10, x, GROUND_Y - 2), (110, 80, 60))


def _paint_countryside(p: _Painter) -> None:
    p.ellipse((-30, 30, 50, 70), (120, 175, 90))
    p.ellipse((35, 34, 130, 74), (105, 160, 80))
    p.rect((64, 32, 74, 40), (200, 70, 60))
    p.polygon([(62, 32), (69, 26), (76, 32)], (120, 60, 40))
    _ground(p, (190, 190, 100))
    for y in range(GROUND_Y, HEIGHT, 3):
        p.rect((0, y, WIDTH, y), (160, 165, 80))


def _paint_grass(p: _Painter) -> None:
    p.ellipse((-40, 36, 140, 90), (90, 185, 80))
    _ground(p, (80, 175, 70))
    for x in range(2, WIDTH, 5):
        y = 40 + (x * 7) % 20
        p.rect((x, y, x, y + 2), (50, 130, 45))
        if x % 3 == 0:
            p.rect((x + 1, y - 1, x + 2, y), (250, 240, 120))


def _paint_street(p: _Painter) -> None:
    facades = ((200, 160, 130), (170, 170, 190), (215, 200, 160))
    for index, x in enumerate(range(0, WIDTH, 24)):
        p.rect((x, 4, x + 23, GROUND_Y - 4), facades[index % 3])
        for row in (10, 22):
            p.window((x + 4, row, x + 8, row + 6))
            p.window((x + 14, row, x + 18, row + 6))
        for stripe in range(4):
            p.rect((x + 2 + 5 * stripe, 32, x + 4 + 5 * stripe, 36),
                   (220, 60, 60) if stripe % 2 else (245, 245, 240))
    _ground(p, (95, 95, 100), GROUND_Y - 4)
    p.rect((0, GROUND_Y - 4, WIDTH, GROUND_Y - 3), (170, 170, 165))
    p.rect((44, 14, 45, GROUND_Y - 4), (50, 50, 55))
    p.ellipse((41, 11, 48, 16), (240, 220, 150))


def _paint_forest(p: _Painter) -> None:
    p.rect((0, 18, WIDTH, GROUND_Y), (30, 85, 45))
    _trees(p, GROUND_Y - 2, range(-4, WIDTH, 10), 22)
    _trees(p, GROUND_Y, range(2, WIDTH, 17), 30)
    _ground(p, (85, 70, 45))


def _paint_seaside_town(p: _Painter) -> None:
    _sea(p, 34, GROUND_Y - 4, 40)
    p.polygon([(0, 20), (42, 34), (42, GROUND_Y), (0, GROUND_Y)], (170, 150, 110))
    _houses(p, 34, 12, range(0, 40, 15), 1)
    _ground(p, (225, 205, 160))
    p.rect((0, GROUND_Y - 5, WIDTH, GROUND_Y - 4), (240, 240, 240))


def _paint_cliff(p: _Painter) -> None:
    _sea(p, 30, HEIGHT)
    p.polygon([(0, GROUND_Y - 3), (88, GROUND_Y - 3), (96, HEIGHT), (0, HEIGHT)], (130, 100, 75))
    p.rect((0, GROUND_Y - 4, 89, GROUND_Y - 1), (95, 165, 70))
    p.rect((14, 40, 15, GROUND_Y - 3), (240, 240, 240))
    p.polygon([(10, 40), (19, 40), (14.5, 34)], (220, 60, 50))


def _paint_harbour(p: _Painter) -> None:
    _sea(p, 32, GROUND_Y - 2)
    for x, colour in ((8, (200, 60, 50)), (58, (240, 240, 235))):
        p.polygon([(x, 40), (x + 22, 40), (x + 18, 45), (x + 4, 45)], colour)
        p.rect((x + 10, 24, x + 11, 40), (90, 70, 50))
        p.polygon([(x + 12, 25), (x + 12, 38), (x + 20, 38)], (245, 245, 240))
    _ground(p, (140, 100, 60))
    for x in range(0, WIDTH, 8):
        p.rect((x, GROUND_Y - 2, x, HEIGHT), (105, 75, 45))


def _paint_forest_road(p: _Painter) -> None:
    p.ellipse((-20, 28, 60, 70), (70, 130, 70))
    p.ellipse((40, 24, 130, 70), (60, 120, 65))
    _trees(p, GROUND_Y - 3, range(0, WIDTH, 13), 18)
    _ground(p, (165, 140, 100))
    for x in range(2, WIDTH, 12):
        p.rect((x, GROUND_Y + 4, x + 5, GROUND_Y + 4), (235, 225, 190))


_PAINTERS: dict[str, Callable[[_Painter], None]] = {
    "sky": _paint_sky, "town": _paint_town, "countryside": _paint_countryside,
    "grass": _paint_grass, "street": _paint_street, "forest": _paint_forest,
    "seaside town": _paint_seaside_town, "cliff": _paint_cliff, "harbour": _paint_harbour,
    "forest road": _paint_forest_road,
}


def _celestial(image: Image.Image, time: TimeSpec) -> None:
    draw = ImageDraw.Draw(image)
    if time.stars:
        digest = hashlib.sha256(time.name.encode()).digest()
        for index in range(0, 24, 2):
            x, y = digest[index] % WIDTH, digest[index + 1] % 30
            draw.point((x, y), fill=(255, 255, 230))
        draw.ellipse((74, 4, 84, 14), fill=(245, 240, 210))
        draw.ellipse((77, 3, 87, 13), fill=time.sky_top)
        return
    sun = {"morning": (10, 22), "evening": (80, 26), "afternoon": (66, 10)}.get(time.name, (46, 6))
    colour = (255, 170, 90) if time.name == "evening" else (255, 240, 170)
    draw.ellipse((sun[0] - 4, sun[1] - 4, sun[0] + 4, sun[1] + 4), fill=colour)


def render_background(place: PlaceSpec, time: TimeSpec) -> np.ndarray:
    """The background of `place` at `time`: uint8 [HEIGHT, WIDTH, 3]."""
    image = Image.fromarray(_sky(time.sky_top, time.sky_horizon))
    _celestial(image, time)
    _PAINTERS[place.name](_Painter(image, time.light, time.stars))
    return np.asarray(image)


def sprite_light(light: Light) -> Light:
    """The light a character is drawn under, in a scene lit by `light`."""
    return tuple(SPRITE_LIGHT_FLOOR + (1 - SPRITE_LIGHT_FLOOR) * k for k in light)  # type: ignore[return-value]


def luminance(frames: np.ndarray) -> float:
    """Mean Rec. 601 luma of uint8 RGB frames, 0..255."""
    rgb = np.asarray(frames, dtype=np.float64)
    return float((rgb[..., 0] * 0.299 + rgb[..., 1] * 0.587 + rgb[..., 2] * 0.114).mean())
