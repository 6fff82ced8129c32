"""The training recipe: one YAML file with the settings of every phase (docs/design.md §11).

    seed: 0
    mixed_precision: bf16            # "no" | "bf16" | "fp16"
    gradient_accumulation_steps: 1
    gradient_checkpointing: true
    checkpoint_every: 500            # optimizer steps between `accelerator.save_state` checkpoints
    keep_checkpoints: 2              # the newest checkpoints phases a and c keep
    log_every: 10                    # optimizer steps between lines of OUT/<phase>/losses.jsonl
    vae:       {...}                 # a small world's own VAE (`VaeRecipe`)
    decoder:   {...}                 # phase a (`DecoderRecipe`)
    game_state: {...}                # phase b (`GameStateRecipe`)
    adapt:     {...}                 # phase c (`AdaptRecipe`)
    data: {clip_size: [480, 720], features: real}   # the dataset `animegamer.create` builds

`load_recipe` validates it and names the file and the field of any error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from animegamer.models.decoder_defaults import GUIDANCE_RANGE


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class VaeRecipe(_Section):
    """A small video VAE for a world of tiny clips (`animegamer.train.vae`); real characters
    use CogVideoX-2B's VAE as it is."""

    steps: int = Field(2000, ge=1)
    lr: float = Field(1e-3, gt=0)
    batch_size: int = Field(2, ge=1)
    kl_weight: float = Field(1e-6, ge=0)
    block_out_channels: tuple[int, ...] = (8, 16, 16, 32)
    """One entry per level; every level but the last halves space (4 levels: 8×, 3: 4×)."""
    layers_per_block: int = Field(1, ge=1)
    norm_num_groups: int = Field(4, ge=1)
    latent_channels: int = Field(16, ge=1)
    temporal_compression: Literal[1, 2, 4] = 4
    """Frames per latent frame: 4 as CogVideoX's (17 frames → 5 latent frames), 2 (→ 9) or 1
    (→ 17), for a world whose small sprites move several pixels a frame: over 4 frames a tiny VAE
    blurs them into a ghost whose flow reads as almost still (`benchmarks/vae_motion.py`).
    The decoder's latent follows (`TinyInit` reads it from the VAE)."""
    train_frames: int = Field(17, ge=3)
    """Frames of the window cut from each clip per step: a whole number of latent frames, an odd
    count of them (CogVideoX's VAE decodes them in pairs after a first group of three), and 8k+1
    beyond 9 (it encodes frames in groups of 8 after the first); fewer than the clip's make a
    step cheaper, the convolutions being the same."""
    train_crop: tuple[int, int] | None = None
    """[height, width] of a random crop of each window per step (multiples of 8), or the
    whole frame. The VAE is convolutional, so crops teach it the same filters for less compute."""
    motion_weight: float = Field(0.0, ge=0)
    """Extra weight of the L1 on pixels that move (`vae.reconstruction_weights`): 0 weighs every
    pixel alike; a small world's characters cover a few percent of the frame and would be the
    last thing a plain L1 learns."""
    scale_samples: int = Field(32, ge=1)
    """Clips whose latents set the scaling factor."""
    seed: int = 0
    log_every: int = Field(50, ge=1)
    save_every: int = Field(500, ge=1)
    """Steps between the VAE folder's interim saves (a long run cut off keeps its steps)."""

    @field_validator("block_out_channels")
    @classmethod
    def _three_or_four_levels(cls, channels: tuple[int, ...]) -> tuple[int, ...]:
        if len(channels) not in (3, 4):
            raise ValueError("give 3 levels (4× in space) or 4 levels (8×)")
        return channels

    @field_validator("train_crop")
    @classmethod
    def _crop_of_whole_latents(cls, crop: tuple[int, int] | None) -> tuple[int, int] | None:
        if crop is not None and (crop[0] % 8 or crop[1] % 8 or min(crop) <= 0):
            raise ValueError("[height, width]: positive multiples of 8")
        return crop

    @model_validator(mode="after")
    def _whole_latent_frames(self) -> VaeRecipe:
        frames, ratio = self.train_frames, self.temporal_compression
        latent_frames = (frames - 1) // ratio + 1
        if (frames - 1) % ratio or latent_frames % 2 == 0 or (frames > 9 and frames % 8 != 1):
            raise ValueError(
                f"train_frames {frames} with temporal_compression {ratio}: give an odd number "
                "of latent frames, and 8k+1 frames beyond 9 (9, 17, …; fewer at compression "
                "1 or 2, e.g. 5)"
            )
        return self


class TinyInit(_Section):
    """Fresh random tiny models (tests, the CPU world): a `tiny_transformer_config`-style
    transformer of `representation_dim` (a multiple of 32) with `num_layers` blocks,
    `tiny_vae()`, and a shot encoder whose input widths are read from the dataset's features."""

    representation_dim: int = Field(default=64, gt=0, multiple_of=32)
    num_layers: int = Field(default=2, gt=0)
    patch_size: int = Field(default=2, gt=0)
    """Latent pixels per token side; the latent's size follows from the VAE (its sample size
    over its spatial compression) and must be a multiple of it."""
    patch_size_t: int | None = Field(default=None, gt=0)
    """Latent frames per token (CogVideoX 1.5's temporal patch); None: one, as in the release."""
    motion_scope_scale: float = Field(default=1.0, gt=0)
    """The transformer's `motion_scope_scale`: the motion scope's factor before its sinusoid."""
    noise_correlation: float = Field(default=0.0, ge=0, lt=1)
    """The transformer's `noise_correlation`: the share of the diffusion noise's variance that
    its frames have in common, in training and sampling (`FrameCorrelatedNoise`)."""
    reference_channels: int = Field(default=0, ge=0)
    """The transformer's `reference_channels`: the channels of the spatial reference (the
    image tokens laid on every latent frame); 0 for none, as in the release."""
    scene_channels: int = Field(default=0, ge=0)
    """The transformer's `scene_channels`: the VAE's latent channels to draw each clip on the
    latent of the background its instruction names (the Nano world paints it; any other
    dataset gives the median of its shots of that time and place: `animegamer.data.scenes`);
    0 for none, as in the release."""
    seed: int = 0
    vae: Path | None = None
    """A trained VAE folder to use instead of `tiny_vae()` (random), relative to the folder the
    command runs in; `all` sets it to the VAE it trained (OUT/vae) when the recipe has a `vae`
    section."""

    @field_validator("vae")
    @classmethod
    def _vae_folder(cls, vae: Path | None) -> Path | None:
        if vae is not None and not (vae / "config.json").is_file():
            raise ValueError(f"{vae} is not a VAE folder (no config.json there; a recipe's paths "
                             f"are relative to the folder the command runs in: {Path.cwd()})")
        return vae

    @property
    def nano_aids(self) -> dict[str, float | int]:
        """The aids of `NanoTransformer3DModel` when any differs from the release (the
        transformer is then a Nano one); empty when none does."""
        aids = {"motion_scope_scale": self.motion_scope_scale,
                "noise_correlation": self.noise_correlation,
                "reference_channels": self.reference_channels,
                "scene_channels": self.scene_channels}
        return aids if aids != RELEASE_AIDS else {}


RELEASE_AIDS: dict[str, float | int] = {
    "motion_scope_scale": 1.0, "noise_correlation": 0.0, "reference_channels": 0,
    "scene_channels": 0,
}
"""What the release's transformer does, in `NanoTransformer3DModel`'s terms."""


class DecoderInit(_Section):
    """Where phase a starts: an existing pipeline/character folder (it must hold a
    `shot_encoder/`), or fresh tiny models. Exactly one of the two."""

    pipeline: Path | None = None
    tiny: TinyInit | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> DecoderInit:
        if (self.pipeline is None) == (self.tiny is None):
            raise ValueError("set exactly one of 'pipeline' (a folder) and 'tiny' (sizes)")
        return self


class CfgDropout(_Section):
    """Classifier-free-guidance dropout of phase a, per sample. `text_zero` and `text_empty`
    are exclusive outcomes of one draw (the cached features hold no T5 embedding of "", so
    empty text is zero text too); the image draw is independent. The motion scope is never
    dropped."""

    text_zero: float = Field(default=0.10, ge=0, le=1)
    text_empty: float = Field(default=0.05, ge=0, le=1)
    image_zero: float = Field(default=0.05, ge=0, le=1)

    @model_validator(mode="after")
    def _text_total(self) -> CfgDropout:
        if self.text_zero + self.text_empty > 1:
            raise ValueError("text_zero + text_empty must not exceed 1")
        return self


class LoraSettings(_Section):
    """The LoRA on the transformer blocks' attention projections (to_q, to_k, to_v, to_out.0);
    `lora_alpha` defaults to the rank (scale 1).

    `transformer: full` trains every transformer weight instead (no LoRA): for fresh random
    models (a tiny world's), whose frozen weights would otherwise stay random. `lora` is the
    paper's recipe for a pretrained decoder."""

    transformer: Literal["lora", "full"] = "lora"
    lora_rank: int = Field(default=64, gt=0)
    lora_alpha: int | None = Field(default=None, gt=0)

    @property
    def alpha(self) -> int:
        return self.lora_rank if self.lora_alpha is None else self.lora_alpha


class TransformerStage(LoraSettings):
    """What phases a and c share besides the LoRA: the learning rate's schedule over the phase,
    `constant` (the paper's) or `cosine` (from `lr` at the first step to 0 after the last), and
    `motion_weight`: 0 is the paper's plain MSE; above 0, latent positions that change over the
    shot weigh up to 1 + motion_weight in the diffusion loss (`decoder_model.motion_weights`),
    so a small moving character is not a few percent of a loss its background dominates."""

    lr_schedule: Literal["constant", "cosine"] = "constant"
    motion_weight: float = Field(default=0.0, ge=0)


class DecoderRecipe(TransformerStage):
    """Phase a: shot encoder and decoder (paper: 10k warm-up + 80k joint steps, lr 2e-4)."""

    init: DecoderInit
    warmup_steps: int = Field(ge=0)
    joint_steps: int = Field(ge=0)
    lr: float = Field(default=2e-4, gt=0)
    batch_size: int = Field(default=1, gt=0)
    max_grad_norm: float = Field(default=1.0, gt=0)
    cfg_dropout: CfgDropout = Field(default_factory=CfgDropout)
    play_guidance: float | None = Field(default=None, ge=GUIDANCE_RANGE[0], le=GUIDANCE_RANGE[1])
    """The classifier-free guidance's `g` the trained character plays at, written to its
    folder's manifest; None: `ANIMEGAMER_GUIDANCE` (the release's 6). A small decoder trained on
    a CPU overshoots at 6 (docs/nano.md), so `recipes/cpu.yaml` says 1."""


class AdaptRecipe(TransformerStage):
    """Phase c: the decoder learns to render the game-state model's predictions (paper: 10k
    steps, lr 5e-5). `uncond_dropout`: the share of samples whose condition is the
    unconditional representation, so the CFG row stays trained."""

    steps: int = Field(ge=0)
    lr: float = Field(default=5e-5, gt=0)
    batch_size: int = Field(default=1, gt=0)
    max_turns: int = Field(default=5, gt=0)
    max_grad_norm: float = Field(default=1.0, gt=0)
    uncond_dropout: float = Field(default=0.1, ge=0, le=1)


class DataRecipe(_Section):
    """How `python -m animegamer.create` builds the dataset this recipe trains on: the clips'
    [height, width] (the tiny CPU models take 64×96, CogVideoX-2B 480×720) and the shot
    encoder's frozen towers whose features are cached (`real`: CLIP ViT-B-16 and T5, from the
    registry's `shot_towers`; `tiny`: tiny random towers)."""

    clip_size: tuple[int, int]
    features: Literal["real", "tiny"]

    @field_validator("clip_size")
    @classmethod
    def _sides(cls, size: tuple[int, int]) -> tuple[int, int]:
        if min(size) < 16 or max(size) > 2048 or size[0] % 16 or size[1] % 16:
            raise ValueError("[height, width]: multiples of 16 in 16..2048")
        return size


LLM_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""Phase b's LoRA targets: the language model's attention and MLP projections."""
WORD_LISTS = "word_lists"
"""The validation context's key of the named word lists (`load_recipe`'s `word_lists`)."""


class CharacterInit(_Section):
    """Start from an existing character folder (a converted release or an earlier run)."""

    character: Path


class BaseLLMInit(_Section):
    """Start from a Mistral causal-LM folder (weights and tokenizer): the AnimeGamer tokens are
    added, the embeddings resized, the resamplers fresh."""

    base_llm: Path


class TinySpec(_Section):
    seed: int = 0
    hidden_size: int = Field(64, ge=16, multiple_of=32)
    num_hidden_layers: int = Field(2, ge=1)
    words: tuple[str, ...] = ()
    """Whole-word tokens of the tokenizer (`build_tiny_base_tokenizer`): a small world's
    vocabulary, so that the model reads each of its words from one token. A recipe may name a
    word list instead (`words: nano-world`), which whoever loads it supplies (`load_recipe`'s
    `word_lists`: the Nano commands give the Nano world's)."""

    @field_validator("words", mode="before")
    @classmethod
    def _named_words(cls, words: object, info: ValidationInfo) -> object:
        if not isinstance(words, str):
            return words
        lists: Mapping[str, Sequence[str]] = (info.context or {}).get(WORD_LISTS, {})
        if words not in lists:
            known = ", ".join(lists) or "none"
            raise ValueError(f"the word list {words!r} is not given here (given: {known}); "
                             "the command of the world it belongs to supplies it")
        return tuple(lists[words])


class TinyGameStateInit(_Section):
    """A fresh tiny random model (`models.tiny_game_state`), for tests and the CPU world."""

    tiny: TinySpec


class GameStateRecipe(_Section):
    """Phase b: the game-state model (`game_state_phase`). Paper values where it gives them
    (lr, LoRA, α, 1–5 turns, 15k steps); the batch size is ours."""

    init: CharacterInit | BaseLLMInit | TinyGameStateInit
    steps: int = Field(15_000, ge=1)
    lr: float = Field(5e-5, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    batch_size: int = Field(8, ge=1, description="windows per optimizer step, all processes")
    max_grad_norm: float | None = Field(1.0, gt=0)
    lora_rank: int = Field(32, ge=1)
    lora_alpha: int = Field(32, ge=1)
    lora_dropout: float = Field(0.05, ge=0, lt=1)
    lora_target_modules: tuple[str, ...] = LLM_LORA_TARGETS
    mse_weight: float = Field(1.0, ge=0, description="α of the representation loss")
    max_turns: int = Field(5, ge=1, le=5)
    seed: int = 0
    checkpoint_every: int = Field(500, ge=1)
    keep_checkpoints: int = Field(2, ge=1)
    gradient_checkpointing: bool = False


class Recipe(_Section):
    """A whole training run; phases missing from the file cannot be run. `data` is read by
    `animegamer.create` only."""

    seed: int = 0
    mixed_precision: Literal["no", "bf16", "fp16"] = "no"
    gradient_accumulation_steps: int = Field(default=1, gt=0)
    gradient_checkpointing: bool = False
    checkpoint_every: int = Field(default=500, gt=0)
    keep_checkpoints: int = Field(default=2, gt=0)
    """Phases a and c keep their newest this many checkpoints (phase b: its own field)."""
    log_every: int = Field(default=10, gt=0)
    continues: bool = False
    """A sitting that goes on from a trained folder (`start_from`, which replaces its `init`
    sections): run without one, it would train fresh weights for a sitting's few steps."""
    vae: VaeRecipe | None = None
    decoder: DecoderRecipe | None = None
    game_state: GameStateRecipe | None = None
    adapt: AdaptRecipe | None = None
    data: DataRecipe | None = None


class RecipeError(ValueError):
    """A recipe that cannot be read or does not validate; the message names file and field."""


def _location(error: ErrorDetails) -> str:
    return ".".join(str(part) for part in error["loc"]) or "(top level)"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise RecipeError(f"{path}: cannot read the recipe ({error.strerror})") from None
    except yaml.YAMLError as error:
        raise RecipeError(f"{path}: not valid YAML ({error})") from None
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: a recipe is a mapping of fields, got {type(data).__name__}")
    return data


def load_recipe(
    *paths: str | Path, word_lists: Mapping[str, Sequence[str]] | None = None
) -> Recipe:
    """Read and validate a recipe YAML file; `RecipeError` naming the file and each bad field.

    Several files make one recipe (`recipes/paper-*.yaml`, one phase each): a field may come
    from several files only with the same value. `word_lists` are the word lists the recipe
    may name by name (`TinySpec.words`)."""
    if not paths:
        raise RecipeError("no recipe file given")
    merged: dict[str, Any] = {}
    source: dict[str, Path] = {}
    for path in map(Path, paths):
        for key, value in _read(path).items():
            if key in merged and merged[key] != value:
                raise RecipeError(
                    f"{path}: '{key}' is also set, to another value, in {source[key]}"
                )
            merged[key], source[key] = value, path
    name = " + ".join(str(path) for path in paths)
    try:
        return Recipe.model_validate(merged, context={WORD_LISTS: word_lists or {}})
    except ValidationError as error:
        problems = "; ".join(f"{_location(e)}: {e['msg']}" for e in error.errors())
        raise RecipeError(f"{name}: {problems}") from None
