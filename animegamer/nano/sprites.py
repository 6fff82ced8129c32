"""The characters as sprites drawn with PIL: Qiqi (dark dress, big red bow, broom) and Sosuke
(short hair, white sailor shirt with a navy collar, blue shorts), and a friend to talk to.

A sprite is drawn from a `Pose` (where it stands and how its limbs are set) onto an
`ImageDraw`; the world animates a motion by changing the pose frame by frame. Coordinates are
pixels of a 64×96 frame; `Pose.y` is the ground contact (feet, hips when sitting or lying,
the broomstick when flying, the wheels in the car).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from animegamer.nano.vocabulary import Posture

RGB = tuple[int, int, int]
Point = tuple[float, float]

BROOM_STICK: RGB = (120, 75, 40)
BROOM_STRAW: RGB = (215, 175, 80)
CAR_BODY: RGB = (135, 70, 175)
CAR_GLASS: RGB = (190, 215, 235)
WHEEL: RGB = (35, 35, 40)
EYE: RGB = (25, 20, 30)
MOUTH: RGB = (170, 40, 50)


@dataclass(frozen=True)
class CharacterLook:
    """A character's colours and silhouette: `dress` draws a flared dress (else a shirt and
    shorts); `bow` draws a big bow on the head; `long_hair` a bob around the face."""

    name: str
    hair: RGB
    skin: RGB
    top: RGB
    bottom: RGB
    shoes: RGB
    accent: RGB
    dress: bool
    bow: bool
    long_hair: bool

    def lit(self, light: tuple[float, float, float]) -> CharacterLook:
        """The look under a scene's light (each colour channel multiplied)."""
        changes: dict[str, Any] = {
            f.name: _lit(getattr(self, f.name), light)
            for f in dataclasses.fields(self)
            if isinstance(getattr(self, f.name), tuple)
        }
        return dataclasses.replace(self, **changes)


QIQI = CharacterLook(
    name="Qiqi", hair=(45, 28, 30), skin=(250, 214, 186), top=(55, 35, 95), bottom=(55, 35, 95),
    shoes=(150, 40, 40), accent=(230, 25, 40), dress=True, bow=True, long_hair=True,
)
SOSUKE = CharacterLook(
    name="Sosuke", hair=(95, 60, 30), skin=(245, 205, 170), top=(240, 240, 245),
    bottom=(60, 105, 200), shoes=(200, 60, 40), accent=(25, 45, 120), dress=False, bow=False,
    long_hair=False,
)
FRIEND = CharacterLook(
    name="friend", hair=(200, 140, 60), skin=(240, 200, 170), top=(90, 160, 90),
    bottom=(120, 95, 70), shoes=(60, 50, 40), accent=(90, 160, 90), dress=False, bow=False,
    long_hair=False,
)


def look_of(character: str) -> CharacterLook:
    """The look of a registry character (Qiqi or Sosuke); ValueError for anyone else."""
    for look in (QIQI, SOSUKE):
        if look.name.casefold() == character.casefold():
            return look
    raise ValueError(f"the Nano world has no sprite for {character!r}; it draws Qiqi and Sosuke")


@dataclass(frozen=True)
class Pose:
    """One frame of a sprite. Angles are degrees from hanging straight down (90: forward,
    180: straight up); `legs` is the stride in −1..1; `head_turn` in −1..1 moves the face
    sideways (−1 looks back); `broom_tilt` in degrees tilts a held broom."""

    x: float
    y: float
    facing: int = 1
    posture: Posture = "stand"
    legs: float = 0.0
    arm_front: float = 10.0
    arm_back: float = -10.0
    head_turn: float = 0.0
    head_lift: float = 0.0
    lean: float = 0.0
    mouth_open: bool = False
    holds_broom: bool = False
    broom_tilt: float = 0.0
    wheel: float = 0.0


def _lit(colour: RGB, light: tuple[float, float, float]) -> RGB:
    return tuple(min(255, round(c * k)) for c, k in zip(colour, light, strict=True))  # type: ignore[return-value]


class _Canvas:
    """Drawing in sprite coordinates: x forward (mirrored by facing), y up from the anchor."""

    def __init__(self, draw: ImageDraw.ImageDraw, pose: Pose) -> None:
        self.draw = draw
        self.pose = pose

    def at(self, dx: float, dy: float) -> Point:
        return (self.pose.x + self.pose.facing * dx, self.pose.y - dy)

    def polygon(self, points: list[Point], colour: RGB) -> None:
        self.draw.polygon([self.at(*p) for p in points], fill=colour)

    def line(self, start: Point, end: Point, colour: RGB, width: int = 2) -> None:
        self.draw.line([self.at(*start), self.at(*end)], fill=colour, width=width)

    def ellipse(self, centre: Point, rx: float, ry: float, colour: RGB) -> None:
        cx, cy = self.at(*centre)
        self.draw.ellipse([cx - rx, cy - ry, cx + rx, cy + ry], fill=colour)

    def limb(self, start: Point, angle: float, length: float) -> Point:
        """The end of a limb of `length` from `start` at `angle` (degrees from down)."""
        radians = math.radians(angle)
        return (start[0] + length * math.sin(radians), start[1] - length * math.cos(radians))


def _arm(canvas: _Canvas, look: CharacterLook, shoulder: Point, angle: float) -> Point:
    elbow = canvas.limb(shoulder, angle, 3.5)
    hand = canvas.limb(shoulder, angle, 7.0)
    canvas.line(shoulder, elbow, look.top)
    canvas.line(elbow, hand, look.skin)
    return hand


def _leg(canvas: _Canvas, look: CharacterLook, hip: Point, foot: Point) -> None:
    canvas.line(hip, foot, look.skin if not look.dress else look.hair)
    canvas.line(foot, (foot[0] + 1.5, foot[1]), look.shoes)


def _head(canvas: _Canvas, look: CharacterLook, centre: Point, pose: Pose) -> None:
    cx, cy = centre
    face_dx = 1.2 * pose.head_turn
    if look.long_hair:
        canvas.ellipse((cx - 0.6, cy), 5.2, 5.2, look.hair)
        canvas.ellipse((cx + 0.6 + face_dx * 0.5, cy - 0.6), 3.6, 3.8, look.skin)
        canvas.polygon([(cx - 4.5, cy + 1), (cx + 4.5, cy + 4.5), (cx - 4.5, cy + 5.2)], look.hair)
    else:
        canvas.ellipse((cx, cy), 4.3, 4.6, look.skin)
        canvas.polygon(
            [(cx - 4.6, cy + 0.5), (cx - 4, cy + 3.8), (cx, cy + 5.2), (cx + 4.2, cy + 3.6),
             (cx + 3, cy + 2.2), (cx - 1.5, cy + 2.2), (cx - 3.5, cy - 0.5)],
            look.hair,
        )
    eye_x = cx + 2.0 + face_dx
    canvas.line((eye_x, cy + 0.6), (eye_x, cy - 0.4), EYE, width=1)
    if pose.mouth_open:
        canvas.ellipse((cx + 1.6 + face_dx, cy - 2.2), 1.0, 0.8, MOUTH)
    if look.bow:
        top = (cx - 1.0, cy + 5.6)
        canvas.polygon([top, (top[0] - 5, top[1] + 3), (top[0] - 5, top[1] - 2.5)], look.accent)
        canvas.polygon([top, (top[0] + 5, top[1] + 3), (top[0] + 5, top[1] - 2.5)], look.accent)
        canvas.ellipse(top, 1.3, 1.3, look.accent)


def _torso(canvas: _Canvas, look: CharacterLook, hip: Point, shoulder: Point, flare: float) -> None:
    sx, sy = shoulder
    hx, hy = hip
    if look.dress:
        canvas.polygon(
            [(sx - 3, sy), (sx + 3, sy), (hx + 5.5 + flare, hy - 1.5),
             (hx - 5.5 - flare, hy - 1.5)],
            look.top,
        )
        canvas.line((sx - 1.5, sy), (sx + 1.5, sy), (245, 245, 245), width=1)
        return
    waist = (hx + (sx - hx) * 0.35, hy + (sy - hy) * 0.35)
    canvas.polygon(
        [(sx - 3.5, sy), (sx + 3.5, sy), (waist[0] + 3.5, waist[1]), (waist[0] - 3.5, waist[1])],
        look.top,
    )
    canvas.polygon([(hx - 3.5, hy), (hx + 3.5, hy), (waist[0] + 3.5, waist[1]),
                    (waist[0] - 3.5, waist[1])], look.bottom)
    canvas.polygon([(sx - 3.5, sy), (sx + 3.5, sy), (sx, sy - 3.5)], look.accent)


def _held_broom(canvas: _Canvas, hand: Point, tilt: float) -> None:
    top = canvas.limb(hand, 180 + tilt, 7)
    bottom = canvas.limb(hand, tilt, 9)
    canvas.line(top, bottom, BROOM_STICK)
    bx, by = bottom
    canvas.polygon([(bx - 1, by + 1), (bx + 1, by + 1), (bx + 3, by - 4), (bx - 3, by - 4)],
                   BROOM_STRAW)


def _standing(canvas: _Canvas, look: CharacterLook, pose: Pose) -> None:
    hip = (0.0, 9.0)
    shoulder = (pose.lean, 18.0)
    back_shoulder = (shoulder[0] - 1.5, 17.5)
    _arm(canvas, look, back_shoulder, pose.arm_back)
    stride = 4.0 * pose.legs
    for sign in (-1.0, 1.0):
        start = (hip[0] + 0.8 * sign, hip[1] - (1.0 if look.dress else 0.0))
        _leg(canvas, look, start, (sign * stride, 0.0 + max(0.0, -sign * pose.legs) * 1.5))
    _torso(canvas, look, hip, shoulder, flare=abs(pose.legs))
    _head(canvas, look, (shoulder[0] + 0.3, 23.0 + pose.head_lift), pose)
    hand = _arm(canvas, look, (shoulder[0] + 2.0, 17.5), pose.arm_front)
    if pose.holds_broom:
        _held_broom(canvas, hand, pose.broom_tilt)


def _sitting(canvas: _Canvas, look: CharacterLook, pose: Pose) -> None:
    hip = (0.0, 3.0)
    shoulder = (0.3, 12.0)
    knee = (5.0, 3.5)
    _arm(canvas, look, shoulder, pose.arm_back)
    for offset in (-0.6, 0.6):
        foot = canvas.limb(knee, 20 * pose.legs + 5 * offset, 3.5)
        canvas.line((hip[0] + offset, hip[1]), knee, look.skin if not look.dress else look.hair)
        _leg(canvas, look, knee, foot)
    _torso(canvas, look, (hip[0] + 1.5, hip[1] + 1.5), shoulder, flare=0.5)
    _head(canvas, look, (shoulder[0] + 0.3, 17.0 + pose.head_lift), pose)
    _arm(canvas, look, shoulder, pose.arm_front)


def _lying(canvas: _Canvas, look: CharacterLook, pose: Pose) -> None:
    shoulder = (-5.0, 2.5)
    hip = (3.0, 2.5)
    canvas.polygon([(shoulder[0], 4.8), (hip[0] + (2 if look.dress else 0), 5.0),
                    (hip[0] + (2 if look.dress else 0), 0.0), (shoulder[0], 0.3)], look.top)
    if not look.dress:
        canvas.polygon([(hip[0] - 2, 4.8), (hip[0] + 1.5, 4.8), (hip[0] + 1.5, 0.2),
                        (hip[0] - 2, 0.2)], look.bottom)
    for lift in (1.2, 3.4):
        foot = (11.0, lift + 1.5 * pose.legs * (lift > 2))
        _leg(canvas, look, (hip[0] + 1, lift), foot)
    head = (-9.5, 3.6)
    if look.bow:
        canvas.polygon([(head[0] - 4.5, head[1]), (head[0] - 8, head[1] + 3.5),
                        (head[0] - 8, head[1] - 3.5)], look.accent)
    _head(canvas, dataclasses.replace(look, bow=False), head, pose)
    _arm(canvas, look, (shoulder[0] + 1, 4.0), pose.arm_front)


def _flying(canvas: _Canvas, look: CharacterLook, pose: Pose) -> None:
    canvas.polygon([(-11, 0.8), (-17, 3.5), (-18, -2.5), (-11, -0.8)], BROOM_STRAW)
    canvas.line((-11.0, 0.0), (11.0, 0.8), BROOM_STICK)
    hip = (0.0, 1.5)
    shoulder = (1.8 + pose.lean, 10.5)
    knee = (3.0, -2.5)
    _arm(canvas, look, shoulder, pose.arm_back)
    for offset in (-0.5, 0.5):
        canvas.line((hip[0] + offset, hip[1]), knee, look.skin if not look.dress else look.hair)
        _leg(canvas, look, knee, canvas.limb(knee, 10 * pose.legs + 8 * offset, 4.5))
    if look.dress:
        canvas.polygon([(shoulder[0] - 3, shoulder[1]), (shoulder[0] + 3, shoulder[1]),
                        (hip[0] + 5, hip[1] - 2), (hip[0] - 7 - 2 * abs(pose.legs), hip[1] - 1)],
                       look.top)
    else:
        _torso(canvas, look, hip, shoulder, flare=0.0)
    _head(canvas, look, (shoulder[0] + 0.5, 15.5 + pose.head_lift), pose)
    canvas.line(canvas.limb(shoulder, 0, 0), (7.0, 1.5 + 0.5 * math.sin(pose.wheel)), look.skin)


def _riding(canvas: _Canvas, look: CharacterLook, pose: Pose) -> None:
    shoulder = (-1.0, 15.0)
    canvas.polygon([(shoulder[0] - 3.5, 9.0), (shoulder[0] + 3.5, 9.0), (shoulder[0] + 3.5, 15.5),
                    (shoulder[0] - 3.5, 15.5)], look.top)
    canvas.polygon([(shoulder[0] - 3, 15.5), (shoulder[0] + 3, 15.5), (shoulder[0], 12.5)],
                   look.accent)
    _head(canvas, look, (shoulder[0] + 0.3, 20.0 + pose.head_lift), pose)
    canvas.polygon([(-13, 10), (4, 10), (7, 7), (13, 6.5), (13, 2), (-13, 2)], CAR_BODY)
    canvas.polygon([(4.5, 10.5), (6.5, 7.5), (3, 7.5)], CAR_GLASS)
    _arm(canvas, look, (shoulder[0] + 0.5, 14.0), pose.arm_front)
    for wheel_x in (-7.5, 7.5):
        canvas.ellipse((wheel_x, 2.0), 2.8, 2.8, WHEEL)
        spoke = (wheel_x + 2.2 * math.cos(pose.wheel), 2.0 + 2.2 * math.sin(pose.wheel))
        canvas.line((wheel_x, 2.0), spoke, (200, 200, 205), width=1)


_DRAWERS = {
    "stand": _standing, "sit": _sitting, "lie": _lying, "fly": _flying, "ride": _riding,
}


def draw_character(draw: ImageDraw.ImageDraw, look: CharacterLook, pose: Pose) -> None:
    """Draw `look` in `pose` (colours as given: light them first with `CharacterLook.lit`)."""
    _DRAWERS[pose.posture](_Canvas(draw, pose), look, pose)


def reference_image(character: str, size: tuple[int, int] = (64, 96), scale: int = 4,
                    background: RGB = (235, 235, 230)) -> Image.Image:
    """The character standing (Qiqi holding her broom) on a plain background, drawn at height ×
    width `size` and enlarged `scale` times (nearest neighbour): the dataset's reference."""
    height, width = size
    image = Image.new("RGB", (width, height), background)
    pose = Pose(x=width / 2, y=height * 0.8, holds_broom=character.casefold() == "qiqi",
                arm_front=35.0)
    draw_character(ImageDraw.Draw(image), look_of(character), pose)
    return image.resize((width * scale, height * scale), Image.Resampling.NEAREST)


def sprite_mask(frame: np.ndarray, background: np.ndarray, threshold: int = 24) -> np.ndarray:
    """Pixels where `frame` differs from `background` (any channel by more than `threshold`):
    where a sprite is drawn."""
    difference = np.abs(frame.astype(np.int16) - background.astype(np.int16)).max(axis=-1)
    return difference > threshold
