"""Motion scope (how much a shot moves) from optical flow, and the five motion levels.

docs/design.md §9: the scope of a clip is the mean optical-flow magnitude of its moving pixels
(|flow| above `MOVING_THRESHOLD` px/frame; the static background is dropped), over all pairs of
consecutive frames. Flow is computed on a copy `FLOW_WIDTH` pixels wide, whatever the clip size, so
scopes are in pixels per frame of that copy and comparable across clip sizes (a 64×96 clip and a
480×720 clip of the same motion get about the same scope).

`MotionLevels` quantises scopes into levels 1..5 with boundaries fitted on a dataset, and gives
each level the value the decoder is trained on and fed at play time. Torch-free: the game and the
training import it; OpenCV is imported only when a flow is computed.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

FLOW_WIDTH = 256
"""Width of the copy the flow is computed on (its height keeps the aspect, a multiple of 8)."""
MOVING_THRESHOLD = 0.2
"""|flow| in px/frame above which a pixel moves (the paper's static-background threshold)."""
FLOW_METHODS = ("farneback", "raft")
LEVEL_COUNT = 5


@dataclass(frozen=True)
class MotionStats:
    """`scope`: mean |flow| of the moving pixels (0 when nothing moves); `moving`: the fraction of
    pixels (over all frame pairs) that move."""

    scope: float
    moving: float


def working_size(height: int, width: int) -> tuple[int, int]:
    """(height, width) of the copy the flow runs on: `FLOW_WIDTH` wide, height a multiple of 8
    (RAFT needs it; Farneback uses the same size so both give comparable scopes)."""
    return max(8, round(height * FLOW_WIDTH / width / 8) * 8), FLOW_WIDTH


def _resized(frames: np.ndarray) -> np.ndarray:
    import cv2

    height, width = working_size(*frames.shape[1:3])
    return np.stack(
        [cv2.resize(frame, (width, height), interpolation=cv2.INTER_AREA) for frame in frames]
    )


def _farneback(frames: np.ndarray) -> Iterator[np.ndarray]:
    import cv2

    gray = [cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY) for frame in frames]
    for previous, current in itertools.pairwise(gray):
        flow = cv2.calcOpticalFlowFarneback(
            previous, current, None, pyr_scale=0.5, levels=3, winsize=15, iterations=3,
            poly_n=5, poly_sigma=1.2, flags=0,
        )
        yield np.linalg.norm(flow, axis=-1)


@functools.cache
def _raft_model() -> tuple[Any, Any]:
    """torchvision's small RAFT and its input transform (the weights come through torchvision's
    own download cache)."""
    try:
        from torchvision.models.optical_flow import Raft_Small_Weights, raft_small
    except ImportError as error:
        raise ValueError(
            "motion scope method 'raft' needs torchvision, which is not installed; "
            "use 'farneback'"
        ) from error
    weights = Raft_Small_Weights.DEFAULT
    return raft_small(weights=weights).eval(), weights.transforms()


def _raft(frames: np.ndarray) -> Iterator[np.ndarray]:
    import torch

    model, transform = _raft_model()
    video = torch.from_numpy(frames).permute(0, 3, 1, 2)
    with torch.inference_mode():
        for index in range(len(video) - 1):
            first, second = transform(video[index : index + 1], video[index + 1 : index + 2])
            yield model(first, second)[-1][0].norm(dim=0).numpy()


def motion_stats(frames: np.ndarray, method: str = "farneback") -> MotionStats:
    """Scope and moving fraction of uint8 frames [F, H, W, 3] (F ≥ 2)."""
    frames = np.asarray(frames)
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3 or len(frames) < 2:
        raise ValueError(f"frames must be uint8 [F≥2, H, W, 3], got {frames.dtype} {frames.shape}")
    if method not in FLOW_METHODS:
        raise ValueError(f"unknown motion scope method {method!r}; use one of {FLOW_METHODS}")
    flows = _farneback if method == "farneback" else _raft
    total = moving = pixels = 0.0
    for magnitude in flows(_resized(frames)):
        above = magnitude[magnitude > MOVING_THRESHOLD]
        total += float(above.sum(dtype=np.float64))
        moving += above.size
        pixels += magnitude.size
    return MotionStats(scope=total / moving if moving else 0.0, moving=moving / pixels)


def motion_scope(frames: np.ndarray, method: str = "farneback") -> float:
    """The motion scope of a clip: mean |flow| of its moving pixels, 0.0 for a static clip."""
    return motion_stats(frames, method).scope


def _checked(name: str, values: Iterable[Any], count: int, positive: bool) -> tuple[float, ...]:
    numbers = tuple(float(v) for v in values)
    if len(numbers) != count or not all(math.isfinite(v) for v in numbers):
        raise ValueError(f"motion levels need {count} finite {name}, got {list(numbers)}")
    if any(b < a for a, b in itertools.pairwise(numbers)):
        raise ValueError(f"motion level {name} must not decrease, got {list(numbers)}")
    if positive and numbers[0] <= 0:
        raise ValueError(f"motion level {name} must be positive, got {list(numbers)}")
    return numbers


@dataclass(frozen=True)
class MotionLevels:
    """Five motion levels: 4 scope boundaries and each level's representative scope.

    A scope `s` has level 1 + (the number of boundaries below `s`), so a scope equal to a boundary
    takes the lower level. `values[k-1]` is the scope the decoder gets for level `k`: the mean
    scope of the fitted scopes of that level.
    """

    boundaries: tuple[float, ...]
    values: tuple[float, ...]

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "boundaries", _checked("boundaries", self.boundaries, LEVEL_COUNT - 1, False)
        )
        object.__setattr__(self, "values", _checked("values", self.values, LEVEL_COUNT, True))

    @classmethod
    def fit(cls, scopes: Iterable[float]) -> MotionLevels:
        """Quantile boundaries (20/40/60/80 %) of `scopes` and the mean scope of each level.

        A level no scope falls in (ties at a boundary) takes the middle of its boundaries. The
        scopes must be positive: static clips are left out of a dataset before fitting.
        """
        data = np.asarray(list(scopes), dtype=np.float64)
        if not data.size or not np.all(np.isfinite(data)) or np.any(data <= 0):
            raise ValueError("fitting motion levels needs at least one scope, all positive")
        boundaries = np.quantile(data, np.linspace(0, 1, LEVEL_COUNT + 1)[1:-1])
        levels = np.searchsorted(boundaries, data, side="left")
        edges = [float(boundaries[0]), *map(float, boundaries), float(boundaries[-1])]
        values = [
            float(data[levels == k].mean())
            if np.any(levels == k)
            else (edges[k] + edges[k + 1]) / 2
            for k in range(LEVEL_COUNT)
        ]
        return cls(tuple(map(float, boundaries)), tuple(values))

    def level(self, scope: float) -> int:
        """The level (1..5) of a scope."""
        return 1 + sum(boundary < scope for boundary in self.boundaries)

    def value(self, level: int) -> float:
        """The representative scope of a level (1..5)."""
        if level not in range(1, LEVEL_COUNT + 1):
            raise ValueError(f"motion level must be in 1..{LEVEL_COUNT}, got {level}")
        return self.values[level - 1]

    def to_dict(self) -> dict[str, list[float]]:
        """A plain dict for a JSON config: {"boundaries": [4 floats], "values": [5 floats]}."""
        return {"boundaries": list(self.boundaries), "values": list(self.values)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MotionLevels:
        if set(data) != {"boundaries", "values"}:
            raise ValueError(
                f"motion levels need the fields 'boundaries' and 'values', got {sorted(data)}"
            )
        return cls(tuple(data["boundaries"]), tuple(data["values"]))
