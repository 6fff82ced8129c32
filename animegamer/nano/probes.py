"""World probes: what a clip shows (time of day, place, character, motion), measured on its
frames with the Nano world's own definitions, no learned model (issue 14, "Quality, measured").

- time and place: the clip's temporal median frame (where a moving character mostly vanishes)
  is compared with every world background `render_background(place, time)` on 4×4 blocks; the
  distance is the mean over the closest 70 % of the blocks, so a character or a friend standing
  still does not count. The time is that of the nearest background over all places, the place
  that of the nearest over all times.
- the sprite: the pixels that differ from the nearest background, blurred as much as the clip
  is (a decoder's clips are softer than the world's drawing; the difference smoothed over
  3×3 pixels, its threshold raised where the background is busy and a video codec errs; the
  largest patch and the patches near it; the friend of a social motion, found by the hue of
  its shirt where the world places it, left out).
- character: the sprite's pixels vote for the nearest colour of the sprites' palettes, lit as
  the world lights characters at that time:
  Qiqi's dark dress, red bow and broom against Sosuke's white shirt, blue shorts and car.
  Colours both share (skin, shoes, eyes) and the friend's vote for nobody.
- motion: the sprite's ground contact (how high it is), its height and width, how far it goes
  sideways and how much its feet rise and fall, classified into coarse classes. Some motions
  differ only in limb details or in speed, which an adverb changes too (a quick walk is as
  fast as a tired run), so they share a class; `MOTION_CLASSES` is the mapping.

Each probe gives a label and its scores: shares of belief per class that sum to at most 1, the
rest being "not a clip of this world" (a clip whose background moves everywhere or matches
none of the world's, or a "sprite" that fills the frame), so noise gets low confidence. The
labels are what the evaluation compares with an instruction (`probe_agreement`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from PIL import Image, ImageFilter

from animegamer.game.rules import Instruction
from animegamer.nano.renderer import FRIEND_SIDE
from animegamer.nano.scene import GROUND_Y, HEIGHT, WIDTH, render_background, sprite_light
from animegamer.nano.sprites import (
    BROOM_STICK,
    BROOM_STRAW,
    CAR_BODY,
    CAR_GLASS,
    EYE,
    FRIEND,
    MOUTH,
    QIQI,
    SOSUKE,
    WHEEL,
)
from animegamer.nano.vocabulary import CHARACTERS, NANO_VOCABULARY, PLACES, TIMES, TimeSpec

PROBES = ("time", "place", "character", "motion")
MOTION_CLASSES: dict[str, tuple[str, ...]] = {
    "fly": ("fly on broomstick",),
    "jump": ("jump",),
    "lie": ("lie down",),
    "ride": ("ride in the car",),
    "travel": ("walk", "run"),
    "sit": ("sit",),
    "still": ("wave hand", "hold broom", "turn head", "talk", "dance"),
}
"""The motion probe's classes and the world's motions each stands for. Walking and running
differ by speed, which the adverb also sets; the motions done on the spot differ by an arm,
the head or the mouth, too small to tell apart at 64×96."""
MOTION_CLASS_OF = {motion: name for name, motions in MOTION_CLASSES.items() for motion in motions}
RGB = tuple[int, int, int]
NEUTRAL = "neutral"


def _palettes() -> dict[str, tuple[RGB, ...]]:
    """Colours by who they vote for; `NEUTRAL` colours absorb pixels without a vote."""
    return {
        "Qiqi": (QIQI.top, QIQI.accent, QIQI.hair, BROOM_STRAW),
        "Sosuke": (SOSUKE.top, SOSUKE.bottom, SOSUKE.hair, CAR_BODY, CAR_GLASS),
        NEUTRAL: (QIQI.skin, SOSUKE.skin, QIQI.shoes, SOSUKE.shoes, SOSUKE.accent, EYE, MOUTH,
                  WHEEL, BROOM_STICK, FRIEND.top, FRIEND.hair, FRIEND.bottom, FRIEND.skin),
    }


@dataclass(frozen=True)
class ProbeConfig:
    """How the probes measure; the defaults are calibrated on rendered shots (also after the
    mp4 round trip the evaluation reads clips through)."""

    block: int = 4
    """Background matching compares means of `block`×`block` pixels (robust to blur)."""
    keep: float = 0.7
    """Share of the closest blocks the background distance averages."""
    reject_distance: float = 30.0
    """Background distance (0..255) at which "no background of this world" is as likely as a
    background."""
    temperature: float = 3.0
    mask_threshold: int = 24
    """A pixel belongs to the sprite when it differs from the background by more (any channel);
    raised to 3× the median mismatch of the background itself for a clip drawn less exactly."""
    max_background_change: float = 12.0
    """Median over pixels of their mean change from the median frame (0..255) at which a clip
    is as likely moving everywhere (noise, flicker) as a world clip with a still background."""
    max_mask_threshold: int = 64
    noise_factor: float = 2.0
    """The threshold is also raised to this many times the clip's own noise: the median over
    pixels and frames of each frame's (3×3 box mean) difference from the median frame. A
    generated clip's noise otherwise joins the sprite's mask, and its colours vote (the brown of
    roads and trunks, the blue of the sky match Sosuke's hair and car glass)."""
    blur_radii: tuple[float, ...] = (0.0, 0.75, 1.5, 2.5)
    max_busyness: float = 20.0
    """Where the background is busy the threshold is raised by its busyness, up to this much
    (a video codec's errors gather at the edges of masts, waves and windows)."""
    blob_reach: int = 9
    """A frame's sprite is its largest connected patch of changed pixels and the patches this
    close to it (a codec's specks elsewhere are dropped)."""
    palette_distance: float = 48.0
    """A sprite pixel votes only when a palette colour is nearer than this (RGB distance)."""
    min_sprite_pixels: int = 12
    max_sprite_share: float = 0.25
    """A "sprite" covering more of the frame than this is not a character of this world."""
    fly_altitude: float = 15.0
    jump_altitude: float = 2.5
    jump_rise: float = 4.0
    lie_height: float = 16.0
    sit_height: tuple[tuple[str, float], ...] = (("Qiqi", 29.5), ("Sosuke", 25.5))
    """Below this height (px, per character: Qiqi's bow makes her taller) a character on the
    ground sits; the mean for a clip whose character is not known."""
    ride_width: float = 21.0
    travel_excursion: float = 4.5


@dataclass(frozen=True)
class Probe:
    """One probe's answer: `label` (None when nothing could be measured), `confidence` (the
    label's score) and `scores` (per class, summing to at most 1)."""

    label: str | None
    confidence: float
    scores: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class SpriteTrack:
    """The sprite measured in every frame that shows one: ground contact row (`bottom`), top
    row, width and centroid column; `share`: the mean share of the frame it covers."""

    bottom: np.ndarray
    top: np.ndarray
    width: np.ndarray
    centre_x: np.ndarray
    share: float
    frames_seen: int
    frame_count: int


@dataclass(frozen=True)
class ProbeResult:
    time: Probe
    place: Probe
    character: Probe
    motion: Probe

    def labels(self) -> dict[str, str | None]:
        """Each probe's label, by probe name (`PROBES`)."""
        return {name: getattr(self, name).label for name in PROBES}


def _sigmoid(value: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, value))))


def _reject_softmax(distances: Mapping[str, float], reject: float,
                    temperature: float) -> dict[str, float]:
    """Softmax of −distance/temperature with one more option, "none of these", at `reject`."""
    names = list(distances)
    logits = np.array([-distances[n] for n in names] + [-reject]) / temperature
    weights = np.exp(logits - logits.max())
    weights /= weights.sum()
    return {name: float(w) for name, w in zip(names, weights[:-1], strict=True)}


def _scaled(probe: Probe, factor: float) -> Probe:
    return Probe(probe.label, probe.confidence * factor,
                 {name: score * factor for name, score in probe.scores.items()})


def _probe(scores: dict[str, float]) -> Probe:
    if not scores:
        return Probe(None, 0.0, {})
    label = max(scores, key=scores.__getitem__)
    return Probe(label, scores[label], scores)


def _as_world_frames(frames: np.ndarray) -> np.ndarray:
    """uint8 [F, HEIGHT, WIDTH, 3]: a clip of another size is resized (bilinear)."""
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or not len(frames) or frames.dtype != np.uint8:
        raise ValueError(f"frames must be uint8 [F, H, W, 3], got {frames.dtype} {frames.shape}")
    if frames.shape[1:3] == (HEIGHT, WIDTH):
        return frames
    return np.stack([np.asarray(Image.fromarray(f).resize((WIDTH, HEIGHT),
                                                          Image.Resampling.BILINEAR))
                     for f in frames])


class NanoProbes:
    """The probes, holding the world's backgrounds (every place × time, drawn once)."""

    def __init__(self, config: ProbeConfig | None = None) -> None:
        self.config = config or ProbeConfig()
        self.keys = [(p.name, t.name) for p in PLACES for t in TIMES]
        self.backgrounds = np.stack([render_background(p, t) for p in PLACES for t in TIMES])
        self._blocks = self._block_means(self.backgrounds)

    def _block_means(self, images: np.ndarray) -> np.ndarray:
        b = self.config.block
        n = images.shape[0]
        shaped = images.astype(np.float32).reshape(n, HEIGHT // b, b, WIDTH // b, b, 3)
        return shaped.mean(axis=(2, 4))

    def background_distances(self, median: np.ndarray) -> np.ndarray:
        """Robust distance of a median frame [H, W, 3] to every background, [places × times]."""
        blocks = self._block_means(median[None])[0]
        per_block = np.abs(self._blocks - blocks[None]).mean(axis=-1).reshape(len(self.keys), -1)
        kept = max(1, round(self.config.keep * per_block.shape[1]))
        return np.sort(per_block, axis=1)[:, :kept].mean(axis=1)

    def probe(self, frames: np.ndarray) -> ProbeResult:
        """All four probes of a clip, uint8 [F, H, W, 3]."""
        frames = _as_world_frames(frames)
        median = np.median(frames, axis=0).round().astype(np.uint8)
        distances = self.background_distances(median)
        grid = distances.reshape(len(PLACES), len(TIMES))
        cfg = self.config
        time = _probe(_reject_softmax({t.name: float(grid[:, i].min())
                                       for i, t in enumerate(TIMES)},
                                      cfg.reject_distance, cfg.temperature))
        place = _probe(_reject_softmax({p.name: float(grid[i].min())
                                        for i, p in enumerate(PLACES)},
                                       cfg.reject_distance, cfg.temperature))
        change = np.abs(frames.astype(np.int16) - median.astype(np.int16)).max(axis=-1)
        still = self._stillness(change)
        time, place = _scaled(time, still), _scaled(place, still)
        best = int(np.argmin(distances))
        background = self._sharpness_matched(self.backgrounds[best], median)
        masks = self.sprite_masks(frames, background, median, change)
        track = self.track(masks)
        fit = self._sprite_fit(track) * still
        character = self.character(frames[masks], TIMES[best % len(TIMES)], fit)
        motion = self.motion(track, fit, character.label)
        return ProbeResult(time, place, character, motion)

    def _sharpness_matched(self, background: np.ndarray, median: np.ndarray) -> np.ndarray:
        """The background blurred as much as the clip is (a decoder's clip is softer than the
        world's drawing): the Gaussian radius of `blur_radii` nearest to the median frame."""
        candidates = [background if radius == 0 else np.asarray(
            Image.fromarray(background).filter(ImageFilter.GaussianBlur(radius)))
            for radius in self.config.blur_radii]
        errors = []
        for candidate in candidates:
            error = np.abs(candidate.astype(np.int16) - median.astype(np.int16)).max(axis=-1)
            kept = np.sort(error.ravel())[: round(self.config.keep * error.size)]
            errors.append(kept.mean())
        return candidates[int(np.argmin(errors))]

    def _stillness(self, change: np.ndarray) -> float:
        """How static the clip's background is (0..1), from each pixel's change from the median
        frame [F, H, W]: in the world only the character moves, so most pixels stay at their
        median; noise or flicker moves everywhere."""
        return _sigmoid((self.config.max_background_change - float(np.median(change.mean(0))))
                        / 2.0)

    def sprite_masks(self, frames: np.ndarray, background: np.ndarray, median: np.ndarray,
                     change: np.ndarray) -> np.ndarray:
        """bool [F, H, W]: the character in each frame (the friend of a social motion, who
        stands at the frame's edge on the character's far side, removed); `change` [F, H, W]:
        each pixel's change from the median frame, which also measures the clip's noise."""
        mismatch = np.abs(median.astype(np.int16) - background.astype(np.int16)).max(axis=-1)
        residual = _box3(change.astype(np.float32))
        threshold = min(self.config.max_mask_threshold,
                        max(self.config.mask_threshold, int(3 * np.median(mismatch)),
                            int(self.config.noise_factor * np.median(residual))))
        difference = np.abs(frames.astype(np.int16) - background.astype(np.int16)).max(axis=-1)
        allowance = np.minimum(_busyness(background), self.config.max_busyness)
        masks = _box3(difference.astype(np.float32)) > threshold + allowance
        for column in self._friend_columns(median, masks.all(axis=0)):
            masks[:, :, column] = False
        return _main_blobs(masks, self.config.blob_reach)

    def _friend_columns(self, median: np.ndarray, still: np.ndarray) -> list[slice]:
        """Columns of a friend found where the world puts one: pixels present in every frame
        with the hue of the friend's green shirt (under any time's light)."""
        found = []
        for x in (FRIEND_SIDE, WIDTH - FRIEND_SIDE):
            columns = slice(max(0, int(x) - 8), min(WIDTH, int(x) + 9))
            pixels = median[:, columns][still[:, columns]].astype(float)
            if len(pixels) and _colour_match(pixels, np.array(FRIEND.top, float)).sum() >= 6:
                found.append(columns)
        return found

    def track(self, masks: np.ndarray) -> SpriteTrack:
        bottoms, tops, widths, centres = [], [], [], []
        for mask in masks:
            if mask.sum() < self.config.min_sprite_pixels:
                continue
            rows = np.nonzero(mask.sum(axis=1) >= 1)[0]
            columns = np.nonzero(mask)[1]
            low, high = np.percentile(columns, [2, 98])
            bottoms.append(rows.max())
            tops.append(rows.min())
            widths.append(high - low + 1)
            centres.append(columns.mean())
        return SpriteTrack(np.array(bottoms, float), np.array(tops, float),
                           np.array(widths, float), np.array(centres, float),
                           float(masks.mean()), len(bottoms), len(masks))

    def _sprite_fit(self, track: SpriteTrack) -> float:
        """How much the changed pixels look like one character of this world (0..1)."""
        if not track.frames_seen:
            return 0.0
        small = _sigmoid((self.config.max_sprite_share - track.share) / 0.02)
        return small * track.frames_seen / track.frame_count

    def character(self, pixels: np.ndarray, time: TimeSpec, fit: float) -> Probe:
        """Palette votes of the sprite's pixels [N, 3]."""
        if not len(pixels):
            return Probe(None, 0.0, {})
        light = np.array(sprite_light(time.light))
        owners, colours = [], []
        for owner, palette in _palettes().items():
            for colour in palette:
                owners.append(owner)
                colours.append(np.minimum(255.0, np.array(colour) * light))
        table = np.array(colours)
        distance = np.linalg.norm(pixels[:, None, :].astype(float) - table[None], axis=-1)
        nearest = distance.argmin(axis=1)
        matched = distance[np.arange(len(pixels)), nearest] < self.config.palette_distance
        votes = {name: int((matched & np.isin(nearest, [i for i, o in enumerate(owners)
                                                        if o == name])).sum())
                 for name in CHARACTERS}
        unmatched = int((~matched).sum())
        total = sum(votes.values()) + unmatched
        if not sum(votes.values()):
            return Probe(None, 0.0, {name: 0.0 for name in CHARACTERS})
        return _probe({name: fit * count / total for name, count in votes.items()})

    def motion(self, track: SpriteTrack, fit: float, character: str | None = None) -> Probe:
        """The coarse motion class: a decision list (fly, jump, lie, ride, travel, sit, still)
        with soft thresholds, so each class's score says how clearly its rule held."""
        if not track.frames_seen:
            return Probe(None, 0.0, {})
        cfg = self.config
        heights = dict(cfg.sit_height)
        sit_height = heights.get(character or "", float(np.mean(list(heights.values()))))
        altitude = GROUND_Y + 1 - float(np.median(track.bottom))
        rise = float(min(np.ptp(track.bottom), np.ptp(track.top)))
        height = float(np.median(track.bottom - track.top + 1))
        width = float(np.median(track.width))
        excursion = float(np.abs(track.centre_x - track.centre_x[0]).max())
        rules = [
            ("fly", _sigmoid((altitude - cfg.fly_altitude) / 1.5)),
            ("jump", _sigmoid((altitude - cfg.jump_altitude) / 0.5)
             * _sigmoid((rise - cfg.jump_rise) / 0.5)),
            ("lie", _sigmoid((cfg.lie_height - height) / 1.0)),
            ("ride", _sigmoid((width - cfg.ride_width) / 1.0)),
            ("travel", _sigmoid(excursion - cfg.travel_excursion)),
            ("sit", _sigmoid((sit_height - height) / 0.7)),
        ]
        scores, remaining = {}, fit
        for name, holds in rules:
            scores[name] = remaining * holds
            remaining *= 1 - holds
        scores["still"] = remaining
        return _probe(scores)


def _box3(images: np.ndarray) -> np.ndarray:
    """3×3 box mean of [..., H, W] (edges padded): a lone pixel or 2×2 speck of a codec's
    error falls under the threshold, a sprite's body and limbs stay above it."""
    padded = np.pad(images, [(0, 0)] * (images.ndim - 2) + [(1, 1), (1, 1)], mode="edge")
    height, width = images.shape[-2:]
    windows = [padded[..., dy : dy + height, dx : dx + width]
               for dy in range(3) for dx in range(3)]
    return np.mean(windows, axis=0)


def _main_blobs(masks: np.ndarray, reach: int) -> np.ndarray:
    """Per frame [F, H, W]: the largest 8-connected patch and the patches that come within
    `reach` pixels of its bounding box."""
    big = masks.size
    labels = np.where(masks, np.arange(masks.size).reshape(masks.shape), big)
    while True:
        padded = np.pad(labels, [(0, 0), (1, 1), (1, 1)], constant_values=big)
        height, width = masks.shape[1:]
        spread = np.min([padded[:, dy : dy + height, dx : dx + width]
                         for dy in range(3) for dx in range(3)], axis=0)
        spread = np.where(masks, spread, big)
        if np.array_equal(spread, labels):
            break
        labels = spread
    kept = np.zeros_like(masks)
    for index in range(len(masks)):
        found, sizes = np.unique(labels[index][masks[index]], return_counts=True)
        if not len(found):
            continue
        rows, columns = np.nonzero(labels[index] == found[sizes.argmax()])
        box = (slice(max(0, rows.min() - reach), rows.max() + reach + 1),
               slice(max(0, columns.min() - reach), columns.max() + reach + 1))
        near = np.unique(labels[index][box][masks[index][box]])
        kept[index] = np.isin(labels[index], near) & masks[index]
    return kept


def _busyness(background: np.ndarray) -> np.ndarray:
    """[H, W]: how much the background varies around each pixel (0..255), where a video
    codec's errors gather (edges of masts, waves, windows)."""
    rgb = background.astype(np.float32)
    local = np.moveaxis(_box3(np.moveaxis(rgb, -1, 0)), 0, -1)
    return _box3(np.abs(rgb - local).max(axis=-1))


def _colour_match(pixels: np.ndarray, colour: np.ndarray) -> np.ndarray:
    """Pixels [N, 3] of `colour` under some light: the same hue (normalised colour) and not
    black."""
    norm = pixels / np.maximum(pixels.sum(axis=1, keepdims=True), 1.0)
    target = colour / colour.sum()
    return (np.abs(norm - target).max(axis=1) < 0.05) & (pixels.sum(axis=1) > 60)


def probe_clip(frames: np.ndarray, probes: NanoProbes | None = None) -> ProbeResult:
    """The world probes of a clip uint8 [F, H, W, 3] (`probes` reuses the drawn backgrounds)."""
    return (probes or NanoProbes()).probe(frames)


def expected_labels(instruction: Instruction) -> dict[str, str | None]:
    """What each probe should say for an instruction (canonical words via the world's phrase
    lookup); None for a word the world does not know."""
    motion = NANO_VOCABULARY.motion(instruction.motion)
    time = NANO_VOCABULARY.time(instruction.time)
    place = NANO_VOCABULARY.place(instruction.place)
    character = next((c for c in CHARACTERS if c.casefold() == instruction.character.casefold()),
                     None)
    return {
        "time": time.name if time else None,
        "place": place.name if place else None,
        "character": character,
        "motion": MOTION_CLASS_OF[motion.name] if motion else None,
    }


def probe_agreement(result: ProbeResult, instruction: Instruction) -> dict[str, bool | None]:
    """Per probe: whether its label is what the instruction asks for (None when the
    instruction's word is outside the world, so there is nothing to compare with)."""
    expected = expected_labels(instruction)
    labels = result.labels()
    return {name: None if expected[name] is None else labels[name] == expected[name]
            for name in PROBES}

