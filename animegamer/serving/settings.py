"""Run-time settings, read once from environment variables (documented in docs/hardware.md)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from animegamer.game.rules import MAX_STEPS, MAX_WINDOW
from animegamer.models.decoder_defaults import DEFAULT_GUIDANCE, DEFAULT_STEPS, GUIDANCE_RANGE
from animegamer.paths import DEFAULT_NANO_DIR, DEFAULT_REGISTRY
from animegamer.serving.quantization import missing_packages_message


class EngineKind(StrEnum):
    """Which models play: the one place the engine kinds are named (settings, CLI, engine, UI).

    `REAL`: the character's own weights (the released checkpoints converted, or a character
    trained with this project), on a GPU, or on the CPU where the folder is small enough.
    `NANO`: the Nano world's models stand in for a character without playable weights here.
    `PREVIEW`: tiny untrained models stand in (noise), when even Nano's weights are missing.
    `AUTO` is a setting, never the kind of a running engine: each character plays its own
    weights where they can play here, Nano (else the preview models) otherwise.
    """

    AUTO = "auto"
    REAL = "real"
    NANO = "nano"
    PREVIEW = "preview"


LOW_VRAM_CHOICES = ("auto", "on", "off")
PRESET_CHOICES = ("quality", "fast", "low-vram", "consumer", "tiny-vram")
"""Speed presets of the real engine (`animegamer.serving.presets`)."""
SPACE_DATA_DIR = Path("/data")
"""A Space's persistent storage, when it has some."""
MAX_BATCH = 32
TRUE_WORDS = frozenset({"1", "true", "yes"})


class SettingsError(ValueError):
    """An environment variable holds a value the app cannot use."""


def default_cache_dir(environ: Mapping[str, str]) -> Path:
    """`$ANIMEGAMER_CACHE`, else `/data/animegamer` on a Space with persistent storage, else
    `~/.cache/animegamer`."""
    configured = environ.get("ANIMEGAMER_CACHE")
    if configured:
        return Path(configured).expanduser()
    if SPACE_DATA_DIR.is_dir() and os.access(SPACE_DATA_DIR, os.W_OK):
        return SPACE_DATA_DIR / "animegamer"
    return Path.home() / ".cache" / "animegamer"


@dataclass(frozen=True)
class Settings:
    """Knobs of the game and the engine.

    `engine`: `auto` plays each character with its own weights where they can play here (a GPU
    for the released ones; the CPU for a folder small enough, e.g. a character trained on a
    CPU) and with the Nano world otherwise (the preview models when Nano's weights are
    missing); `real`, `nano` or `preview` force one for every character (`EngineKind`).
    `window`: turns the game-state model sees, the current one included (the release demo: 1).
    `steps` / `nano_steps` / `preview_steps`: diffusion steps of the real, the Nano and the
    preview decoder. Nano's 12 keep a turn under 2 s on 2 CPU cores; on its held-out turns
    the world probes read the same at 12 as at 20 steps (docs/nano.md). `nano_dir`: the Nano world's
    character folders (one per character, `create_nano_engine`). `guidance_scale` /
    `nano_guidance`: the classifier-free guidance's `g` of the real decoder (the release's 6;
    a character folder whose manifest names its own, a CPU-trained one's 1, plays at that) and
    of Nano's, whose clips draw the scene closer and the figure smaller at 1
    (`benchmarks/nano_fidelity.py`, docs/nano.md).
    `cache_dir`: converted checkpoints; `resource_checks`: check disk and RAM before converting.
    `zero_gpu`: running on a ZeroGPU Space (set by the platform); `space_id`: the Space's
    `owner/name` when running on Hugging Face Spaces (`SPACE_ID`, set by the platform).
    `preset`: the real engine's speed preset (`animegamer.serving.presets`); `compile`: regional
    `torch.compile` of the decoder's transformer blocks.
    `live_preview`: while a clip denoises, hand previews of it to the turn's `on_preview`
    (`ANIMEGAMER_LIVE_PREVIEW=0` turns them off; `animegamer.models.latent_preview`).
    `player_disk_mb`: the most one player's files (their games' clips, saves and exports) may
    take in `output_dir`; `disk_mb`: the most every player's files together may take
    (docs/playing.md, "Limits").
    `max_batch`: the most turns played as one batch (turns of one character that wait at the
    same moment; `animegamer.serving.batching`); `batch_wait_s`: the longest a turn that
    could start waits for others to join it.
    """

    engine: EngineKind = EngineKind.AUTO
    window: int = 1
    steps: int = DEFAULT_STEPS
    nano_steps: int = 12
    preview_steps: int = 8
    nano_dir: Path = DEFAULT_NANO_DIR
    guidance_scale: float = DEFAULT_GUIDANCE
    nano_guidance: float = 1.0
    low_vram: str = "auto"
    registry_path: Path = DEFAULT_REGISTRY
    output_dir: Path = Path(tempfile.gettempdir()) / "animegamer"
    cache_dir: Path = field(default_factory=lambda: default_cache_dir({}))
    resource_checks: bool = True
    zero_gpu: bool = False
    space_id: str | None = None
    preset: str = "quality"
    compile: bool = False
    live_preview: bool = True
    player_disk_mb: int = 3072
    disk_mb: int = 20480
    max_batch: int = 8
    batch_wait_s: float = 0.1

    def __post_init__(self) -> None:
        object.__setattr__(self, "engine", _engine_kind(self.engine))

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, *, default_output_dir: Path | None = None
    ) -> Settings:
        """Settings from `environ` (the process environment by default); `default_output_dir`
        replaces the temp-dir default where `ANIMEGAMER_OUTPUT_DIR` is not set (the app's is
        under Gradio's upload folder, which Gradio serves)."""
        env = os.environ if environ is None else environ
        defaults = cls(output_dir=default_output_dir or cls.output_dir)
        settings = cls(
            engine=_engine_kind(env.get("ANIMEGAMER_ENGINE", defaults.engine)),
            window=_int(env, "ANIMEGAMER_WINDOW", defaults.window),
            steps=_int(env, "ANIMEGAMER_STEPS", defaults.steps),
            nano_steps=_int(env, "ANIMEGAMER_NANO_STEPS", defaults.nano_steps),
            preview_steps=_int(env, "ANIMEGAMER_PREVIEW_STEPS", defaults.preview_steps),
            nano_dir=Path(env.get("ANIMEGAMER_NANO_DIR") or defaults.nano_dir),
            guidance_scale=_float(env, "ANIMEGAMER_GUIDANCE", defaults.guidance_scale),
            nano_guidance=_float(env, "ANIMEGAMER_NANO_GUIDANCE", defaults.nano_guidance),
            low_vram=env.get("ANIMEGAMER_LOW_VRAM", defaults.low_vram).strip().lower(),
            registry_path=Path(env.get("ANIMEGAMER_CHARACTERS", str(defaults.registry_path))),
            output_dir=Path(env.get("ANIMEGAMER_OUTPUT_DIR") or defaults.output_dir),
            cache_dir=default_cache_dir(env),
            resource_checks=not _flag(env, "ANIMEGAMER_SKIP_RESOURCE_CHECK"),
            zero_gpu=_flag(env, "SPACES_ZERO_GPU"),
            space_id=env.get("SPACE_ID") or None,
            preset=env.get("ANIMEGAMER_PRESET", defaults.preset).strip().lower(),
            compile=_flag(env, "ANIMEGAMER_COMPILE"),
            live_preview=_flag(env, "ANIMEGAMER_LIVE_PREVIEW", default=defaults.live_preview),
            player_disk_mb=_int(env, "ANIMEGAMER_PLAYER_DISK_MB", defaults.player_disk_mb),
            disk_mb=_int(env, "ANIMEGAMER_DISK_MB", defaults.disk_mb),
            max_batch=_int(env, "ANIMEGAMER_MAX_BATCH", defaults.max_batch),
            batch_wait_s=_float(env, "ANIMEGAMER_BATCH_WAIT_S", defaults.batch_wait_s),
        )
        settings.validate()
        return settings

    def validate(self) -> None:
        if self.low_vram not in LOW_VRAM_CHOICES:
            raise SettingsError(
                f"ANIMEGAMER_LOW_VRAM must be one of {LOW_VRAM_CHOICES}: {self.low_vram!r}"
            )
        if self.preset not in PRESET_CHOICES:
            raise SettingsError(
                f"ANIMEGAMER_PRESET must be one of {PRESET_CHOICES}: {self.preset!r}"
            )
        missing = missing_packages_message(self.preset)
        if missing:
            raise SettingsError(f"ANIMEGAMER_PRESET: {missing}")
        if not 1 <= self.window <= MAX_WINDOW:
            raise SettingsError(f"ANIMEGAMER_WINDOW must be in 1..{MAX_WINDOW}: {self.window}")
        for name, steps in (("ANIMEGAMER_STEPS", self.steps),
                            ("ANIMEGAMER_NANO_STEPS", self.nano_steps),
                            ("ANIMEGAMER_PREVIEW_STEPS", self.preview_steps)):
            if not 1 <= steps <= MAX_STEPS:
                raise SettingsError(f"{name} must be in 1..{MAX_STEPS}: {steps}")
        if not 1 <= self.player_disk_mb <= self.disk_mb:
            raise SettingsError(
                f"ANIMEGAMER_PLAYER_DISK_MB must be in 1..ANIMEGAMER_DISK_MB ({self.disk_mb}): "
                f"{self.player_disk_mb}"
            )
        if not 1 <= self.max_batch <= MAX_BATCH:
            raise SettingsError(f"ANIMEGAMER_MAX_BATCH must be in 1..{MAX_BATCH}: {self.max_batch}")
        if not 0.0 <= self.batch_wait_s <= 5.0:
            raise SettingsError(f"ANIMEGAMER_BATCH_WAIT_S must be in 0..5: {self.batch_wait_s}")
        low, high = GUIDANCE_RANGE
        for name, guidance in (("ANIMEGAMER_GUIDANCE", self.guidance_scale),
                               ("ANIMEGAMER_NANO_GUIDANCE", self.nano_guidance)):
            if not low <= guidance <= high:
                raise SettingsError(f"{name} must be in {low:g}..{high:g}: {guidance}")


def _engine_kind(value: str) -> EngineKind:
    try:
        return EngineKind(value.strip().lower())
    except ValueError:
        choices = ", ".join(kind.value for kind in EngineKind)
        raise SettingsError(f"ANIMEGAMER_ENGINE must be one of {choices}: {value!r}") from None


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    return int(_number(env, name, default, int, "an integer"))


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    return _number(env, name, default, float, "a number")


def _number(
    env: Mapping[str, str], name: str, default: float, parse: type[float], what: str
) -> float:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        return parse(raw)
    except ValueError:
        raise SettingsError(f"{name} must be {what}: {raw!r}") from None


def _flag(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    """A yes/no variable: one of `TRUE_WORDS` is yes, anything else set is no."""
    raw = env.get(name, "").strip().lower()
    return raw in TRUE_WORDS if raw else default
