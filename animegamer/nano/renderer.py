"""Nano shots rendered from instructions: a character's poses frame by frame, drawn on the
scene of its place and time of day.

The world's state (`WorldState`: where the character is, how high, which way it faces, and the
background) carries from shot to shot: a shot starts exactly where the last one ended, and a
change of altitude (taking off, landing) happens at a bounded climb rate, so nothing teleports.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from animegamer.data.shots import CLIP_FRAMES
from animegamer.game.rules import Instruction
from animegamer.nano.scene import GROUND_Y, HEIGHT, WIDTH, render_background, sprite_light
from animegamer.nano.sprites import FRIEND, Pose, draw_character, look_of
from animegamer.nano.vocabulary import (
    NANO_VOCABULARY,
    AdverbSpec,
    MotionSpec,
    PlaceSpec,
    TimeSpec,
)

X_MIN, X_MAX = 12.0, WIDTH - 12.0
MAX_TRAVEL = 4.5
"""The fastest horizontal speed, px/frame."""
CLIMB = 6.0
"""The fastest change of altitude, px/frame (taking off, landing, jumping)."""
JUMP_HEIGHT = 10.0
FLYING_ABOVE = 12.0
"""Above this altitude a character on the ground's motion is still on the broom (landing)."""
FRIEND_SIDE = 10.0
"""The friend of a social motion stands this far from the frame's edge, on the far side."""

@dataclass(frozen=True)
class WorldState:
    """What carries from one shot to the next."""

    x: float
    altitude: float
    facing: int
    time: str
    place: str


@dataclass(frozen=True)
class RenderedShot:
    """A rendered shot: its instruction, frames uint8 [F, H, W, 3], the sprite's anchor (x, y)
    in each frame [F, 2], the background it was drawn on, the states it starts and ends in and
    its labels (social, entertainment, stamina)."""

    instruction: Instruction
    motion: MotionSpec
    frames: np.ndarray
    anchors: np.ndarray
    background: np.ndarray
    start: WorldState
    end: WorldState
    labels: tuple[int, int, int]


def state_labels(motion: MotionSpec) -> tuple[int, int, int]:
    """(sc, et, st) of a motion, as the data pipeline stores them (see `vocabulary`)."""
    return motion.sc, motion.et, motion.st


def lookup(instruction: Instruction) -> tuple[MotionSpec, AdverbSpec, TimeSpec, PlaceSpec]:
    """The world's specs of an instruction's words; ValueError naming a word it does not know."""
    found = (
        NANO_VOCABULARY.motion(instruction.motion), NANO_VOCABULARY.adverb(instruction.adverb),
        NANO_VOCABULARY.time(instruction.time), NANO_VOCABULARY.place(instruction.place),
    )
    for name, value in zip(("motion", "adverb", "time", "place"), found, strict=True):
        if value is None:
            raise ValueError(
                f"the Nano world does not know the {name} {getattr(instruction, name)!r}; "
                f"it knows {', '.join(getattr(NANO_VOCABULARY, name + 's'))}"
            )
    return found  # type: ignore[return-value]


def world_scene(time: str, place: str) -> np.ndarray:
    """The Nano world's `SceneSource` (`animegamer.models.scene_latent`): the background it
    paints for a time of day and a place word, nobody in it; ValueError naming a word it does
    not know."""
    time_spec, place_spec = NANO_VOCABULARY.time(time), NANO_VOCABULARY.place(place)
    for name, word, spec in (("time", time, time_spec), ("place", place, place_spec)):
        if spec is None:
            raise ValueError(f"the Nano world does not know the {name} {word!r}; it knows "
                             f"{', '.join(getattr(NANO_VOCABULARY, name + 's'))}")
    assert time_spec is not None and place_spec is not None
    return render_background(place_spec, time_spec)


def _limbs(motion: MotionSpec, adverb: AdverbSpec, phase: float, airborne: bool) -> dict[str, Any]:
    """Pose fields of one frame of an animation at `phase` (radians)."""
    amp, wave = adverb.amplitude, math.sin(phase)
    match motion.animation:
        case "walk":
            return {"legs": 0.9 * amp * wave, "arm_front": 5 + 25 * amp * wave,
                    "arm_back": -5 - 25 * amp * wave}
        case "run":
            return {"legs": 1.2 * amp * wave, "arm_front": 20 + 55 * amp * wave,
                    "arm_back": -20 - 55 * amp * wave, "lean": 1.5}
        case "jump":
            arms = 160.0 if airborne else 25.0
            return {"legs": 0.4 * wave, "arm_front": arms, "arm_back": -arms}
        case "sway":
            return {"legs": amp * wave, "arm_front": 30.0, "arm_back": -20.0,
                    "head_turn": 0.4 * wave}
        case "breathe":
            return {"legs": wave, "arm_front": 60 + 50 * amp * wave}
        case "wave":
            return {"arm_front": 135 + 25 * amp * wave, "arm_back": -8.0}
        case "broom":
            return {"holds_broom": True, "arm_front": 35.0, "broom_tilt": 15 * amp * wave,
                    "head_lift": 0.6 * wave}
        case "turn":
            return {"head_turn": max(-1.0, min(1.0, 2 * amp * wave)), "arm_front": 125.0,
                    "head_lift": 0.5 * wave}
        case "talk":
            return {"mouth_open": math.sin(3 * phase) > 0, "arm_front": 50 + 30 * amp * wave,
                    "head_lift": 0.7 * math.sin(2 * phase)}
        case "dance":
            return {"arm_front": 120 + 50 * amp * wave, "arm_back": 120 - 50 * amp * wave,
                    "legs": 0.8 * amp * math.sin(2 * phase)}
        case "ride":
            return {"wheel": 3 * phase, "head_lift": 0.5 * math.sin(2 * phase), "arm_front": 70.0}
        case "fly":
            return {"legs": 0.6 * wave, "wheel": phase, "lean": 0.5}
    raise ValueError(f"no animation {motion.animation!r}")


_BOBS = {"wave": (0.0, 2.0), "talk": (0.0, 1.5), "turn": (1.5, 0.0), "sway": (1.2, 0.0)}
"""(sideways, upwards) sway in px of the whole body, at adverb amplitude 1, for the motions
that stay in place: a quicker wave moves the whole body more, not only a thin arm."""


def _bob(motion: MotionSpec, adverb: AdverbSpec, phase: float, frame: int) -> tuple[float, float]:
    """The body's offset from where it stands; 0 at a shot's first and last frame, so shots
    still join exactly."""
    sideways, upwards = _BOBS.get(motion.animation, (0.0, 0.0))
    envelope = adverb.amplitude * math.sin(math.pi * frame / (CLIP_FRAMES - 1))
    return (sideways * envelope * math.sin(phase),
            upwards * envelope * abs(math.sin(phase)))


def _desired_altitude(motion: MotionSpec, adverb: AdverbSpec, phase: float) -> float:
    if motion.animation == "fly":
        return motion.altitude + 2 * adverb.amplitude * math.sin(phase)
    if motion.animation == "jump":
        return JUMP_HEIGHT * adverb.amplitude * abs(math.sin(phase))
    return motion.altitude


def _step_x(x: float, facing: int, dx: float) -> tuple[float, int]:
    """Move by `dx` in the facing direction, turning round at the frame's margins."""
    x += facing * dx
    if x > X_MAX:
        return 2 * X_MAX - x, -1
    if x < X_MIN:
        return 2 * X_MIN - x, 1
    return x, facing


def _friend_x(x: float) -> float:
    return WIDTH - FRIEND_SIDE if x < WIDTH / 2 else FRIEND_SIDE


def shot_poses(
    motion: MotionSpec, adverb: AdverbSpec, start: WorldState, friend_x: float | None = None
) -> tuple[list[Pose], WorldState]:
    """The poses of a shot's frames and the state it ends in. Frame 0 is at `start`."""
    rate = 2 * math.pi * motion.cadence * adverb.speed
    travel = min(MAX_TRAVEL, motion.travel * adverb.speed)
    x, altitude, facing = start.x, start.altitude, start.facing
    if friend_x is not None:
        facing = 1 if friend_x > x else -1
    poses = []
    for frame in range(CLIP_FRAMES):
        phase = rate * frame
        if frame:
            if motion.animation == "dance":
                x, facing = _step_x(x, facing, travel * math.cos(phase))
            else:
                x, facing = _step_x(x, facing, travel)
            goal = _desired_altitude(motion, adverb, phase)
            altitude += max(-CLIMB, min(CLIMB, goal - altitude))
        posture = motion.posture
        if posture != "fly" and altitude > FLYING_ABOVE:
            posture = "fly"
        limbs = _limbs(motion, adverb, phase, altitude > 2)
        dx, dy = _bob(motion, adverb, phase, frame)
        poses.append(Pose(x=x + facing * dx, y=GROUND_Y - altitude - dy, facing=facing,
                          posture=posture, **limbs))
    return poses, dataclasses.replace(start, x=x, altitude=altitude, facing=facing)


@dataclass
class NanoRenderer:
    """Renders shots; keeps each background once drawn (one renderer per thread)."""

    backgrounds: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)

    def background(self, place: PlaceSpec, time: TimeSpec) -> np.ndarray:
        key = (place.name, time.name)
        if key not in self.backgrounds:
            self.backgrounds[key] = render_background(place, time)
        return self.backgrounds[key]

    def render(self, instruction: Instruction, start: WorldState) -> RenderedShot:
        """The shot of `instruction` starting in `start` (its time and place are taken from
        the instruction). ValueError for a word the world does not know."""
        motion, adverb, time, place = lookup(instruction)
        start = dataclasses.replace(start, time=time.name, place=place.name)
        friend_x = _friend_x(start.x) if motion.sc else None
        poses, end = shot_poses(motion, adverb, start, friend_x)
        scene = Image.fromarray(self.background(place, time))
        if friend_x is not None:
            friend = Pose(x=friend_x, y=GROUND_Y, facing=1 if friend_x < start.x else -1,
                          arm_front=20.0)
            draw_character(ImageDraw.Draw(scene), FRIEND.lit(sprite_light(time.light)), friend)
        background = np.asarray(scene)
        look = look_of(instruction.character).lit(sprite_light(time.light))
        frames = np.empty((CLIP_FRAMES, HEIGHT, WIDTH, 3), np.uint8)
        for index, pose in enumerate(poses):
            image = scene.copy()
            draw_character(ImageDraw.Draw(image), look, pose)
            frames[index] = np.asarray(image)
        anchors = np.array([(pose.x, pose.y) for pose in poses])
        return RenderedShot(instruction, motion, frames, anchors, background, start, end,
                            state_labels(motion))
