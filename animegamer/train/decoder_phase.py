"""Phases a and c of training (docs/design.md §11): the shot encoder with the decoder, then the
decoder's adaptation to the game-state model's predictions.

Phase a (`train_decoder`) has two stages. Warm-up trains the shot encoder (projections and
norms) and the transformer's motion-scope MLP (`ofs_embedding`); the rest of the transformer is
frozen. Joint adds the adaLN modulation layers (`norm1.linear`, `norm2.linear` of every block,
`norm_out.linear`) and a LoRA on the blocks' attention projections, and, for a transformer with a
spatial reference (`reference_channels`), that reference's projection and the patch embedding
that reads it. Phase c (`adapt`) freezes the shot encoder and the game-state model; the
game-state model's prediction of each target shot (history teacher-forced) is the condition,
and the motion-scope MLP, the adaLN layers, the spatial reference's layers and a new LoRA
train. Both use CogVideoX's v-prediction loss with the pipeline's scheduler. The LoRA is
merged before the pipeline is saved, with the shot encoder's unconditional representation and
the dataset's motion-level values in the transformer, so play feeds what training saw.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from diffusers.models.autoencoders.autoencoder_kl_cogvideox import AutoencoderKLCogVideoX
from diffusers.schedulers.scheduling_dpm_cogvideox import CogVideoXDPMScheduler
from torch import nn

from animegamer.data.dataset import read_rows
from animegamer.data.flow import MotionLevels
from animegamer.models.decoder import (
    AnimeGamerPipeline,
    AnimeGamerTransformer3DModel,
    scheduler_config,
)
from animegamer.models.noise_prior import INDEPENDENT_NOISE, FrameCorrelatedNoise
from animegamer.models.shot_encoder import AnimeGamerShotEncoder
from animegamer.models.tiny_decoder import TINY_LATENT_SIZE, tiny_transformer_config, tiny_vae
from animegamer.train.loop import (
    CHECKPOINTS,
    LoopSettings,
    MicroLoss,
    latest_checkpoint,
    losses_path,
    sample_indices,
    train_steps,
    trim_losses,
)
from animegamer.train.recipe import (
    AdaptRecipe,
    CfgDropout,
    DecoderInit,
    DecoderRecipe,
    LoraSettings,
    Recipe,
    TinyInit,
)
from animegamer.train.shots import (
    LatentCache,
    ShotDataset,
    collate,
    draw_latents,
    levels_of,
    read_features,
)
from animegamer.train.vae import reconstruction_weights

if TYPE_CHECKING:
    from peft import LoraModel

    from animegamer.models.game_state import GameStateModel
    from animegamer.train.episodes import EpisodeWindow

DECODER = "decoder"
"""Phase a's name: its pipeline folder, checkpoint folder and log folder under OUT."""
ADAPT = "adapt"
ADAPTED = "decoder_adapted"
"""Phase c's pipeline folder under OUT."""
GAME_STATE = "game_state"
"""Where phase c looks for the game-state model by default (OUT/game_state)."""
LATENTS = "latents"
ADALN_LAYERS = ("norm1.linear", "norm2.linear")
LORA_TARGETS = r"transformer_blocks\.\d+\.attn1\.(to_q|to_k|to_v|to_out\.0)"
"""peft `target_modules` (a full-match regex): the attention projections of the blocks."""

Stage = Literal["warmup", "joint", "adapt"]


class TrainError(ValueError):
    """A training input that cannot be used; the message names it."""


class ConditionedDecoder(nn.Module):
    """The transformer with what makes its condition, as the one module `accelerate` wraps:
    the shot encoder's projection of cached features (phase a), or a given representation
    (phase c, `shot_encoder` None)."""

    def __init__(
        self,
        transformer: AnimeGamerTransformer3DModel,
        shot_encoder: AnimeGamerShotEncoder | None = None,
    ) -> None:
        super().__init__()
        self.transformer = transformer
        self.shot_encoder = shot_encoder

    def forward(
        self,
        noisy_latents: torch.Tensor,
        timesteps: torch.Tensor,
        motion_scopes: torch.Tensor,
        text_features: torch.Tensor | None = None,
        image_features: torch.Tensor | None = None,
        representation: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The transformer's v-prediction [B, T, C, H, W] for noisy latents [B, T, C, H, W]."""
        if representation is None:
            if self.shot_encoder is None or text_features is None or image_features is None:
                raise ValueError("give a representation, or features and a shot encoder")
            representation = self.shot_encoder.project(text_features, image_features)
        return self.transformer(
            hidden_states=noisy_latents,
            encoder_hidden_states=representation,
            timestep=timesteps,
            ofs=motion_scopes,
            return_dict=False,
        )[0]


def is_adaln(name: str) -> bool:
    """Whether a transformer module name is an adaLN modulation layer."""
    return name == "norm_out.linear" or (
        name.startswith("transformer_blocks.") and name.endswith(ADALN_LAYERS)
    )


def set_trainable(model: ConditionedDecoder, stage: Stage, full: bool = False) -> None:
    """Freeze everything, then unfreeze what `stage` trains (see the module doc); `full`: the
    joint and adapt stages train the whole transformer (no LoRA)."""
    model.requires_grad_(False)
    ofs_embedding = model.transformer.ofs_embedding
    assert ofs_embedding is not None  # always built by AnimeGamerTransformer3DModel
    ofs_embedding.requires_grad_(True)
    if stage in ("warmup", "joint") and model.shot_encoder is not None:
        model.shot_encoder.requires_grad_(True)
    if stage in ("joint", "adapt") and full:
        model.transformer.requires_grad_(True)
    elif stage in ("joint", "adapt"):
        for name, module in model.transformer.named_modules():
            if is_adaln(name):
                module.requires_grad_(True)
        for name, parameter in model.transformer.named_parameters():
            if ".lora_A." in name or ".lora_B." in name:
                parameter.requires_grad_(True)
        if model.transformer.reference_proj is not None:
            model.transformer.reference_proj.requires_grad_(True)
            model.transformer.patch_embed.proj.requires_grad_(True)


def trainable_names(module: nn.Module) -> list[str]:
    return sorted(name for name, p in module.named_parameters() if p.requires_grad)


def add_lora(
    transformer: AnimeGamerTransformer3DModel, settings: LoraSettings, seed: int = 0
) -> LoraModel:
    """Inject a LoRA (in place) into the blocks' to_q, to_k, to_v and to_out.0; its random
    `lora_A` init comes from `seed`, so a resumed run builds the same one."""
    from peft import LoraConfig, LoraModel

    config = LoraConfig(
        r=settings.lora_rank, lora_alpha=settings.alpha, target_modules=LORA_TARGETS
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LoraModel(transformer, config, "default")


def cfg_dropout(
    text: torch.Tensor, image: torch.Tensor, dropout: CfgDropout, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero each sample's text features with probability text_zero + text_empty (empty text is
    zero text: no T5 embedding of "" is cached) and, independently, its image features with
    probability image_zero."""
    batch = text.shape[0]
    keep_text = torch.rand(batch, generator=generator) >= dropout.text_zero + dropout.text_empty
    keep_image = torch.rand(batch, generator=generator) >= dropout.image_zero
    return (
        text * keep_text.to(text)[:, None, None],
        image * keep_image.to(image)[:, None, None],
    )


def motion_weights(latents: torch.Tensor, motion_weight: float) -> torch.Tensor:
    """Per-position weights [B, T, 1, H, W] of the diffusion loss for latents [B, T, C, H, W]:
    the VAE's `reconstruction_weights` on the latent (1 + `motion_weight` × how far a position
    is from its mean over the shot, saturating at 0.5). The latent's motion map follows the
    pixels' (its correlation with the 4×-pooled pixel motion is 0.87–0.96 on Nano shots), so
    what moves is what weighs more, as in the VAE's reconstruction loss."""
    return reconstruction_weights(latents.transpose(1, 2), motion_weight).transpose(1, 2)


def v_prediction_loss(
    model: nn.Module,
    scheduler: CogVideoXDPMScheduler,
    latents: torch.Tensor,
    motion_scopes: torch.Tensor,
    generator: torch.Generator,
    motion_weight: float = 0.0,
    noise: FrameCorrelatedNoise = INDEPENDENT_NOISE,
    **condition: torch.Tensor,
) -> torch.Tensor:
    """CogVideoX's loss: t uniform over the training timesteps, x_t = add_noise(x0, ε, t),
    MSE between the network's output and the velocity v(x0, ε, t); ε is drawn from `noise`;
    with `motion_weight` > 0, the mean is weighted by `motion_weights` of the clean latents."""
    batch = latents.shape[0]
    noise_sample = noise.sample(tuple(latents.shape), generator).to(latents)
    steps = scheduler.config["num_train_timesteps"]
    drawn = torch.randint(0, steps, (batch,), generator=generator).to(latents.device)
    timesteps = cast(torch.IntTensor, drawn)  # diffusers' annotation; any integer tensor works
    noisy = scheduler.add_noise(latents, noise_sample, timesteps)
    target = scheduler.get_velocity(latents, noise_sample, timesteps)
    prediction = model(noisy, timesteps, motion_scopes, **condition)
    if motion_weight == 0:
        return F.mse_loss(prediction.float(), target.float())
    weights = motion_weights(latents.float(), motion_weight).expand_as(prediction)
    squared = (prediction.float() - target.float()).square()
    return (weights * squared).sum() / weights.sum()


def train_rows(dataset: Path) -> list[dict[str, Any]]:
    rows = read_rows(dataset).get("train")
    if not rows:
        raise TrainError(f"{dataset}: no train split rows (data/train-00000-of-00001.parquet)")
    return rows


def tiny_training_pipeline(
    sizes: TinyInit, text_width: int, image_width: int, levels: MotionLevels
) -> AnimeGamerPipeline:
    """Fresh random tiny models: a transformer of `sizes`, `tiny_vae()` (or the trained VAE at
    `sizes.vae`, whose latent channels, size and frames the transformer takes), a shot encoder
    from the dataset's feature widths."""
    config = tiny_transformer_config(sizes.representation_dim)
    vae_config = AutoencoderKLCogVideoX.load_config(sizes.vae) if sizes.vae else {}
    height, width = latent_size(vae_config) if sizes.vae else TINY_LATENT_SIZE
    if height % sizes.patch_size or width % sizes.patch_size:
        raise TrainError(f"a {height}x{width} latent is not a whole number of "
                         f"{sizes.patch_size}-patches")
    channels = int(vae_config.get("latent_channels", 16))
    config.update(num_layers=sizes.num_layers, motion_scopes=list(levels.values),
                  motion_scope_scale=sizes.motion_scope_scale,
                  noise_correlation=sizes.noise_correlation,
                  reference_channels=sizes.reference_channels,
                  sample_height=height, sample_width=width, patch_size=sizes.patch_size,
                  in_channels=channels, out_channels=channels,
                  temporal_compression_ratio=int(vae_config.get("temporal_compression_ratio", 4)))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(sizes.seed)
        transformer = AnimeGamerTransformer3DModel(**config)
        vae = AutoencoderKLCogVideoX.from_pretrained(sizes.vae) if sizes.vae else tiny_vae()
        encoder = AnimeGamerShotEncoder(
            text_width=text_width, image_width=image_width, width=sizes.representation_dim
        )
    scheduler = CogVideoXDPMScheduler(**scheduler_config())
    return AnimeGamerPipeline(transformer, vae, scheduler, shot_encoder=encoder)


def latent_size(vae_config: dict) -> tuple[int, int]:
    """[height, width] of a CogVideoX VAE's latent for clips of its sample size: every level
    but the last halves space."""
    factor = 2 ** (len(vae_config["block_out_channels"]) - 1)
    return vae_config["sample_height"] // factor, vae_config["sample_width"] // factor


def load_pipeline(folder: Path) -> AnimeGamerPipeline:
    """A pipeline folder with its shot encoder, in fp32 on the CPU."""
    if not (folder / "model_index.json").is_file():
        raise TrainError(f"{folder}: not a pipeline folder (no model_index.json)")
    pipeline = AnimeGamerPipeline.from_pretrained(folder, dtype=torch.float32)
    if pipeline.shot_encoder is None:
        raise TrainError(f"{folder}: the pipeline has no shot_encoder/ to train")
    return pipeline


def initial_pipeline(
    init: DecoderInit, dataset: Path, rows: Sequence[dict[str, Any]], levels: MotionLevels
) -> AnimeGamerPipeline:
    if init.pipeline is not None:
        return load_pipeline(init.pipeline)
    assert init.tiny is not None
    text, image = read_features(dataset, rows[0])
    return tiny_training_pipeline(init.tiny, text.shape[-1], image.shape[-1], levels)


def cached_latents(
    accelerator: Accelerator, vae: nn.Module, rows: Sequence[dict[str, Any]], dataset: Path,
    out: Path,
) -> LatentCache:
    """Encode the clips not cached yet (the processes share the work), then put the VAE back
    on the CPU: training does not need it."""
    vae.requires_grad_(False).eval()
    cache = LatentCache.for_vae(out / LATENTS, vae)
    mine = cache.missing(rows)[accelerator.process_index :: accelerator.num_processes]
    accelerator.wait_for_everyone()  # every process has its share before any is written
    if mine:
        vae.to(accelerator.device)
        cache.fill(mine, dataset, vae)
        vae.to("cpu")
    accelerator.wait_for_everyone()
    return cache


def finish(
    pipeline: AnimeGamerPipeline, lora: LoraModel | None, levels: MotionLevels, folder: Path,
    accelerator: Accelerator,
) -> Path:
    """Merge the LoRA, store the unconditional representation and the motion-scope table in
    the transformer, and save the pipeline (main process)."""
    accelerator.wait_for_everyone()
    if lora is not None:
        lora.merge_and_unload()
    transformer = pipeline.transformer
    transformer.requires_grad_(False)
    if transformer.is_gradient_checkpointing:
        transformer.disable_gradient_checkpointing()
    pipeline.to("cpu")
    encoder = pipeline.shot_encoder
    assert encoder is not None
    encoder.requires_grad_(False)
    with torch.no_grad():
        transformer.uncond_representation.copy_(encoder.unconditional())
    transformer.register_to_config(motion_scopes=list(levels.values))
    if accelerator.is_main_process:
        pipeline.save_pretrained(folder)
    accelerator.wait_for_everyone()
    return folder


def run_stage(
    accelerator: Accelerator,
    model: ConditionedDecoder,
    make_loss: Callable[[nn.Module], MicroLoss],
    loop: LoopSettings,
    out: Path,
    span: tuple[int, int, int],
    checkpoint: Path | None,
) -> int:
    """Train `model`'s trainable parameters over steps span = (start, end, phase total),
    first loading `checkpoint` (same structure) if given; returns the step reached."""
    start, end, total = span
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=loop.lr, weight_decay=0.0)
    wrapped, optimizer = accelerator.prepare(model, optimizer)
    if checkpoint is not None:
        accelerator.load_state(str(checkpoint))
    reached = max(start, end)
    train_steps(
        accelerator, wrapped, optimizer, trainable, make_loss(wrapped), loop, out,
        start, end, total,
    )
    accelerator.wait_for_everyone()
    accelerator.unwrap_model(wrapped, keep_fp32_wrapper=False)
    accelerator.free_memory()
    return reached


def train_transformer(
    stage: Stage,
    settings: DecoderRecipe | AdaptRecipe,
    seed: int,
    pipeline: AnimeGamerPipeline,
    model: ConditionedDecoder,
    accelerator: Accelerator,
    make_loss: Callable[[nn.Module], MicroLoss],
    loop: LoopSettings,
    out: Path,
    span: tuple[int, int, int],
    checkpoint: Path | None,
    levels: MotionLevels,
    folder: Path,
) -> Path | None:
    """The stage that trains the transformer (phase a's joint stage, phase c): a LoRA, or every
    weight with `transformer: full`; once the phase's last step is reached, the merged pipeline
    is saved to `folder` (returned), else None."""
    full = settings.transformer == "full"
    lora = None if full else add_lora(pipeline.transformer, settings, seed)
    set_trainable(model, stage, full)
    run_stage(accelerator, model, make_loss, loop, out, span, checkpoint)
    if span[1] < span[2]:
        return None
    return finish(pipeline, lora, levels, folder, accelerator)


def _resume_point(
    out: Path, phase: str, resume: bool, accelerator: Accelerator
) -> tuple[int, Path | None]:
    """The step and checkpoint a run starts from (step 0 when `resume` finds none). A fresh
    run refuses a folder that holds the phase's checkpoints: a later resume could otherwise
    pick up another run's."""
    found = latest_checkpoint(out, phase)
    if found is not None and not resume:
        raise TrainError(
            f"{out / CHECKPOINTS / phase} holds checkpoints: pass --resume, or remove it"
        )
    step, folder = found if found is not None else (0, None)
    if accelerator.is_main_process:
        trim_losses(losses_path(out, phase), step)
    accelerator.wait_for_everyone()
    return step, folder


def train_decoder(
    dataset: Path,
    out: Path,
    recipe: Recipe,
    accelerator: Accelerator,
    resume: bool = False,
    max_steps: int | None = None,
) -> Path | None:
    """Phase a → the pipeline folder OUT/decoder, or None when `max_steps` stopped the run
    first (its checkpoint is saved; `resume` continues)."""
    settings = recipe.decoder
    if settings is None:
        raise TrainError("the recipe has no 'decoder' section (phase a)")
    step, checkpoint = _resume_point(out, DECODER, resume, accelerator)
    rows = train_rows(dataset)
    levels = levels_of(dataset)
    pipeline = initial_pipeline(settings.init, dataset, rows, levels)
    transformer, encoder = pipeline.transformer, pipeline.shot_encoder
    assert encoder is not None
    cache = cached_latents(accelerator, pipeline.vae, rows, dataset, out)
    data = ShotDataset(rows, dataset, cache, levels)
    model = ConditionedDecoder(transformer, encoder)
    if recipe.gradient_checkpointing:
        transformer.enable_gradient_checkpointing()
    scaling = float(pipeline.vae.config.scaling_factor)
    scheduler = pipeline.scheduler
    loop = LoopSettings(
        DECODER, recipe.seed, recipe.checkpoint_every, recipe.log_every, settings.max_grad_norm,
        settings.lr, settings.lr_schedule,
    )
    warmup = settings.warmup_steps
    total = warmup + settings.joint_steps
    stop = total if max_steps is None else min(total, max_steps)
    noise = pipeline.noise_prior

    def make_loss(wrapped: nn.Module) -> MicroLoss:
        device = accelerator.device

        def micro_loss(micro: int, generator: torch.Generator) -> torch.Tensor:
            indices = sample_indices(
                len(data), settings.batch_size, micro, recipe.seed,
                accelerator.process_index, accelerator.num_processes,
            )
            batch = {k: v.to(device) for k, v in collate([data[i] for i in indices]).items()}
            latents = draw_latents(batch["latent_mean"], batch["latent_std"], scaling, generator)
            text, image = cfg_dropout(
                batch["text_features"], batch["image_features"], settings.cfg_dropout, generator
            )
            return v_prediction_loss(
                wrapped, scheduler, latents, batch["motion_scope"], generator,
                settings.motion_weight, noise, text_features=text, image_features=image,
            )

        return micro_loss

    # a checkpoint at or before the end of warm-up holds the model without its LoRA
    if step < warmup or (checkpoint is not None and step <= warmup):
        set_trainable(model, "warmup")
        step = run_stage(
            accelerator, model, make_loss, loop, out,
            (step, min(warmup, stop), total), checkpoint,
        )
        checkpoint = None
    if step >= stop and stop < total:
        return None
    return train_transformer(
        "joint", settings, recipe.seed, pipeline, model, accelerator, make_loss, loop, out,
        (step, stop, total), checkpoint, levels, out / DECODER,
    )


def load_game_state(folder: Path, accelerator: Accelerator) -> GameStateModel:
    """The frozen game-state model of phase c."""
    from animegamer.models.game_state import GameStateModel

    if not folder.is_dir():
        raise TrainError(f"{folder}: no game-state model (train it with `game-state` first)")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(
        str(accelerator.mixed_precision), torch.float32
    )
    model = GameStateModel.from_pretrained(folder, device=accelerator.device, dtype=dtype)
    return model.requires_grad_(False).eval()


def predicted_representations(
    model: GameStateModel,
    windows: Sequence[EpisodeWindow],
    history: list[list[torch.Tensor]],
) -> torch.Tensor:
    """The game-state model's representation [B, 226, D] of each window's target shot."""
    from animegamer.train.game_state_phase import target_representations

    return target_representations(model, windows, history)


def adapt(
    dataset: Path,
    out: Path,
    recipe: Recipe,
    accelerator: Accelerator,
    resume: bool = False,
    max_steps: int | None = None,
    game_state: Path | None = None,
    decoder: Path | None = None,
) -> Path | None:
    """Phase c → the pipeline folder OUT/decoder_adapted (None when `max_steps` stopped the
    run first). The decoder comes from OUT/decoder and the game-state model from
    OUT/game_state unless given."""
    from animegamer.train.episodes import episode_windows

    settings: AdaptRecipe | None = recipe.adapt
    if settings is None:
        raise TrainError("the recipe has no 'adapt' section (phase c)")
    step, checkpoint = _resume_point(out, ADAPT, resume, accelerator)
    pipeline = load_pipeline(decoder or out / DECODER)
    transformer, encoder = pipeline.transformer, pipeline.shot_encoder
    assert encoder is not None
    rows = train_rows(dataset)
    levels = levels_of(dataset)
    windows = episode_windows(rows, settings.max_turns, recipe.seed)
    cache = cached_latents(accelerator, pipeline.vae, rows, dataset, out)
    data = ShotDataset(rows, dataset, cache, levels)
    position = {row["shot_id"]: index for index, row in enumerate(rows)}
    device = accelerator.device
    game_state_model = load_game_state(game_state or out / GAME_STATE, accelerator)
    encoder.requires_grad_(False).eval().to(device)
    model = ConditionedDecoder(transformer)
    if recipe.gradient_checkpointing:
        transformer.enable_gradient_checkpointing()
    scaling = float(pipeline.vae.config.scaling_factor)
    scheduler = pipeline.scheduler
    loop = LoopSettings(
        ADAPT, recipe.seed, recipe.checkpoint_every, recipe.log_every, settings.max_grad_norm,
        settings.lr, settings.lr_schedule,
    )
    total = settings.steps
    stop = total if max_steps is None else min(total, max_steps)

    @torch.no_grad()
    def condition(chosen: Sequence[EpisodeWindow], generator: torch.Generator) -> torch.Tensor:
        history = [
            [
                encoder.project(*(f[None].to(device) for f in read_features(dataset, row)))[0]
                for row in window.history
            ]
            for window in chosen
        ]
        predicted = predicted_representations(game_state_model, chosen, history)
        predicted = predicted.to(device, torch.float32)
        drop = torch.rand(len(chosen), generator=generator) < settings.uncond_dropout
        uncond = transformer.uncond_representation.to(predicted)
        return torch.where(drop.to(device)[:, None, None], uncond, predicted)

    noise = pipeline.noise_prior

    def make_loss(wrapped: nn.Module) -> MicroLoss:
        def micro_loss(micro: int, generator: torch.Generator) -> torch.Tensor:
            indices = sample_indices(
                len(windows), settings.batch_size, micro, recipe.seed,
                accelerator.process_index, accelerator.num_processes,
            )
            chosen = [windows[i] for i in indices]
            samples = [data[position[window.target["shot_id"]]] for window in chosen]
            batch = {k: v.to(device) for k, v in collate(samples).items()}
            latents = draw_latents(batch["latent_mean"], batch["latent_std"], scaling, generator)
            return v_prediction_loss(
                wrapped, scheduler, latents, batch["motion_scope"], generator,
                settings.motion_weight, noise, representation=condition(chosen, generator),
            )

        return micro_loss

    return train_transformer(
        "adapt", settings, recipe.seed, pipeline, model, accelerator, make_loss, loop, out,
        (step, stop, total), checkpoint, levels, out / ADAPTED,
    )


def load_shot_encoder(folder: Path) -> AnimeGamerShotEncoder:
    """The shot encoder of a pipeline folder (phase a's output), for phase b."""
    path = folder / "shot_encoder"
    if not path.is_dir():
        raise TrainError(f"{path}: missing (run the decoder phase first)")
    return AnimeGamerShotEncoder.from_pretrained(path)
